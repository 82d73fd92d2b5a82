// The CUDA side of internal/staged_communicator.h: copies between device memory and pinned
// host memory on the backend's stream, for the host-staged collectives that let several
// CUDA ranks share one GPU (CudaCollectives::kHostStaged in ballast/backend.h).
#ifndef BALLAST_WORKER_LIB_CUDA_CUDA_HOST_STAGING_H_
#define BALLAST_WORKER_LIB_CUDA_CUDA_HOST_STAGING_H_

#include <chrono>
#include <memory>

#include "cuda/stream_context.h"
#include "internal/staged_communicator.h"

namespace ballast::cuda_internal {

// `wait_limit` bounds each wait for the stream (compute that never ends).
std::unique_ptr<internal::HostStaging> NewCudaHostStaging(std::shared_ptr<StreamContext> ctx,
                                                          std::chrono::nanoseconds wait_limit);

}  // namespace ballast::cuda_internal

#endif  // BALLAST_WORKER_LIB_CUDA_CUDA_HOST_STAGING_H_
