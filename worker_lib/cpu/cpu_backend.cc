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
#include "internal/guarded_communicator.h"

namespace ballast {
namespace {

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
  auto guarded =
      std::make_unique<internal::GuardedCommunicator>(std::move(comm), std::move(failure));
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
