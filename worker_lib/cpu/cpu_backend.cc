// The CPU backend (OpenBLAS + Gloo) and the rendezvous stores.
#include <cblas.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/hash_store.h>
// Debian installs hiredis.h under hiredis/.
#define HIREDIS_NESTED_INCLUDE 1
#include <gloo/rendezvous/redis_store.h>

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "ballast/backend.h"
#include "common/status_macros.h"
#include "cpu/cpu_compute.h"
#include "cpu/gloo_communicator.h"
#include "internal/compute_checks.h"

namespace ballast {
namespace {

// The backend's communicator with the compute contract's ordering (as on CUDA): a
// collective after a void compute call that failed does not run on what that call left.
// It returns the call's error, and the communicator is aborted from then on, since this
// rank has skipped a collective its peers are in and the group is out of step for good.
// Aborting closes the Gloo connections, so the peers fail at once instead of at their
// timeout. As on CUDA, a call with nothing to move (n == 0, an empty exchange) or a bad
// root does not take the failure; it is left for the next collective that moves data.
class GuardedCommunicator final : public Communicator {
 public:
  GuardedCommunicator(std::unique_ptr<Communicator> inner,
                      std::shared_ptr<internal::ComputeFailure> failure)
      : rank_(inner->rank()),
        size_(inner->size()),
        inner_(std::move(inner)),
        failure_(std::move(failure)) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::Status AllReduceSum(float* data, size_t n) override {
    if (n == 0) return aborted_;
    BALLAST_RETURN_IF_ERROR(Ready("AllReduceSum"));
    return inner_->AllReduceSum(data, n);
  }
  absl::Status AllReduceMin(int64_t* data, size_t n) override {
    if (n == 0) return aborted_;
    BALLAST_RETURN_IF_ERROR(Ready("AllReduceMin"));
    return inner_->AllReduceMin(data, n);
  }
  absl::Status Broadcast(float* data, size_t n, int root) override {
    BALLAST_RETURN_IF_ERROR(CheckRoot("Broadcast", root));
    if (n == 0) return aborted_;
    BALLAST_RETURN_IF_ERROR(Ready("Broadcast"));
    return inner_->Broadcast(data, n, root);
  }
  absl::Status Reduce(float* data, size_t n, int root) override {
    BALLAST_RETURN_IF_ERROR(CheckRoot("Reduce", root));
    if (n == 0) return aborted_;
    BALLAST_RETURN_IF_ERROR(Ready("Reduce"));
    return inner_->Reduce(data, n, root);
  }
  absl::Status AllGather(const float* in, size_t n, float* out) override {
    if (n == 0) return aborted_;
    BALLAST_RETURN_IF_ERROR(Ready("AllGather"));
    return inner_->AllGather(in, n, out);
  }
  absl::Status Exchange(absl::Span<const PeerTransfer> sends,
                        absl::Span<const PeerTransfer> recvs) override {
    auto empty = [](absl::Span<const PeerTransfer> transfers) {
      return std::all_of(transfers.begin(), transfers.end(),
                         [](const PeerTransfer& t) { return t.count == 0; });
    };
    // Gloo still needs the call (its message tags count calls), but it moves nothing.
    if (empty(sends) && empty(recvs)) {
      BALLAST_RETURN_IF_ERROR(aborted_);
    } else {
      BALLAST_RETURN_IF_ERROR(Ready("Exchange"));
    }
    return inner_->Exchange(sends, recvs);
  }

 private:
  absl::Status CheckRoot(const char* what, int root) const {
    if (root >= 0 && root < size_) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": root ", root, " outside group of size ", size_));
  }

  absl::Status Ready(const char* what) {
    if (!aborted_.ok()) return aborted_;
    absl::Status failed = failure_->Take();
    if (failed.ok()) return absl::OkStatus();
    const absl::Status cause(failed.code(), absl::StrCat(what, " not run: a compute call "
                                                               "before it failed: ",
                                                         failed.message()));
    aborted_ = absl::Status(cause.code(), absl::StrCat("communicator was aborted earlier: ",
                                                       cause.message()));
    inner_.reset();  // closes the connections: the peers' collectives fail now
    return cause;
  }

  const int rank_;
  const int size_;
  std::unique_ptr<Communicator> inner_;  // null once aborted
  std::shared_ptr<internal::ComputeFailure> failure_;
  absl::Status aborted_;
};

class CpuBackend final : public Backend {
 public:
  CpuBackend(std::unique_ptr<internal::CpuCompute> compute, std::unique_ptr<Communicator> comm)
      : compute_(std::move(compute)), comm_(std::move(comm)) {}
  Compute& compute() override { return *compute_; }
  Communicator& comm() override { return *comm_; }
  const char* name() const override { return "cpu"; }

 private:
  std::unique_ptr<internal::CpuCompute> compute_;
  std::unique_ptr<Communicator> comm_;
};

}  // namespace

RendezvousStore RendezvousStore::InProcess() {
  return RendezvousStore(std::make_shared<gloo::rendezvous::HashStore>());
}

absl::StatusOr<RendezvousStore> RendezvousStore::FileSystem(const std::string& directory) {
  if (directory.empty()) return absl::InvalidArgumentError("rendezvous directory is empty");
  std::error_code ec;
  std::filesystem::create_directories(directory, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot create rendezvous directory '", directory, "': ", ec.message()));
  }
  // Declared as Store so the shared_ptr<void> deleter destroys it through its real type.
  std::shared_ptr<gloo::rendezvous::Store> store =
      std::make_shared<gloo::rendezvous::FileStore>(directory);
  return RendezvousStore(std::static_pointer_cast<void>(store));
}

absl::StatusOr<RendezvousStore> RendezvousStore::Redis(const std::string& host, int port) {
  if (host.empty()) return absl::InvalidArgumentError("redis host is empty");
  if (port <= 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("redis port ", port, " out of range"));
  }
  // Gloo's RedisStore leaks its connection when the server is unreachable (it throws
  // without redisFree), so probe with hiredis first and free the probe either way.
  const timeval connect_timeout{.tv_sec = 5, .tv_usec = 0};
  redisContext* probe = redisConnectWithTimeout(host.c_str(), port, connect_timeout);
  const std::string probe_error =
      probe == nullptr ? "out of memory" : (probe->err != 0 ? probe->errstr : "");
  if (probe != nullptr) redisFree(probe);
  if (!probe_error.empty()) {
    return absl::UnavailableError(
        absl::StrCat("cannot reach redis at ", host, ":", port, ": ", probe_error));
  }
  try {
    std::shared_ptr<gloo::rendezvous::Store> store =
        std::make_shared<gloo::rendezvous::RedisStore>(host, port);
    return RendezvousStore(std::static_pointer_cast<void>(store));
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot reach redis at ", host, ":", port, ": ", e.what()));
  }
}

namespace {
absl::Status CheckBlasThreads(int blas_threads) {
  if (blas_threads < 0) {
    return absl::InvalidArgumentError(absl::StrCat("blas_threads ", blas_threads, " must be >= 0"));
  }
  return absl::OkStatus();
}
}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateCpuBackendOn(std::unique_ptr<Communicator> comm,
                                                            int blas_threads, const Clock* clock) {
  if (comm == nullptr) return absl::InvalidArgumentError("communicator is null");
  BALLAST_RETURN_IF_ERROR(CheckBlasThreads(blas_threads));
  if (blas_threads > 0) openblas_set_num_threads(blas_threads);
  auto failure = std::make_shared<internal::ComputeFailure>();
  auto compute = std::make_unique<internal::CpuCompute>(clock ? clock : RealClock(), failure);
  auto guarded = std::make_unique<GuardedCommunicator>(std::move(comm), std::move(failure));
  return std::unique_ptr<Backend>(new CpuBackend(std::move(compute), std::move(guarded)));
}

absl::StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(const CpuBackendOptions& options) {
  BALLAST_RETURN_IF_ERROR(CheckBlasThreads(options.blas_threads));
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("timeout must be positive");
  }
  if (options.store.handle() == nullptr) {
    return absl::InvalidArgumentError("rendezvous store is null");
  }
  auto* store = static_cast<gloo::rendezvous::Store*>(options.store.handle().get());
  BALLAST_ASSIGN_OR_RETURN(
      auto comm, internal::GlooCommunicator::Connect(options.rank, options.size, *store,
                                                     options.prefix, options.hostname,
                                                     options.timeout));
  return CreateCpuBackendOn(std::move(comm), options.blas_threads, options.clock);
}

}  // namespace ballast
