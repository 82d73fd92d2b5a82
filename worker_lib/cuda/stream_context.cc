#include "cuda/stream_context.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "cuda/cuda_check.h"

namespace ballast::cuda_internal {

void PollPause(int polls) {
  // Spin briefly (a TP step's kernels take tens of microseconds), then sleep so a long
  // wait does not burn a core.
  if (polls < 2000) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

ScopedDevice::ScopedDevice(int device) {
  if (cudaGetDevice(&previous_) != cudaSuccess) {
    cudaGetLastError();
    previous_ = -1;
  }
  if (previous_ != device) status_ = BALLAST_CUDA_STATUS(cudaSetDevice(device));
}

ScopedDevice::~ScopedDevice() {
  int now = -1;
  if (previous_ >= 0 && cudaGetDevice(&now) == cudaSuccess && now != previous_) {
    cudaSetDevice(previous_);
  }
  cudaGetLastError();
}

absl::StatusOr<std::shared_ptr<StreamContext>> StreamContext::Create(
    int device, std::optional<cudaStream_t> external) {
  ScopedDevice scoped(device);
  BALLAST_RETURN_IF_ERROR(scoped.status());
  int pools_supported = 0;
  BALLAST_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&pools_supported, cudaDevAttrMemoryPoolsSupported, device));
  cudaMemPool_t pool = nullptr;
  if (pools_supported != 0) {
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    BALLAST_CUDA_RETURN_IF_ERROR(cudaMemPoolCreate(&pool, &props));
    // Keep freed blocks in the pool across synchronizations. With the default threshold
    // (0) every synchronization hands them back to the driver, and the next training step
    // maps the same memory again. Only this pool: the process's default pool is torch's
    // (or anyone's) to tune.
    uint64_t threshold = std::numeric_limits<uint64_t>::max();
    const absl::Status set = BALLAST_CUDA_STATUS(
        cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    if (!set.ok()) {
      cudaMemPoolDestroy(pool);
      return set;
    }
  }
  cudaStream_t stream = external.value_or(nullptr);
  if (stream != nullptr) {
    // A caller's stream of another device would run our kernels there, on pointers of
    // this one.
    int stream_device = -1;
    absl::Status on = BALLAST_CUDA_STATUS(cudaStreamGetDevice(stream, &stream_device));
    if (on.ok() && stream_device != device) {
      on = absl::InvalidArgumentError(absl::StrCat(
          "the stream given lives on device ", stream_device, ", the backend on device ", device));
    }
    if (!on.ok()) {
      if (pool != nullptr) cudaMemPoolDestroy(pool);
      return on;
    }
  }
  if (!external.has_value()) {
    const absl::Status created =
        BALLAST_CUDA_STATUS(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    if (!created.ok()) {
      if (pool != nullptr) cudaMemPoolDestroy(pool);
      return created;
    }
  }
  return std::shared_ptr<StreamContext>(
      new StreamContext(device, stream, !external.has_value(), pool));
}

StreamContext::~StreamContext() {
  // Errors are ignored: nothing can be reported from here, and at process exit the runtime
  // may already be unloading. Every Buffer holds this context, so the pool is empty here
  // once the stream has run its frees.
  ScopedDevice scoped(device_);
  cudaStreamSynchronize(stream_);
  if (pool_ != nullptr) cudaMemPoolDestroy(pool_);
  if (owns_stream_) cudaStreamDestroy(stream_);
  cudaGetLastError();
}

void StreamContext::SetCommunicatorFailure(absl::Status failure) {
  absl::MutexLock lock(&mu_);
  if (communicator_failure_.ok()) communicator_failure_ = std::move(failure);
}

absl::Status StreamContext::communicator_failure() const {
  absl::MutexLock lock(&mu_);
  return communicator_failure_;
}

absl::StatusOr<bool> StreamContext::IsDeviceMemory(const void* ptr) const {
  cudaPointerAttributes attributes;
  BALLAST_CUDA_RETURN_IF_ERROR(cudaPointerGetAttributes(&attributes, ptr));
  if (attributes.type == cudaMemoryTypeManaged) return true;
  if (attributes.type != cudaMemoryTypeDevice) return false;
  if (attributes.device != device_) {
    return absl::InvalidArgumentError(absl::StrCat("buffer lives on device ", attributes.device,
                                                   ", the backend on device ", device_));
  }
  return true;
}

absl::StatusOr<void*> StreamContext::AllocateBytes(size_t bytes) const {
  void* ptr = nullptr;
  if (pool_ != nullptr) {
    BALLAST_CUDA_RETURN_IF_ERROR(cudaMallocFromPoolAsync(&ptr, bytes, pool_, stream_));
  } else {
    BALLAST_CUDA_RETURN_IF_ERROR(cudaMalloc(&ptr, bytes));
  }
  return ptr;
}

void StreamContext::FreeBytes(void* ptr) const {
  if (ptr == nullptr) return;
  ScopedDevice scoped(device_);
  const cudaError_t error = pool_ != nullptr ? cudaFreeAsync(ptr, stream_) : cudaFree(ptr);
  if (error != cudaSuccess) {
    cudaGetLastError();
    if (error != cudaErrorCudartUnloading) {
      BALLAST_LOG(WARNING) << "cuda backend: freeing device memory on device " << device_
                           << " failed: " << cudaGetErrorName(error);
    }
  }
}

absl::Status StreamContext::WaitForStream(const char* what, std::chrono::nanoseconds limit) const {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (int polls = 0;; ++polls) {
    const cudaError_t query = cudaStreamQuery(stream_);
    if (query == cudaSuccess) return absl::OkStatus();
    if (query != cudaErrorNotReady) {
      const absl::Status status = BALLAST_CUDA_STATUS(query);
      return absl::Status(status.code(),
                          absl::StrCat("waiting for ", what, ": ", status.message()));
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("waiting for ", what, ": the work queued on device ", device_,
                       " did not complete within ", absl::FormatDuration(absl::FromChrono(limit))));
    }
    PollPause(polls);
  }
}

absl::StatusOr<char*> DeviceScratch::Reserve(size_t bytes) {
  if (bytes <= capacity_) return data_;
  // Geometric growth: callers ask for slowly varying sizes.
  const size_t want = std::max(bytes, 2 * capacity_);
  // Stream-ordered free: work still queued on the old buffer completes first.
  ctx_->FreeBytes(data_);
  data_ = nullptr;
  capacity_ = 0;
  BALLAST_ASSIGN_OR_RETURN(void* raw, ctx_->AllocateBytes(want));
  data_ = static_cast<char*>(raw);
  capacity_ = want;
  return data_;
}

}  // namespace ballast::cuda_internal
