// The CUDA backend's Compute: cuBLAS GEMMs and the kernels of cuda_kernels.cu, every call
// queued on the backend's stream (stream_context.h). Semantics follow ballast/compute.h;
// the CPU backend is the reference implementation. Void calls that fail record their first
// failure in the stream context; Synchronize() and the next collective report it.
#ifndef BALLAST_WORKER_LIB_CUDA_CUDA_COMPUTE_H_
#define BALLAST_WORKER_LIB_CUDA_CUDA_COMPUTE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "ballast/backend.h"
#include "ballast/compute.h"
#include "cuda/stream_context.h"

namespace ballast::cuda_internal {

absl::StatusOr<std::unique_ptr<Compute>> CreateCudaCompute(std::shared_ptr<StreamContext> ctx,
                                                           GemmPrecision precision);

}  // namespace ballast::cuda_internal

#endif  // BALLAST_WORKER_LIB_CUDA_CUDA_COMPUTE_H_
