#include "testing/rank_threads.h"

#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "gloo/rendezvous/store.h"
#include "testing/timeouts.h"
#include "worker_lib/cpu/gloo_communicator.h"
#include "worker_lib/internal/staged_communicator.h"

namespace ballast::testing {
namespace {

// "cpu-staged": every buffer is treated as backend memory and copied through the staging
// memory; the copies run at once, since CPU compute reads buffers without a stream.
class ImmediateHostStaging final : public internal::HostStaging {
 public:
  absl::StatusOr<bool> IsBackendMemory(const void*) override { return true; }
  absl::StatusOr<char*> HostMemory(size_t bytes) override {
    if (bytes > memory_.size()) memory_.assign(bytes, 0);
    return memory_.data();
  }
  absl::Status QueueToHost(const void* src, void* dst, size_t bytes) override {
    std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status QueueToBackend(const void* src, void* dst, size_t bytes) override {
    std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status Wait() override { return absl::OkStatus(); }

 private:
  std::vector<char> memory_;
};

absl::StatusOr<std::unique_ptr<Backend>> CpuStagedBackend(int rank, int size,
                                                          const RendezvousStore& store,
                                                          const std::string& prefix,
                                                          absl::Duration timeout) {
  auto* gloo_store = static_cast<gloo::rendezvous::Store*>(store.handle().get());
  BALLAST_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> gloo,
                           internal::GlooCommunicator::Connect(rank, size, *gloo_store, prefix,
                                                               "127.0.0.1", timeout));
  BALLAST_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> staged,
                           internal::StagedCommunicator::Create(
                               std::move(gloo), std::make_unique<ImmediateHostStaging>()));
  return CreateCpuBackendOn(std::move(staged), /*blas_threads=*/1);
}

absl::Status RunOne(int rank, int size, const RendezvousStore& store, const std::string& prefix,
                    const RunRanksOptions& options,
                    const std::function<absl::Status(RankContext&)>& body) {
  BALLAST_ASSIGN_OR_RETURN(RankContext ctx, StartRank(rank, size, store, prefix, options));
  return body(ctx);
}

}  // namespace

absl::StatusOr<RankContext> StartRank(int rank, int size, const RendezvousStore& store,
                                      const std::string& prefix, const RunRanksOptions& options) {
  RankContext ctx;
  ctx.rank = rank;
  ctx.size = size;
  // The fields both backends' options share.
  auto common = [&](auto backend_options) {
    backend_options.rank = rank;
    backend_options.size = size;
    backend_options.store = store;
    backend_options.prefix = prefix;
    backend_options.timeout = ScaledTimeout(options.timeout);
    return backend_options;
  };
  if (options.backend == "cuda" || options.backend == "cuda-staged") {
    CudaBackendOptions backend_options = common(CudaBackendOptions{});
    backend_options.device = rank;
    if (options.backend == "cuda-staged") {
      backend_options.collectives = CudaCollectives::kHostStaged;
      backend_options.device = 0;
    }
    BALLAST_ASSIGN_OR_RETURN(ctx.backend, CreateCudaBackend(backend_options));
  } else if (options.backend == "cpu-staged") {
    BALLAST_ASSIGN_OR_RETURN(ctx.backend, CpuStagedBackend(rank, size, store, prefix,
                                                           ScaledTimeout(options.timeout)));
  } else if (options.backend == "cpu") {
    BALLAST_ASSIGN_OR_RETURN(ctx.backend, CreateCpuBackend(common(CpuBackendOptions{})));
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unknown backend '", options.backend, "'"));
  }
  TpGroupOptions group_options;
  group_options.group = GroupId(options.group);
  BALLAST_ASSIGN_OR_RETURN(ctx.group, TpGroup::Create(group_options, ctx.backend.get()));
  return ctx;
}

bool BackendUsable(const std::string& backend, int ranks) {
  if (backend == "cpu" || backend == "cpu-staged") return true;
  if (backend == "cuda-staged") return CudaAvailable();
  return backend == "cuda" && ranks == 1 && CudaAvailable();
}

absl::Status RunRanks(int size, const std::function<absl::Status(RankContext&)>& body,
                      const RunRanksOptions& options) {
  static std::atomic<int> run_counter{0};
  const std::string prefix = absl::StrCat("test-run-", run_counter.fetch_add(1));
  RendezvousStore store = RendezvousStore::InProcess();
  std::vector<absl::Status> results(size);
  std::vector<std::thread> threads;
  threads.reserve(size);
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] { results[r] = RunOne(r, size, store, prefix, options, body); });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < size; ++r) {
    if (!results[r].ok()) {
      return absl::Status(results[r].code(), absl::StrCat("rank ", r, ": ", results[r].message()));
    }
  }
  return absl::OkStatus();
}

std::vector<float> ToHost(Compute& compute, const float* data, size_t n) {
  std::vector<float> host(n);
  compute.CopyToHost(data, host.data(), n);
  return host;
}

}  // namespace ballast::testing
