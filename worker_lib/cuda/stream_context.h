// The device, stream and memory of one CUDA backend, shared by its compute, communicator,
// timers and every Buffer it hands out (each holds a reference, so a Buffer that outlives
// its backend still frees into a live pool and stream).
//
// Stream: the backend's own non-blocking stream (no implicit synchronization with the
// legacy default stream that other libraries in the process may use), or a stream the
// caller owns (a framework's current stream: PyTorch's, so Ballast's kernels are ordered
// with the job's own without events), which the backend never destroys.
//
// Memory: a private stream-ordered pool on the device, so allocating and freeing in a
// training loop neither synchronizes nor calls into the driver, and so that keeping freed
// blocks (the pool's release threshold) is this pool's business: the device's default pool,
// which other libraries in the process allocate from, is never changed. Devices without
// memory pools fall back to cudaMalloc.
//
// Device: every entry point makes the backend's device current for its own scope only
// (ScopedDevice), so the caller's current device is the same after a call as before.
#ifndef BALLAST_WORKER_LIB_CUDA_STREAM_CONTEXT_H_
#define BALLAST_WORKER_LIB_CUDA_STREAM_CONTEXT_H_

#include <cuda_runtime.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "internal/compute_checks.h"

namespace ballast::cuda_internal {

// The pause between two polls of a host wait on the device: `polls` made so far.
void PollPause(int polls);

// Makes `device` current for its scope, then gives the thread its previous device back.
// Destructors and Buffer deleters run on whatever thread drops the last reference, and
// entry points on the caller's thread, whose current device is that thread's business.
class ScopedDevice {
 public:
  explicit ScopedDevice(int device);
  ~ScopedDevice();
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;
  // Whether the device could be made current; the call must not go on otherwise.
  const absl::Status& status() const { return status_; }

 private:
  int previous_ = -1;
  absl::Status status_;
};

class StreamContext {
 public:
  // `external`: a stream the caller owns and keeps alive longer than the backend (null is
  // the legacy default stream), or nullopt for a stream of the backend's own.
  static absl::StatusOr<std::shared_ptr<StreamContext>> Create(
      int device, std::optional<cudaStream_t> external);
  ~StreamContext();
  StreamContext(const StreamContext&) = delete;
  StreamContext& operator=(const StreamContext&) = delete;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }

  // The first failure of a void compute call (a launch that failed, or a call the Compute
  // contract refuses, naming the call) since it was last taken. Compute::Synchronize
  // reports it; so does the next collective, which must not run on what the failed call
  // left behind (its peers would get garbage, and this rank's error would read "aborted"
  // instead of the call that failed).
  const std::shared_ptr<internal::ComputeFailure>& compute_failure() const {
    return compute_failure_;
  }

  // The failure that aborted the backend's NCCL communicator (its watchdog's, on its own
  // thread), for Compute::Synchronize to report: the kernels an abort ends leave the
  // stream idle, so a synchronization alone would read OK. Sticky.
  void SetCommunicatorFailure(absl::Status failure);
  absl::Status communicator_failure() const;

  // Whether `ptr` is memory of this device (or managed memory) rather than host memory:
  // what a communicator hands to the device as it is. INVALID_ARGUMENT, naming both
  // devices, for another device's memory.
  absl::StatusOr<bool> IsDeviceMemory(const void* ptr) const;

  // Stream-ordered from the private pool. The caller has made the device current.
  absl::StatusOr<void*> AllocateBytes(size_t bytes) const;
  // Runs from destructors (Buffer deleters), so it can only log. Memory freed here is
  // reused only after the work queued on the stream before the free.
  void FreeBytes(void* ptr) const;

  // Waits until everything queued on the stream so far has run, polling so the wait can
  // end: DEADLINE_EXCEEDED naming `what` after `limit` (a kernel that never ends). One of
  // the few host waits of a step (communicator.h says which).
  absl::Status WaitForStream(const char* what, std::chrono::nanoseconds limit) const;

 private:
  StreamContext(int device, cudaStream_t stream, bool owns_stream, cudaMemPool_t pool)
      : device_(device), stream_(stream), owns_stream_(owns_stream), pool_(pool) {}

  const int device_;
  const cudaStream_t stream_;
  const bool owns_stream_;
  const cudaMemPool_t pool_;  // null: no memory pools on this device (cudaMalloc)
  const std::shared_ptr<internal::ComputeFailure> compute_failure_ =
      std::make_shared<internal::ComputeFailure>();
  mutable absl::Mutex mu_;
  absl::Status communicator_failure_ ABSL_GUARDED_BY(mu_);
};

// A grow-only device buffer (UnitL1 partial sums, communicator staging).
class DeviceScratch {
 public:
  explicit DeviceScratch(std::shared_ptr<StreamContext> ctx) : ctx_(std::move(ctx)) {}
  ~DeviceScratch() { ctx_->FreeBytes(data_); }
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;

  // At least `bytes`; the old contents are not kept. The caller has made the device current.
  absl::StatusOr<char*> Reserve(size_t bytes);

 private:
  std::shared_ptr<StreamContext> ctx_;
  char* data_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace ballast::cuda_internal

#endif  // BALLAST_WORKER_LIB_CUDA_STREAM_CONTEXT_H_
