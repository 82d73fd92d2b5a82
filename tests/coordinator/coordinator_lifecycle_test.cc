// The coordinator's bookkeeping with fakes: options refused by name, idle groups and agents
// forgotten while policies stay, what one agent may announce, and outside names checked.
// Its decisions are in coordinator_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/coordinator.h"
#include "proto/convert.h"
#include "testing/control_plane_messages.h"
#include "testing/coordinator_fixtures.h"
#include "testing/fake_clock.h"
#include "testing/fake_policy_store.h"
#include "tests/coordinator/coordinator_test_base.h"

namespace ballast::coordinator {
namespace {

using testing::Hello;
using testing::RecordingSink;

TEST(CoordinatorOptionsTest, BadDwellIsRefusedByName) {
  testing::FakeClock clock;
  testing::InMemoryPolicyStore store;
  auto speeds = *SpeedModel::Create(SpeedModelOptions{}, &clock);
  absl::StatusOr<std::unique_ptr<Coordinator>> c =
      Coordinator::Create({.plan_dwell = absl::Seconds(-1)}, &clock, &store, speeds.get());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), ::testing::HasSubstr("plan_dwell -1s"));
  c = Coordinator::Create({.dwell_hysteresis = 1.5}, &clock, &store, speeds.get());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), ::testing::HasSubstr("dwell_hysteresis 1.5"));
  c = Coordinator::Create({.marginal_straggler_for = absl::Seconds(-2)}, &clock, &store,
                          speeds.get());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), ::testing::HasSubstr("marginal_straggler_for -2s"));
  c = Coordinator::Create({.known_kind_wait_min = absl::Seconds(-1)}, &clock, &store, speeds.get());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), ::testing::HasSubstr("known_kind_wait_min -1s"));
  c = Coordinator::Create(
      {.known_kind_wait_min = absl::Seconds(3), .known_kind_wait_max = absl::Seconds(1)}, &clock,
      &store, speeds.get());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(),
              ::testing::HasSubstr("known_kind_wait_min 3s and known_kind_wait_max 1s: need 0 <= "
                                   "min <= max"));
  c = Coordinator::Create({.known_kind_blip_memory = absl::ZeroDuration()}, &clock, &store,
                          speeds.get());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), ::testing::HasSubstr("known_kind_blip_memory 0 must be > 0"));
  c = Coordinator::Create({.dwell_hysteresis = std::nan("")}, &clock, &store, speeds.get());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  c = Coordinator::Create({.link_stale_after = absl::ZeroDuration()}, &clock, &store, speeds.get());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), ::testing::HasSubstr("link_stale_after 0 must be > 0"));
  c = Coordinator::Create({.straggler_kind = {.min_ratio = 0.9}}, &clock, &store, speeds.get());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), ::testing::HasSubstr("straggler kind min_ratio 0.9"));
}

// An agent whose workers come and go: one session announcing `workers` ranks of `job`,
// without blocks.
v1::AgentHello SessionHello(const std::string& agent, const std::string& job, int workers) {
  return testing::GroupHello({.agent_id = agent,
                              .job = job,
                              .size = workers,
                              .owner_of_unit = {},
                              .device_prefix = absl::StrCat(agent, "/gpu")});
}

TEST_F(CoordinatorTest, IdleGroupsAndAgentsAreForgottenPoliciesStay) {
  JobPolicy policy;
  policy.mode = BalanceMode::kResize;
  ASSERT_TRUE(coordinator_->SetPolicy("vit", policy).ok());
  // The job with a policy, reporting, and 200 short sessions each with a job of its own.
  RecordingSink sink;
  ASSERT_TRUE(coordinator_->AgentConnected(Hello({0, 0, 0, 0, 1, 1, 1, 1}), &sink).ok());
  Report(1, {4, 4}, {1e-3, 1e-3});
  for (int i = 0; i < 200; ++i) {
    RecordingSink brief;
    const std::string agent = absl::StrCat("brief-", i);
    ASSERT_TRUE(coordinator_->AgentConnected(SessionHello(agent, agent, 2), &brief).ok());
    coordinator_->AgentDisconnected(agent, &brief);
  }
  ASSERT_EQ(coordinator_->Status("")->jobs_size(), 201);
  coordinator_->AgentDisconnected("agent-1", &sink);

  // Within forget_after (10 minutes by default) everything is kept: an agent restart
  // must find its groups' plans.
  clock_.Advance(absl::Minutes(9));
  coordinator_->Tick();
  EXPECT_EQ(coordinator_->Status("")->jobs_size(), 201);
  EXPECT_EQ(coordinator_->counters().groups_forgotten, 0);

  clock_.Advance(absl::Minutes(2));
  coordinator_->Tick();
  absl::StatusOr<v1::ClusterStatus> status = coordinator_->Status("");
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->jobs_size(), 0);
  EXPECT_EQ(coordinator_->counters().groups_forgotten, 201);
  EXPECT_EQ(coordinator_->counters().agents_forgotten, 201);
  EXPECT_EQ(speeds_->counters().keys, 0);  // the speed estimates went with the group
  // The operator's policy is configuration: it stays, and the job is still known by it.
  EXPECT_EQ(coordinator_->GetPolicy("vit")->mode, BalanceMode::kResize);
  EXPECT_TRUE(coordinator_->Status("vit").ok());
  EXPECT_EQ(coordinator_->Status("brief-7").status().code(), absl::StatusCode::kNotFound);
  // The job comes back as it left.
  ASSERT_TRUE(coordinator_->AgentConnected(Hello({0, 0, 0, 0, 1, 1, 1, 1}), &sink).ok());
  EXPECT_EQ(coordinator_->Status("")->jobs_size(), 1);
}

TEST_F(CoordinatorTest, AttachedWorkersKeepTheirGroupWithoutReports) {
  RecordingSink sink;
  ASSERT_TRUE(coordinator_->AgentConnected(Hello({0, 0, 0, 0, 1, 1, 1, 1}), &sink).ok());
  // A job that stops reporting for an hour (a long evaluation) keeps its group: the agent
  // says its workers are alive.
  clock_.Advance(absl::Hours(1));
  coordinator_->Tick();
  EXPECT_EQ(coordinator_->Status("")->jobs_size(), 1);
  Report(1, {4, 4}, {1e-3, 1e-3});  // and its reports are still taken
}

TEST_F(CoordinatorTest, WhatOneAgentMayAnnounceIsCapped) {
  CoordinatorOptions options;
  options.max_workers_per_agent = 3;
  options.max_groups_per_agent = 2;
  options.max_jobs_per_agent = 1;
  coordinator_ = *Coordinator::Create(options, &clock_, &store_, speeds_.get());
  RecordingSink sink;
  absl::Status s = coordinator_->AgentConnected(SessionHello("a", "job", 4), &sink);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("4 workers, more than --max_workers_per_agent=3"));
  EXPECT_EQ(coordinator_->Status("")->jobs_size(), 0);  // refused whole

  ASSERT_TRUE(coordinator_->AgentConnected(SessionHello("a", "job", 3), &sink).ok());
  v1::WorkerIdentity other = SessionHello("a", "job", 1).workers(0);
  other.set_group("tp1");
  s = coordinator_->WorkerJoined("a", other);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("4 workers, more than --max_workers_per_agent=3"));
  // A worker leaving makes room.
  ASSERT_TRUE(coordinator_->WorkerLeft("a", SessionHello("a", "job", 3).workers(2)).ok());
  ASSERT_TRUE(coordinator_->WorkerJoined("a", other).ok());  // 3 workers in 2 groups
  ASSERT_TRUE(coordinator_->WorkerLeft("a", SessionHello("a", "job", 3).workers(1)).ok());
  other.set_group("tp2");
  s = coordinator_->WorkerJoined("a", other);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("3 groups, more than --max_groups_per_agent=2"));
  other.set_group("tp1");
  other.set_job("job2");
  s = coordinator_->WorkerJoined("a", other);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("2 jobs, more than --max_jobs_per_agent=1"));
  // Re-registering a rank it already has is not a new worker.
  ASSERT_TRUE(coordinator_->WorkerJoined("a", SessionHello("a", "job", 3).workers(0)).ok());
  // Other agents have caps of their own.
  EXPECT_TRUE(coordinator_->AgentConnected(SessionHello("b", "job3", 3), &sink).ok());
}

TEST_F(CoordinatorTest, OutsideNamesAreCheckedAndNeverEchoedWhole) {
  RecordingSink sink;
  ASSERT_TRUE(coordinator_->AgentConnected(Hello({0, 0, 0, 0, 1, 1, 1, 1}), &sink).ok());
  const std::string huge(1 << 20, 'j');
  const std::string control("vit\x01\0x", 6);
  auto expect_short_error = [&](const absl::Status& s, const std::string& field) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr(field));
    EXPECT_LT(s.message().size(), 256u) << field;  // never the whole value
    EXPECT_EQ(s.message().find('\0'), absl::string_view::npos) << field;
    EXPECT_EQ(s.message().find('\x01'), absl::string_view::npos) << field;
  };
  for (const std::string& bad : {huge, control, std::string("with space")}) {
    v1::WorkerReport r;
    r.set_job(bad);
    r.set_group("tp0");
    expect_short_error(coordinator_->Report("agent-1", r), "report.job");
    expect_short_error(coordinator_->AgentConnected(SessionHello(bad, "job", 1), &sink),
                       "hello.agent_id");
    expect_short_error(coordinator_->AgentConnected(SessionHello("a", bad, 1), &sink),
                       "worker.job");
    expect_short_error(coordinator_->Status(bad).status(), "job");
    expect_short_error(coordinator_->SetPolicy(bad, JobPolicy{}), "job");
    expect_short_error(coordinator_->SetPaused(bad, true), "job");
    expect_short_error(coordinator_->SetCordon(bad, true, "slow"), "device");
    expect_short_error(coordinator_->Explain("vit", bad).status(), "group");
  }
  expect_short_error(coordinator_->SetCordon("dev0", true, std::string(15 << 20, 'r')), "reason");
  expect_short_error(coordinator_->SetCordon("dev0", true, "line\nforged"), "reason");
  ASSERT_TRUE(coordinator_->SetCordon("dev0", true, "throttled GPU \xc3\xa9t\xc3\xa9").ok());
  EXPECT_EQ(coordinator_->Status("")->jobs_size(), 1);  // nothing was registered
}

}  // namespace
}  // namespace ballast::coordinator
