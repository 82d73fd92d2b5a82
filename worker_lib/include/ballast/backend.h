// A backend bundles a Compute (kernels, memory) and a Communicator (collectives) for one
// rank of one TP group. Two implementations:
//
//   CPU:  OpenBLAS GEMMs + Gloo collectives over TCP.
//   CUDA: cuBLAS + NCCL on one stream (built with -DBALLAST_WITH_CUDA=ON); or cuBLAS with
//         Gloo collectives over pinned host copies, so several ranks can share one GPU.
//
// Ranks find each other through a RendezvousStore: in-process (ranks as threads, tests),
// a directory every rank can see (processes on one host, or hosts sharing a filesystem),
// or a Redis server every rank can reach (processes on any hosts).
//
//   auto store = ballast::RendezvousStore::FileSystem("/tmp/ballast-run-42");
//   ballast::CpuBackendOptions opts;
//   opts.rank = rank; opts.size = 2; opts.store = *store; opts.prefix = "run-42";
//   absl::StatusOr<std::unique_ptr<ballast::Backend>> backend = ballast::CreateCpuBackend(opts);
#ifndef BALLAST_BACKEND_H_
#define BALLAST_BACKEND_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ballast/communicator.h"
#include "ballast/compute.h"

namespace ballast {

class Clock;

// Where ranks publish and find each other's addresses. Cheap to copy (shared handle).
class RendezvousStore {
 public:
  // Ranks that are threads of one process share one of these.
  static RendezvousStore InProcess();
  // Ranks share a directory; created if missing. Keys are files that are never removed,
  // so every run needs a fresh directory or a unique prefix.
  static absl::StatusOr<RendezvousStore> FileSystem(const std::string& directory);
  // Ranks share a Redis server; fails (UNAVAILABLE) when it cannot be reached. Keys are
  // not removed either: use a unique prefix per run.
  static absl::StatusOr<RendezvousStore> Redis(const std::string& host, int port);

  // A store some other code made: `gloo_store` must hold a gloo::rendezvous::Store, e.g.
  // torch's adapter over a PyTorch job's own c10d store (python/ballast/torch).
  static RendezvousStore FromGlooStore(std::shared_ptr<void> gloo_store) {
    return RendezvousStore(std::move(gloo_store));
  }

  // Implementation detail: a gloo::rendezvous::Store.
  const std::shared_ptr<void>& handle() const { return handle_; }

 private:
  explicit RendezvousStore(std::shared_ptr<void> handle) : handle_(std::move(handle)) {}
  std::shared_ptr<void> handle_;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Compute& compute() = 0;
  virtual Communicator& comm() = 0;
  // "cpu" or "cuda", for logs and benchmark output.
  virtual const char* name() const = 0;
};

struct CpuBackendOptions {
  int rank = 0;
  int size = 1;
  RendezvousStore store = RendezvousStore::InProcess();
  // Namespaces this group's keys in the store; must be unique per run and per group.
  std::string prefix = "ballast";
  // Address this rank listens on for its peers.
  std::string hostname = "127.0.0.1";
  // How long a collective waits for a missing peer before failing.
  absl::Duration timeout = absl::Seconds(60);
  // OpenBLAS threads for this process; one per rank by default so co-located ranks do not
  // oversubscribe cores. 0 leaves OpenBLAS's own setting alone.
  int blas_threads = 1;
  // Clock for compute / collective timers; null = real clock. Not owned.
  const Clock* clock = nullptr;
};

absl::StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(const CpuBackendOptions& options);

// A CPU backend (OpenBLAS) whose collectives run on a communicator the caller made, e.g.
// over a PyTorch job's own process group (python/ballast/torch). `blas_threads` as in
// CpuBackendOptions (0 leaves OpenBLAS's setting, which a host framework may share, alone).
absl::StatusOr<std::unique_ptr<Backend>> CreateCpuBackendOn(std::unique_ptr<Communicator> comm,
                                                            int blas_threads = 0,
                                                            const Clock* clock = nullptr);

// Precision of the CUDA backend's GEMMs. Weights, AdamW moments, activations and the
// all-reduce stay fp32 in every mode (fp32 master weights, fp32 accumulation); kBf16 and
// kFp16 round the GEMM inputs to 16 bits inside cuBLAS (CUBLAS_COMPUTE_32F_FAST_16BF /
// _16F) so they run on tensor cores, accumulating in fp32. The CPU backend is fp32 only.
enum class GemmPrecision { kFp32, kBf16, kFp16 };

// CudaBackendOptions::device: take the device from the process's local rank.
inline constexpr int kDeviceFromLocalRank = -1;

// Where a CUDA backend's collectives run.
enum class CudaCollectives {
  // NCCL, queued on the backend's stream with no host wait per collective (a watchdog
  // thread times them: communicator.h). One process per GPU, as NCCL requires.
  kNccl,
  // Gloo between the ranks, each collective's device buffers copied through pinned host
  // memory: one host wait per collective, but any number of ranks, threads or processes,
  // may share one GPU (NCCL refuses two ranks on one device). For tests and one-GPU
  // machines, and for groups whose collectives run on the host anyway.
  kHostStaged,
};

struct CudaBackendOptions {
  GemmPrecision gemm_precision = GemmPrecision::kFp32;
  int rank = 0;
  int size = 1;
  // CUDA device ordinal among the visible ones (CUDA_VISIBLE_DEVICES), or
  // kDeviceFromLocalRank: LOCAL_RANK when the launcher sets it (torchrun does), else
  // `rank`. One process per GPU is the supported layout: see ResolveCudaDevice.
  int device = kDeviceFromLocalRank;
  // Host-staged ranks that share a GPU name it here (device 0 on a one-GPU machine).
  CudaCollectives collectives = CudaCollectives::kNccl;
  // Where ranks find each other: rank 0's NCCL unique id (kNccl), the Gloo mesh
  // (kHostStaged). Keys are namespaced by `prefix`, unique per run and group.
  RendezvousStore store = RendezvousStore::InProcess();
  std::string prefix = "ballast";
  // kHostStaged: the address this rank listens on for its Gloo peers.
  std::string hostname = "127.0.0.1";
  // How long a collective may run, from when its inputs are ready, before the group is
  // declared broken (a peer is missing or stalled).
  absl::Duration timeout = absl::Seconds(60);
  // A cudaStream_t the caller owns and keeps alive longer than the backend, e.g. PyTorch's
  // current stream (torch.cuda.current_stream().cuda_stream; null is the legacy default
  // stream, PyTorch's default): every kernel, copy and collective of the backend is queued
  // on it, ordered with the caller's own work, and the backend never destroys it.
  // Unset: a non-blocking stream of the backend's own.
  std::optional<void*> stream;
};

// The device a rank uses: `device` itself when >= 0; for kDeviceFromLocalRank, the local
// rank, read from `local_rank_env` (LOCAL_RANK's value, or null when unset) or else
// `rank`. INVALID_ARGUMENT, naming where the number came from, when it is not a device
// of the `visible_devices` (so eight processes on a four-GPU node fail at start rather
// than sharing GPUs, which NCCL refuses later as "duplicate GPU"), or when LOCAL_RANK is
// not a non-negative integer. Needs no GPU.
absl::StatusOr<int> ResolveCudaDevice(int device, int rank, int visible_devices,
                                      const char* local_rank_env);

// True when this build has the CUDA backend and a usable GPU is present.
bool CudaAvailable();
// The GPUs this process can use (0 without the CUDA backend). Like CudaAvailable, it
// initialises CUDA, whose state a fork()ed child cannot use.
int CudaDeviceCount();
// UNIMPLEMENTED when built without CUDA; UNAVAILABLE when no GPU is present.
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const CudaBackendOptions& options);

}  // namespace ballast

#endif  // BALLAST_BACKEND_H_
