#include "cuda/cuda_host_staging.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cuda/cuda_check.h"

namespace ballast::cuda_internal {
namespace {

class CudaHostStaging final : public internal::HostStaging {
 public:
  CudaHostStaging(std::shared_ptr<StreamContext> ctx, std::chrono::nanoseconds wait_limit)
      : ctx_(std::move(ctx)), wait_limit_(wait_limit) {}

  ~CudaHostStaging() override {
    if (host_ == nullptr) return;
    ScopedDevice scoped(ctx_->device());
    // Copies queued on the memory must be done before it goes.
    cudaStreamSynchronize(ctx_->stream());
    cudaFreeHost(host_);
    cudaGetLastError();
  }

  // Device memory of this device (or managed memory) is staged; host memory, pinned or
  // not, goes to the host communicator as it is.
  absl::StatusOr<bool> IsBackendMemory(const void* ptr) override {
    return ctx_->IsDeviceMemory(ptr);
  }

  absl::StatusOr<char*> HostMemory(size_t bytes) override {
    if (bytes <= capacity_) return host_;
    ScopedDevice scoped(ctx_->device());
    BALLAST_RETURN_IF_ERROR(scoped.status());
    if (host_ != nullptr) {
      BALLAST_RETURN_IF_ERROR(ctx_->WaitForStream("host staging memory", wait_limit_));
      BALLAST_CUDA_RETURN_IF_ERROR(cudaFreeHost(host_));
      host_ = nullptr;
      capacity_ = 0;
    }
    // Pinned, so the copies are real DMA and run asynchronously on the stream.
    const size_t want = std::max(bytes, 2 * capacity_);
    void* raw = nullptr;
    BALLAST_CUDA_RETURN_IF_ERROR(cudaMallocHost(&raw, want));
    host_ = static_cast<char*>(raw);
    capacity_ = want;
    return host_;
  }

  absl::Status QueueToHost(const void* src, void* host_dst, size_t bytes) override {
    ScopedDevice scoped(ctx_->device());
    BALLAST_RETURN_IF_ERROR(scoped.status());
    return BALLAST_CUDA_STATUS(
        cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, ctx_->stream()));
  }

  absl::Status QueueToBackend(const void* host_src, void* dst, size_t bytes) override {
    ScopedDevice scoped(ctx_->device());
    BALLAST_RETURN_IF_ERROR(scoped.status());
    return BALLAST_CUDA_STATUS(
        cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, ctx_->stream()));
  }

  absl::Status Wait() override {
    ScopedDevice scoped(ctx_->device());
    BALLAST_RETURN_IF_ERROR(scoped.status());
    return ctx_->WaitForStream("the compute and copies before a host-staged collective",
                               wait_limit_);
  }

 private:
  std::shared_ptr<StreamContext> ctx_;
  const std::chrono::nanoseconds wait_limit_;
  char* host_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace

std::unique_ptr<internal::HostStaging> NewCudaHostStaging(std::shared_ptr<StreamContext> ctx,
                                                          std::chrono::nanoseconds wait_limit) {
  return std::make_unique<CudaHostStaging>(std::move(ctx), wait_limit);
}

}  // namespace ballast::cuda_internal
