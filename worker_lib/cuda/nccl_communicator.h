// The CUDA backend's NCCL communicator: collectives queued on the backend's stream after
// the compute they depend on, with no host wait per collective; a watchdog thread
// (internal/collective_watchdog.h) times each one and aborts the communicator when one does
// not complete, and from then on every call on this rank fails naming that collective.
//
// Host waits: only a collective with a host buffer to fill (the plan agreement's int64s)
// waits, for its own result; at one rank not even that (every collective of one rank is
// the identity and needs no NCCL call). communicator.h states the contract.
#ifndef BALLAST_WORKER_LIB_CUDA_NCCL_COMMUNICATOR_H_
#define BALLAST_WORKER_LIB_CUDA_NCCL_COMMUNICATOR_H_

#include <memory>

#include "absl/status/statusor.h"
#include "ballast/backend.h"
#include "ballast/communicator.h"
#include "cuda/stream_context.h"

namespace ballast::cuda_internal {

// Meets the other ranks through `options.store` (rank 0 publishes the NCCL unique id under
// "<prefix>/nccl_id") and waits, up to `options.timeout`, until every rank has joined.
absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(
    const CudaBackendOptions& options, std::shared_ptr<StreamContext> ctx);

}  // namespace ballast::cuda_internal

#endif  // BALLAST_WORKER_LIB_CUDA_NCCL_COMMUNICATOR_H_
