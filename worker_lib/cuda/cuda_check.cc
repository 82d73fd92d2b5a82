#include "cuda/cuda_check.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace ballast::cuda_internal {
namespace {

const char* Basename(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash == nullptr ? path : slash + 1;
}

absl::StatusCode CublasErrorCode(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_ALLOC_FAILED:
      return absl::StatusCode::kResourceExhausted;
    case CUBLAS_STATUS_INVALID_VALUE:
      return absl::StatusCode::kInvalidArgument;
    case CUBLAS_STATUS_NOT_INITIALIZED:
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return absl::StatusCode::kUnavailable;
    default:
      return absl::StatusCode::kInternal;
  }
}

}  // namespace

absl::StatusCode CudaErrorCode(cudaError_t error) {
  switch (error) {
    case cudaErrorMemoryAllocation:
      return absl::StatusCode::kResourceExhausted;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidConfiguration:
      return absl::StatusCode::kInvalidArgument;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorDevicesUnavailable:
      return absl::StatusCode::kUnavailable;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::Status CudaCallStatus(cudaError_t error, const char* call, const char* file, int line) {
  if (error == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();
  return absl::Status(CudaErrorCode(error),
                      absl::StrCat(call, " failed at ", Basename(file), ":", line, ": ",
                                   cudaGetErrorName(error), " (", cudaGetErrorString(error), ")"));
}

absl::Status CublasCallStatus(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::Status(
      CublasErrorCode(status),
      absl::StrCat(call, " failed at ", Basename(file), ":", line, ": ",
                   cublasGetStatusName(status), " (", cublasGetStatusString(status), ")"));
}

absl::StatusCode NcclErrorCode(ncclResult_t result) {
  switch (result) {
    case ncclInvalidArgument:
      return absl::StatusCode::kInvalidArgument;
    case ncclInvalidUsage:
      return absl::StatusCode::kFailedPrecondition;
    case ncclSystemError:
    case ncclRemoteError:
      // Sockets, peers or the network: the group lost a member or a link.
      return absl::StatusCode::kUnavailable;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::Status NcclResultStatus(ncclResult_t result, const char* call, const char* file, int line) {
  if (result == ncclSuccess || result == ncclInProgress) return absl::OkStatus();
  return absl::Status(
      NcclErrorCode(result),
      absl::StrCat(call, " failed at ", Basename(file), ":", line, ": ", ncclGetErrorString(result),
                   " (last NCCL error: ", ncclGetLastError(nullptr), ")"));
}

}  // namespace ballast::cuda_internal
