// The CUDA backend's IntervalTimer: an event pair per interval on the stream, read only
// when asked (at the step's end), so timing never stalls the stream. Events are recycled
// through a free list.
#ifndef BALLAST_WORKER_LIB_CUDA_CUDA_TIMER_H_
#define BALLAST_WORKER_LIB_CUDA_CUDA_TIMER_H_

#include <cuda_runtime.h>

#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ballast/compute.h"
#include "cuda/stream_context.h"

namespace ballast::cuda_internal {

class CudaIntervalTimer : public IntervalTimer {
 public:
  explicit CudaIntervalTimer(std::shared_ptr<StreamContext> ctx) : ctx_(std::move(ctx)) {}
  ~CudaIntervalTimer() override;

  void Start() override;
  void Stop() override;
  // Waits for the last stopped interval's end event: one of a step's host waits.
  absl::StatusOr<double> Seconds() override;
  void Reset() override;

 private:
  // Keeps the first failure for Seconds(); returns whether `status` is OK.
  bool Defer(absl::Status status);
  absl::StatusOr<cudaEvent_t> TakeEvent();

  std::shared_ptr<StreamContext> ctx_;
  cudaEvent_t open_start_ = nullptr;
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> recorded_;  // stopped, not yet read
  std::vector<cudaEvent_t> spare_;
  double resolved_seconds_ = 0;
  absl::Status deferred_;
};

}  // namespace ballast::cuda_internal

#endif  // BALLAST_WORKER_LIB_CUDA_CUDA_TIMER_H_
