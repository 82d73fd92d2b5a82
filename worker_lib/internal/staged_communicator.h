// StagedCommunicator: collectives of a host-memory communicator (Gloo) on buffers that live
// in a backend's memory (a GPU's), by copying them through host staging memory. It is how
// several CUDA ranks share one GPU (NCCL refuses two ranks on one device) and how a CUDA
// rank joins a group whose collectives run on the host.
//
// Per collective: the inputs are queued device -> host after the compute that produced
// them, the host waits once for that queue (the one host wait of a staged collective; the
// compute before it is covered by the same wait), the host communicator runs on the
// staging memory, and the results are queued host -> device, ahead of whatever the rank
// queues next (no wait). Buffers that are already host memory (the plan agreement's int64s) go to
// the host communicator as they are. The host writes the staging memory only after a wait, by which
// point the previous collective's results have left it.
//
//   auto comm = internal::StagedCommunicator::Create(std::move(gloo), std::move(staging));
//
// The copies are the HostStaging's: CUDA's (pinned memory, cudaMemcpyAsync on the
// backend's stream) in worker_lib/cuda/cuda_host_staging.cc; in tests, plain memcpy over
// host memory treated as device memory, so the staging logic runs under the CPU tests.
#ifndef BALLAST_WORKER_LIB_INTERNAL_STAGED_COMMUNICATOR_H_
#define BALLAST_WORKER_LIB_INTERNAL_STAGED_COMMUNICATOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ballast/communicator.h"

namespace ballast::internal {

// Copies between a backend's memory and host memory, queued in the backend's order.
class HostStaging {
 public:
  virtual ~HostStaging() = default;
  // Whether `ptr` is backend memory (staged) rather than host memory (passed through).
  virtual absl::StatusOr<bool> IsBackendMemory(const void* ptr) = 0;
  // Host memory of at least `bytes`, valid until the next call. Queued copies may still
  // use the memory it returned before: to replace it, it waits for them first.
  virtual absl::StatusOr<char*> HostMemory(size_t bytes) = 0;
  // Queued after everything queued before (the compute that produced `src`).
  virtual absl::Status QueueToHost(const void* src, void* host_dst, size_t bytes) = 0;
  // Queued ahead of everything queued after (the compute that reads `dst`).
  virtual absl::Status QueueToBackend(const void* host_src, void* dst, size_t bytes) = 0;
  // Waits until everything queued so far has run.
  virtual absl::Status Wait() = 0;
};

class StagedCommunicator final : public Communicator {
 public:
  static absl::StatusOr<std::unique_ptr<StagedCommunicator>> Create(
      std::unique_ptr<Communicator> host, std::unique_ptr<HostStaging> staging);

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  absl::Status AllReduceSum(float* data, size_t n) override;
  absl::Status AllReduceMin(int64_t* data, size_t n) override;
  absl::Status Broadcast(float* data, size_t n, int root) override;
  absl::Status Reduce(float* data, size_t n, int root) override;
  absl::Status AllGather(const float* in, size_t n, float* out) override;
  absl::Status Exchange(absl::Span<const PeerTransfer> sends,
                        absl::Span<const PeerTransfer> recvs) override;

  // Bytes copied each way so far (what staging costs; tests check it happens).
  int64_t staged_bytes() const { return staged_bytes_; }

 private:
  // One caller buffer of a collective and where the host communicator sees it.
  struct Staged {
    void* caller = nullptr;
    size_t bytes = 0;
    bool copy_in = false;   // backend -> host before the collective
    bool copy_out = false;  // host -> backend after it
    void* host = nullptr;   // what the host communicator gets
    bool staged = false;    // backend memory, copied through the staging memory
    size_t offset = 0;      // in the staging memory, when staged
  };
  StagedCommunicator(std::unique_ptr<Communicator> host, std::unique_ptr<HostStaging> staging)
      : host_(std::move(host)), staging_(std::move(staging)) {}
  // Stages `buffers`, runs `collective` (which reads each buffer's `host`), unstages.
  template <typename Collective>
  absl::Status Run(absl::Span<Staged> buffers, Collective&& collective);

  std::unique_ptr<Communicator> host_;
  std::unique_ptr<HostStaging> staging_;
  int64_t staged_bytes_ = 0;
};

}  // namespace ballast::internal

#endif  // BALLAST_WORKER_LIB_INTERNAL_STAGED_COMMUNICATOR_H_
