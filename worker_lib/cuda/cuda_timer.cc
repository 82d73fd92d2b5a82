#include "cuda/cuda_timer.h"

#include "cuda/cuda_check.h"

namespace ballast::cuda_internal {

CudaIntervalTimer::~CudaIntervalTimer() {
  ScopedDevice scoped(ctx_->device());
  if (open_start_ != nullptr) cudaEventDestroy(open_start_);
  for (const auto& [start, stop] : recorded_) {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  for (cudaEvent_t event : spare_) cudaEventDestroy(event);
  cudaGetLastError();
}

void CudaIntervalTimer::Start() {
  ScopedDevice scoped(ctx_->device());
  if (!Defer(scoped.status())) return;
  // A second Start without Stop restarts the open interval.
  if (open_start_ == nullptr) {
    absl::StatusOr<cudaEvent_t> event = TakeEvent();
    if (!Defer(event.status())) return;
    open_start_ = *event;
  }
  if (!Defer(BALLAST_CUDA_STATUS(cudaEventRecord(open_start_, ctx_->stream())))) {
    spare_.push_back(open_start_);
    open_start_ = nullptr;
  }
}

void CudaIntervalTimer::Stop() {
  if (open_start_ == nullptr) return;  // Stop without Start: no interval to close.
  ScopedDevice scoped(ctx_->device());
  if (!Defer(scoped.status())) return;
  absl::StatusOr<cudaEvent_t> stop = TakeEvent();
  if (!Defer(stop.status())) return;
  if (!Defer(BALLAST_CUDA_STATUS(cudaEventRecord(*stop, ctx_->stream())))) {
    spare_.push_back(*stop);
    return;
  }
  recorded_.emplace_back(open_start_, *stop);
  open_start_ = nullptr;
}

absl::StatusOr<double> CudaIntervalTimer::Seconds() {
  if (!deferred_.ok()) {
    absl::Status failure = std::move(deferred_);
    deferred_ = absl::OkStatus();
    return failure;
  }
  ScopedDevice scoped(ctx_->device());
  BALLAST_RETURN_IF_ERROR(scoped.status());
  size_t resolved = 0;
  absl::Status status;
  for (; resolved < recorded_.size(); ++resolved) {
    const auto [start, stop] = recorded_[resolved];
    status = BALLAST_CUDA_STATUS(cudaEventSynchronize(stop));
    float ms = 0;
    if (status.ok()) status = BALLAST_CUDA_STATUS(cudaEventElapsedTime(&ms, start, stop));
    spare_.push_back(start);
    spare_.push_back(stop);
    if (!status.ok()) {
      ++resolved;  // The failed pair is dropped, not retried forever.
      break;
    }
    resolved_seconds_ += static_cast<double>(ms) * 1e-3;
  }
  recorded_.erase(recorded_.begin(), recorded_.begin() + resolved);
  if (!status.ok()) return status;
  return resolved_seconds_;
}

void CudaIntervalTimer::Reset() {
  // An open interval stays open and counts once stopped.
  for (const auto& [start, stop] : recorded_) {
    spare_.push_back(start);
    spare_.push_back(stop);
  }
  recorded_.clear();
  resolved_seconds_ = 0;
  deferred_ = absl::OkStatus();
}

bool CudaIntervalTimer::Defer(absl::Status status) {
  if (status.ok()) return true;
  if (deferred_.ok()) deferred_ = std::move(status);
  return false;
}

absl::StatusOr<cudaEvent_t> CudaIntervalTimer::TakeEvent() {
  if (!spare_.empty()) {
    cudaEvent_t event = spare_.back();
    spare_.pop_back();
    return event;
  }
  cudaEvent_t event = nullptr;
  BALLAST_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event, cudaEventDefault));
  return event;
}

}  // namespace ballast::cuda_internal
