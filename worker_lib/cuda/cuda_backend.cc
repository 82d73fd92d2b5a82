// The CUDA backend, wired from its parts (each file one concern, as cpu/ is):
//   cuda_check.h         one error-check macro family per library (CUDA, cuBLAS, NCCL)
//   stream_context.h     the device, the stream (own, or the caller's) and a private pool
//   cuda_compute.h       cuBLAS and the kernels of cuda_kernels.cu on that stream
//   cuda_timer.h         event-pair interval timers, read at the step's end
//   nccl_communicator.h  NCCL on the stream, timed by a watchdog thread, no host waits
//   cuda_host_staging.h  + internal/staged_communicator.h: Gloo over pinned host copies,
//                        for several ranks on one GPU
// Semantics follow ballast/compute.h and ballast/communicator.h; the CPU backend is the
// reference implementation.
//
// Threads. A backend is used by one thread at a time (its rank's thread). Every entry point
// makes the backend's device current for its own scope and gives the caller's back.
// Ranks with NCCL peers run one process per GPU, which CreateCudaBackend enforces
// (internal/cuda_device_claims.h); host-staged ranks may share a GPU, in threads or
// processes.
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "ballast/backend.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "cpu/gloo_communicator.h"
#include "cuda/cuda_compute.h"
#include "cuda/cuda_host_staging.h"
#include "cuda/nccl_communicator.h"
#include "cuda/stream_context.h"
#include "gloo/rendezvous/store.h"
#include "internal/cuda_device_claims.h"
#include "internal/guarded_communicator.h"
#include "internal/staged_communicator.h"

namespace ballast {
namespace {

using cuda_internal::StreamContext;

class CudaBackend : public Backend {
 public:
  CudaBackend(internal::CudaDeviceClaim claim, std::shared_ptr<StreamContext> ctx,
              std::unique_ptr<Compute> compute, std::unique_ptr<Communicator> comm)
      : claim_(std::move(claim)),
        ctx_(std::move(ctx)),
        compute_(std::move(compute)),
        comm_(std::move(comm)) {}

  Compute& compute() override { return *compute_; }
  Communicator& comm() override { return *comm_; }
  const char* name() const override { return "cuda"; }

 private:
  // Declaration order is destruction order reversed: the communicator goes first (it may
  // still wait on the stream), the stream next, the claim on the device last.
  internal::CudaDeviceClaim claim_;
  std::shared_ptr<StreamContext> ctx_;
  std::unique_ptr<Compute> compute_;
  std::unique_ptr<Communicator> comm_;
};

absl::Status ValidateOptions(const CudaBackendOptions& options) {
  if (options.size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("CudaBackendOptions.size must be >= 1, got ", options.size));
  }
  if (options.rank < 0 || options.rank >= options.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("CudaBackendOptions.rank ", options.rank, " outside [0, ", options.size, ")"));
  }
  if (options.device < kDeviceFromLocalRank) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CudaBackendOptions.device must be >= 0 or kDeviceFromLocalRank, got ", options.device));
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("CudaBackendOptions.timeout must be > 0, got ",
                                                   absl::FormatDuration(options.timeout)));
  }
  if (options.collectives != CudaCollectives::kNccl &&
      options.collectives != CudaCollectives::kHostStaged) {
    return absl::InvalidArgumentError("CudaBackendOptions.collectives is not a CudaCollectives");
  }
  return absl::OkStatus();
}

// Gloo between the ranks (host memory), behind the staging copies and the compute
// contract's guard.
absl::StatusOr<std::unique_ptr<Communicator>> HostStagedCommunicator(
    const CudaBackendOptions& options, const std::shared_ptr<StreamContext>& ctx) {
  auto* store = static_cast<gloo::rendezvous::Store*>(options.store.handle().get());
  if (store == nullptr) {
    return absl::InvalidArgumentError("CudaBackendOptions.store holds no rendezvous store");
  }
  BALLAST_ASSIGN_OR_RETURN(
      std::unique_ptr<Communicator> gloo,
      internal::GlooCommunicator::Connect(options.rank, options.size, *store, options.prefix,
                                          options.hostname, options.timeout));
  // Compute that never ends is given as long as NCCL's watchdog gives it.
  const auto wait_limit =
      4 * absl::ToChronoNanoseconds(std::min(options.timeout, absl::Hours(24 * 365)));
  BALLAST_ASSIGN_OR_RETURN(
      std::unique_ptr<Communicator> staged,
      internal::StagedCommunicator::Create(std::move(gloo),
                                           cuda_internal::NewCudaHostStaging(ctx, wait_limit)));
  return std::unique_ptr<Communicator>(
      new internal::GuardedCommunicator(std::move(staged), ctx->compute_failure()));
}

}  // namespace

int CudaDeviceCount() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

bool CudaAvailable() { return CudaDeviceCount() > 0; }

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const CudaBackendOptions& options) {
  // Arguments first, so a bad configuration is reported as such on any machine.
  BALLAST_RETURN_IF_ERROR(ValidateOptions(options));
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    cudaGetLastError();
    return absl::UnavailableError(
        absl::StrCat("no usable CUDA device: cudaGetDeviceCount failed: ", cudaGetErrorName(error),
                     " (", cudaGetErrorString(error), ")"));
  }
  if (count == 0) return absl::UnavailableError("no usable CUDA device: none found");
  BALLAST_ASSIGN_OR_RETURN(const int device, ResolveCudaDevice(options.device, options.rank, count,
                                                               std::getenv("LOCAL_RANK")));
  // With NCCL peers, one process per GPU (internal/cuda_device_claims.h).
  const bool nccl = options.collectives == CudaCollectives::kNccl;
  internal::CudaDeviceClaim claim;
  if (nccl && options.size > 1) {
    BALLAST_ASSIGN_OR_RETURN(claim, internal::CudaDeviceClaim::Claim(device));
  }
  BALLAST_ASSIGN_OR_RETURN(
      std::shared_ptr<StreamContext> ctx,
      StreamContext::Create(device, options.stream.has_value()
                                        ? std::optional(static_cast<cudaStream_t>(*options.stream))
                                        : std::nullopt));
  BALLAST_ASSIGN_OR_RETURN(std::unique_ptr<Compute> compute,
                           cuda_internal::CreateCudaCompute(ctx, options.gemm_precision));
  std::unique_ptr<Communicator> comm;
  if (nccl) {
    BALLAST_ASSIGN_OR_RETURN(comm, cuda_internal::CreateNcclCommunicator(options, ctx));
  } else {
    BALLAST_ASSIGN_OR_RETURN(comm, HostStagedCommunicator(options, ctx));
  }
  int nccl_version = 0;
  ncclGetVersion(&nccl_version);
  BALLAST_LOG(INFO) << "cuda backend: prefix=" << options.prefix << " rank " << options.rank
                    << " of " << options.size << " on device " << device << " with "
                    << (nccl ? absl::StrCat("NCCL ", nccl_version) : "host-staged Gloo")
                    << " collectives"
                    << (options.stream.has_value() ? " on the caller's stream" : "");
  return std::make_unique<CudaBackend>(std::move(claim), std::move(ctx), std::move(compute),
                                       std::move(comm));
}

}  // namespace ballast
