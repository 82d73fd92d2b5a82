// Runs N real ranks as processes forked from the test, each with its own backend: the
// layout CUDA needs (one process per GPU: rank r on device r, see CudaBackendOptions::
// device), and on the CPU real Gloo between processes rather than threads. Each rank's
// body returns a status and may hand bytes back to the parent (the child's memory is its
// own); the parent waits for every rank, up to a deadline, and reports the lowest failing
// rank as RunRanks does.
//
//   ASSERT_TRUE(RunRankProcesses(2, [](RankContext& ctx, std::string* out) -> absl::Status {
//     BALLAST_ASSIGN_OR_RETURN(auto mlp, ParallelMlp::Create(ctx.group.get(), config));
//     ...
//     *out = Encode(result);
//     return absl::OkStatus();
//   }, {.ranks = {.backend = "cuda"}}, &outputs).ok());
//
// A forked child runs only the body and then leaves with _exit, so gtest EXPECTs in it are
// lost: bodies report through their status. CUDA cannot cross fork(): the parent must not
// have used CUDA (ctest runs every test case in a process of its own, so only a test that
// itself touched CUDA first would break this; ProcessRanksUsable counts GPUs in a child).
#ifndef BALLAST_TESTS_TESTING_RANK_PROCESSES_H_
#define BALLAST_TESTS_TESTING_RANK_PROCESSES_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "testing/rank_threads.h"

namespace ballast::testing {

struct RankProcessesOptions {
  RunRanksOptions ranks;  // backend, group, collective timeout
  // Ranks still running this long after the fork are killed (DEADLINE_EXCEEDED): a hung
  // rank fails the test instead of hanging the suite.
  absl::Duration deadline = absl::Minutes(2);
};

// Whether `backend` can run `ranks` ranks as processes here: the CPU any number; CUDA one
// per GPU (counted in a child process, so this process stays free of CUDA).
bool ProcessRanksUsable(const std::string& backend, int ranks);

// Runs `body` in `size` forked processes, rank r in the r-th; fills (*outputs)[r] with
// what rank r wrote to its `output` (when outputs is non-null). Returns OK or a failing
// rank's status prefixed with "rank R: ": the lowest rank that crashed (INTERNAL, naming
// the signal), passed the deadline (DEADLINE_EXCEEDED) or could not start, else the
// lowest rank whose body failed, since a crash makes its peers' collectives fail too.
absl::Status RunRankProcesses(int size,
                              const std::function<absl::Status(RankContext&, std::string*)>& body,
                              const RankProcessesOptions& options = {},
                              std::vector<std::string>* outputs = nullptr);

}  // namespace ballast::testing

#endif  // BALLAST_TESTS_TESTING_RANK_PROCESSES_H_
