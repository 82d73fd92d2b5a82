// Runs N real ranks as threads of the test process, each with its own backend (CPU: real
// Gloo over loopback TCP; CUDA: NCCL, rendezvous through an in-process store), and
// collects each rank's result.
//
//   RunRanks(4, [](RankContext& ctx) -> absl::Status {
//     BALLAST_ASSIGN_OR_RETURN(auto mlp, ParallelMlp::Create(ctx.group.get(), config));
//     ...
//     return absl::OkStatus();
//   });  // EXPECT-fails with the first rank's error
#ifndef BALLAST_TESTS_TESTING_RANK_THREADS_H_
#define BALLAST_TESTS_TESTING_RANK_THREADS_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ballast/backend.h"
#include "ballast/tp_group.h"

namespace ballast::testing {

struct RankContext {
  int rank = 0;
  int size = 0;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<TpGroup> group;  // GroupId("test/tp")
};

struct RunRanksOptions {
  // A short timeout so a broken test fails instead of hanging the suite.
  absl::Duration timeout = absl::Seconds(20);
  std::string group = "test/tp";
  // "cpu"; "cuda" (NCCL, rank r on device r; one rank is the supported layout for threads,
  // since NCCL runs one process per GPU: see CudaBackendOptions::device); "cuda-staged"
  // (CUDA compute, host-staged Gloo collectives, every rank on device 0); "cpu-staged" (the
  // CPU backend with its collectives through internal/staged_communicator.h, every buffer
  // staged through host copies: the staging logic of cuda-staged, run on any machine).
  std::string backend = "cpu";
};

// Whether `backend` can run `ranks` ranks as threads here: the CPU always; CUDA with a
// usable GPU, for one rank with NCCL and any number host-staged.
bool BackendUsable(const std::string& backend, int ranks);

// Rank `rank` of `size` in the calling thread: its backend, which finds its peers through
// `store` under `prefix` (CUDA: on device `rank`), and its TpGroup (options.group).
absl::StatusOr<RankContext> StartRank(int rank, int size, const RendezvousStore& store,
                                      const std::string& prefix, const RunRanksOptions& options);

// Runs `body` on `size` ranks concurrently; returns OK or the lowest failing rank's status
// prefixed with "rank R: ".
absl::Status RunRanks(int size, const std::function<absl::Status(RankContext&)>& body,
                      const RunRanksOptions& options = {});

// Host <-> backend helpers for tests (CPU backend memory is host memory, but tests go
// through Compute so they also hold for other backends).
std::vector<float> ToHost(Compute& compute, const float* data, size_t n);

}  // namespace ballast::testing

#endif  // BALLAST_TESTS_TESTING_RANK_THREADS_H_
