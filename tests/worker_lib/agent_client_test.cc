// The worker's agent client never blocks training: with no agent at all, reports are
// queued up to a bound, then the oldest are dropped and counted. While the agent is away or
// drops every attach unanswered, attempts are spaced by the growing backoff of
// common/backoff.h (on a fake clock, moved only while the client waits out a delay); an
// acknowledged attach starts the backoff over.
#include "ballast/agent_client.h"

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ballast/parallel_mlp.h"
#include "ballast/v1/worker.grpc.pb.h"
#include "common/status_macros.h"
#include "testing/eventually.h"
#include "testing/fake_clock.h"
#include "testing/rank_threads.h"

namespace ballast {
namespace {

using ::ballast::testing::Eventually;

using ::ballast::testing::RankContext;

constexpr absl::Duration kInitial = absl::Milliseconds(50);
constexpr absl::Duration kMax = absl::Seconds(1);
constexpr absl::Duration kStep = absl::Milliseconds(5);

// An agent stand-in on a Unix socket that reads each attach's hello, optionally answers it
// with a Welcome (as WorkerService does), and ends the stream.
class DroppingAgent final : public v1::WorkerAgent::Service {
 public:
  explicit DroppingAgent(bool answer) : answer_(answer) {}
  grpc::Status Attach(
      grpc::ServerContext* /*context*/,
      grpc::ServerReaderWriter<v1::WorkerDirective, v1::WorkerMessage>* stream) override {
    v1::WorkerMessage hello;
    if (!stream->Read(&hello)) return grpc::Status::OK;
    if (answer_) {
      v1::WorkerDirective welcome;
      welcome.mutable_welcome();
      stream->Write(welcome);
    }
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "stand-in ends the attach");
  }

 private:
  const bool answer_;
};

// Starts a client with `options` (socket, backoff and fake clock set here) and moves the
// clock while it backs off, until it has tried `n` attaches; returns the fake time of each.
absl::StatusOr<std::vector<absl::Duration>> AttemptTimes(const std::string& socket_path,
                                                         int64_t n) {
  std::vector<absl::Duration> times;
  absl::Status status = testing::RunRanks(1, [&](RankContext& ctx) -> absl::Status {
    testing::FakeClock clock;
    AgentClientOptions options;
    options.socket_path = socket_path;
    options.job = "j";
    options.device = "d";
    options.initial_backoff = kInitial;
    options.max_backoff = kMax;
    options.clock = &clock;
    BALLAST_ASSIGN_OR_RETURN(auto client, AgentClient::Start(options, ctx.group.get()));
    int64_t seen = 0;
    while (seen < n) {
      if (!Eventually([&] {
            const AgentClientStats stats = client->stats();
            return stats.backing_off || stats.attempts > seen;
          })) {
        return absl::DeadlineExceededError("the client neither tried again nor backed off");
      }
      // The clock stands still from a wait's end to the next wait: an attempt seen now
      // happened at this fake time.
      for (const int64_t attempts = client->stats().attempts; seen < attempts; ++seen) {
        times.push_back(clock.Monotonic());
      }
      if (seen < n && client->stats().backing_off) clock.Advance(kStep);
    }
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  return times;
}

std::vector<absl::Duration> Gaps(const std::vector<absl::Duration>& at) {
  std::vector<absl::Duration> gaps;
  for (size_t i = 1; i < at.size(); ++i) gaps.push_back(at[i] - at[i - 1]);
  return gaps;
}

std::string ShortSocketPath(const std::string& name) {
  // A Unix socket path must fit sockaddr_un::sun_path (108 bytes): not under TempDir.
  return absl::StrCat("/tmp/bac-", ::getpid(), "-", name, ".sock");
}

std::unique_ptr<grpc::Server> ServeAgent(const std::string& path, DroppingAgent* agent) {
  std::filesystem::remove(path);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat("unix:", path), grpc::InsecureServerCredentials());
  builder.RegisterService(agent);
  return builder.BuildAndStart();
}

TEST(AgentClientBackoffTest, WithoutAnAgentAttemptsAreSpacedByTheGrowingBackoff) {
  absl::StatusOr<std::vector<absl::Duration>> at = AttemptTimes(ShortSocketPath("none"), /*n=*/8);
  ASSERT_TRUE(at.ok()) << at.status();
  absl::Duration base = kInitial;
  for (absl::Duration gap : Gaps(*at)) {
    EXPECT_GE(gap, base / 2);  // equal jitter
    EXPECT_LE(gap, base + kStep);
    base = std::min(base * 2, kMax);
  }
}

TEST(AgentClientBackoffTest, AnAgentDroppingEveryAttachUnansweredGetsTheGrowingBackoff) {
  const std::string path = ShortSocketPath("drop");
  DroppingAgent agent(/*answer=*/false);
  std::unique_ptr<grpc::Server> server = ServeAgent(path, &agent);
  ASSERT_NE(server, nullptr);
  absl::StatusOr<std::vector<absl::Duration>> at = AttemptTimes(path, /*n=*/8);
  ASSERT_TRUE(at.ok()) << at.status();
  absl::Duration base = kInitial;
  for (absl::Duration gap : Gaps(*at)) {
    EXPECT_GE(gap, base / 2);
    EXPECT_LE(gap, base + kStep);
    base = std::min(base * 2, kMax);
  }
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  std::filesystem::remove(path);
}

TEST(AgentClientBackoffTest, AnAcknowledgedAttachStartsTheBackoffOver) {
  const std::string path = ShortSocketPath("ack");
  DroppingAgent agent(/*answer=*/true);
  std::unique_ptr<grpc::Server> server = ServeAgent(path, &agent);
  ASSERT_NE(server, nullptr);
  absl::StatusOr<std::vector<absl::Duration>> at = AttemptTimes(path, /*n=*/8);
  ASSERT_TRUE(at.ok()) << at.status();
  for (absl::Duration gap : Gaps(*at)) {
    EXPECT_GE(gap, kInitial / 2);
    EXPECT_LE(gap, kInitial + kStep);
  }
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  std::filesystem::remove(path);
}

TEST(AgentClientTest, WithoutAnAgentReportsAreBoundedAndDropped) {
  absl::Status status = testing::RunRanks(1, [](RankContext& ctx) -> absl::Status {
    BALLAST_ASSIGN_OR_RETURN(
        auto mlp,
        ParallelMlp::Create(ctx.group.get(),
                            {.id = BlockId(0), .hidden = 4, .intermediate = 8, .unit_size = 4}));
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
