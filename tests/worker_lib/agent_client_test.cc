// The worker's agent client never blocks training: with no agent at all, reports are
// queued up to a bound, then the oldest are dropped and counted.
#include "ballast/agent_client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ballast/parallel_mlp.h"
#include "common/status_macros.h"
#include "testing/rank_threads.h"

namespace ballast {
namespace {

using ::ballast::testing::RankContext;

TEST(AgentClientTest, WithoutAnAgentReportsAreBoundedAndDropped) {
  absl::Status status = testing::RunRanks(1, [](RankContext& ctx) -> absl::Status {
    BALLAST_ASSIGN_OR_RETURN(
        auto mlp, ParallelMlp::Create(ctx.group.get(), {.id = BlockId(0), .hidden = 4,
                                                        .intermediate = 8, .unit_size = 4}));
    AgentClientOptions options;
    options.socket_path = ::testing::TempDir() + "/no-agent-here.sock";
    options.job = "j";
    options.device = "d";
    options.queue_capacity = 4;
    options.initial_backoff = absl::Milliseconds(5);
    options.max_backoff = absl::Milliseconds(20);
    BALLAST_ASSIGN_OR_RETURN(auto client, AgentClient::Start(options, ctx.group.get()));
    for (int step = 0; step < 10; ++step) {
      BALLAST_RETURN_IF_ERROR(ctx.group->BeginStep());
      BALLAST_RETURN_IF_ERROR(ctx.group->EndStep());
      client->Report(ctx.group->last_step_timings());  // returns at once
    }
    const AgentClientStats stats = client->stats();
    EXPECT_EQ(stats.reports_dropped, 6);
    EXPECT_EQ(stats.reports_sent, 0);
    EXPECT_FALSE(stats.connected);
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

TEST(AgentClientTest, RejectsBadOptions) {
  absl::Status status = testing::RunRanks(1, [](RankContext& ctx) -> absl::Status {
    AgentClientOptions options;
    options.job = "j";
    options.device = "d";
    options.queue_capacity = 0;
    EXPECT_THAT(std::string(AgentClient::Start(options, ctx.group.get()).status().message()),
                ::testing::HasSubstr("queue_capacity"));
    options.queue_capacity = 4;
    options.device = "";
    EXPECT_FALSE(AgentClient::Start(options, ctx.group.get()).ok());
    EXPECT_FALSE(AgentClient::Start(options, nullptr).ok());
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

}  // namespace
}  // namespace ballast
