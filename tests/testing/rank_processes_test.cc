// The rank-process harness itself: real ranks in processes of their own, real collectives
// between them, and a rank that fails, crashes or hangs reported by number instead of
// failing the suite silently or hanging it.
#include "testing/rank_processes.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"

namespace ballast::testing {
namespace {

using ::testing::HasSubstr;

TEST(RankProcessesTest, RanksRunInTheirOwnProcessesWithRealCollectives) {
  std::vector<std::string> outputs;
  const absl::Status status = RunRankProcesses(
      3,
      [](RankContext& ctx, std::string* out) -> absl::Status {
        float value = static_cast<float>(ctx.rank + 1);
        BALLAST_RETURN_IF_ERROR(ctx.backend->comm().AllReduceSum(&value, 1));
        *out = absl::StrCat(getpid(), " ", value);
        return absl::OkStatus();
      },
      {}, &outputs);
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_EQ(outputs.size(), 3u);
  std::set<std::string> pids;
  for (const std::string& out : outputs) {
    const std::vector<std::string> fields = absl::StrSplit(out, ' ');
    ASSERT_EQ(fields.size(), 2u) << out;
    EXPECT_NE(fields[0], absl::StrCat(getpid())) << "a rank ran in the test's own process";
    pids.insert(fields[0]);
    EXPECT_EQ(fields[1], "6") << "1 + 2 + 3 all-reduced";
  }
  EXPECT_EQ(pids.size(), 3u);
}

TEST(RankProcessesTest, AFailingRankIsNamedWithItsStatus) {
  const absl::Status status = RunRankProcesses(2, [](RankContext& ctx, std::string*) {
    return ctx.rank == 1 ? absl::InvalidArgumentError("bad shape") : absl::OkStatus();
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "rank 1: bad shape");
}

TEST(RankProcessesTest, ACrashingRankIsReportedBySignal) {
  const absl::Status status = RunRankProcesses(2, [](RankContext& ctx, std::string*) {
    if (ctx.rank == 0) std::abort();
    return absl::OkStatus();
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(status.message(), HasSubstr("rank 0: killed by signal 6"));
}

// The crash is named, not rank 0's collective that then fails for want of its peer.
TEST(RankProcessesTest, TheCrashIsNamedBeforeThePeersItFails) {
  const absl::Status status = RunRankProcesses(2,
                                               [](RankContext& ctx, std::string*) -> absl::Status {
                                                 if (ctx.rank == 1) std::abort();
                                                 float value = 1;
                                                 return ctx.backend->comm().AllReduceSum(&value, 1);
                                               },
                                               {.ranks = {.timeout = absl::Seconds(5)}});
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(status.message(), HasSubstr("rank 1: killed by signal 6"));
}

TEST(RankProcessesTest, AHungRankIsKilledAtTheDeadline) {
  const absl::Status status =
      RunRankProcesses(2,
                       [](RankContext& ctx, std::string*) {
                         if (ctx.rank == 1) std::this_thread::sleep_for(std::chrono::seconds(60));
                         return absl::OkStatus();
                       },
                       {.deadline = absl::Seconds(3)});
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(status.message(), HasSubstr("rank 1: still running after 3s: killed"));
}

TEST(RankProcessesTest, AnExceptionInARankIsItsStatus) {
  const absl::Status status = RunRankProcesses(1, [](RankContext&, std::string*) -> absl::Status {
    throw std::runtime_error("gloo said no");
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(status.message(), "rank 0: exception: gloo said no");
}

TEST(RankProcessesTest, BadSizeAndUnknownBackendsAreRefused) {
  auto ok = [](RankContext&, std::string*) { return absl::OkStatus(); };
  EXPECT_EQ(RunRankProcesses(0, ok).code(), absl::StatusCode::kInvalidArgument);
  const absl::Status status = RunRankProcesses(1, ok, {.ranks = {.backend = "tpu"}});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("rank 0: unknown backend 'tpu'"));
  EXPECT_TRUE(ProcessRanksUsable("cpu", 8));
  EXPECT_FALSE(ProcessRanksUsable("tpu", 1));
}

}  // namespace
}  // namespace ballast::testing
