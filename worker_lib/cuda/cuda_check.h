// One error-check function and macro family per library the CUDA backend calls (NCCL's
// CUDACHECK / NCCLCHECK habit): every failure becomes an absl::Status naming the call, the
// file and the line, with a code that says what kind of failure it was.
//
//   BALLAST_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, bytes, kind, stream));
//   absl::Status s = BALLAST_NCCL_STATUS(ncclAllReduce(...));
#ifndef BALLAST_WORKER_LIB_CUDA_CUDA_CHECK_H_
#define BALLAST_WORKER_LIB_CUDA_CUDA_CHECK_H_

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include "absl/status/status.h"
#include "common/status_macros.h"

namespace ballast::cuda_internal {

absl::StatusCode CudaErrorCode(cudaError_t error);
// Also consumes the thread's "last error", so the next launch check (which reads it) does
// not report this failure a second time under another name. Sticky errors (a faulted
// context) stay and keep failing every call, as they should.
absl::Status CudaCallStatus(cudaError_t error, const char* call, const char* file, int line);
absl::Status CublasCallStatus(cublasStatus_t status, const char* call, const char* file, int line);
absl::StatusCode NcclErrorCode(ncclResult_t result);
// ncclInProgress counts as success: every communicator here is non-blocking, so it is the
// normal answer of an enqueue or an init, whose outcome is read later with
// ncclCommGetAsyncError.
absl::Status NcclResultStatus(ncclResult_t result, const char* call, const char* file, int line);

}  // namespace ballast::cuda_internal

#define BALLAST_CUDA_STATUS(call) \
  ::ballast::cuda_internal::CudaCallStatus((call), #call, __FILE__, __LINE__)
#define BALLAST_CUDA_RETURN_IF_ERROR(call) BALLAST_RETURN_IF_ERROR(BALLAST_CUDA_STATUS(call))
#define BALLAST_CUBLAS_STATUS(call) \
  ::ballast::cuda_internal::CublasCallStatus((call), #call, __FILE__, __LINE__)
#define BALLAST_CUBLAS_RETURN_IF_ERROR(call) BALLAST_RETURN_IF_ERROR(BALLAST_CUBLAS_STATUS(call))
#define BALLAST_NCCL_STATUS(call) \
  ::ballast::cuda_internal::NcclResultStatus((call), #call, __FILE__, __LINE__)
#define BALLAST_NCCL_RETURN_IF_ERROR(call) BALLAST_RETURN_IF_ERROR(BALLAST_NCCL_STATUS(call))

#endif  // BALLAST_WORKER_LIB_CUDA_CUDA_CHECK_H_
