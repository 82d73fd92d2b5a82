// GroupRegistry on its own: registration refused whole, reports checked against the
// group's shape and applied whole, forgetting, incarnations, and what one agent can make
// it hold.
#include "coordinator/group_registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <malloc.h>

#include "absl/strings/str_cat.h"
#include "testing/control_plane_messages.h"
#include "testing/coordinator_fixtures.h"
#include "testing/fake_clock.h"

namespace ballast::coordinator {
namespace {

using ::testing::HasSubstr;
using testing::Hello;
using testing::RecordingSink;

class GroupRegistryTest : public ::testing::Test {
 protected:
  void SetUp() override { Make({}); }
  void Make(const RegistryOptions& options) {
    registry_.reset();
    speeds_ = *SpeedModel::Create(SpeedModelOptions{}, &clock_);
    registry_ = std::make_unique<GroupRegistry>(options, &clock_, speeds_.get());
  }
  v1::WorkerReport Report(int rank, int64_t step, int block = 0) {
    v1::WorkerReport r = testing::StepReport({}, rank, step, 4, 4e-3);
    r.mutable_step()->mutable_blocks(0)->set_block(block);
    return r;
  }

  testing::FakeClock clock_;
  std::unique_ptr<SpeedModel> speeds_;
  std::unique_ptr<GroupRegistry> registry_;
  RecordingSink sink_;
};

TEST_F(GroupRegistryTest, AHelloThatDoesNotFitIsRefusedWhole) {
  ASSERT_TRUE(registry_->AgentConnected(Hello({0, 0, 0, 0, 1, 1, 1, 1}), &sink_).ok());
  v1::AgentHello other = Hello({0, 0, 0, 0, 1, 1, 1, 1});
  other.set_agent_id("agent-2");
  other.mutable_workers(1)->set_group_size(3);  // the group has 2
  absl::Status s = registry_->AgentConnected(other, &sink_);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("worker.group_size 3 differs from group tp0's 2"));
  // Nothing changed: agent-1's ranks still attached, agent-2 unknown.
  EXPECT_EQ(registry_->attached_workers(), 2);
  EXPECT_EQ(registry_->connected_agents(), 1);
}

TEST_F(GroupRegistryTest, AReportIsCheckedAgainstTheGroupsShapeAndAppliedWhole) {
  ASSERT_TRUE(registry_->AgentConnected(Hello({0, 0, 0, 0, 1, 1, 1, 1}), &sink_).ok());
  absl::Status s = registry_->Report("agent-1", Report(0, 1, /*block=*/9));
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("unknown block 9"));
  v1::WorkerReport bad = Report(0, 1);
  bad.mutable_step()->mutable_blocks(0)->add_owner_of_unit(1);  // 1 owner for 8 units
  EXPECT_THAT(registry_->Report("agent-1", bad).message(),
              HasSubstr("owner_of_unit has 1 entries, block has 8 units"));
  // A count past what the speed model holds: the registry keeps nothing of it.
  v1::WorkerReport huge = Report(0, 1);
  huge.mutable_step()->mutable_blocks(0)->set_tokens_computed(int64_t{1} << 41);
  EXPECT_FALSE(registry_->Report("agent-1", huge).ok());
  std::optional<GroupSnapshot> g = registry_->Snapshot({"vit", "tp0"}, false);
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->ranks[0].last_compute_seconds, 0);
  EXPECT_EQ(registry_->counters().reports_rejected, 3);

  v1::WorkerReport moved = Report(1, 2);
  for (int o : {0, 0, 0, 0, 0, 1, 1, 1})
    moved.mutable_step()->mutable_blocks(0)->add_owner_of_unit(o);
  moved.mutable_step()->mutable_blocks(0)->set_micro_batches(4);
  ASSERT_TRUE(registry_->Report("agent-1", moved).ok());
  g = registry_->Snapshot({"vit", "tp0"}, true);
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->blocks[0].owner_of_unit[4], RankId(0));
  EXPECT_EQ(g->blocks[0].micro_batches, 4);
  EXPECT_NEAR(g->ranks[1].last_compute_seconds, 4e-3, 1e-12);
  // Without ownership, a snapshot does not copy it.
  EXPECT_TRUE(registry_->Snapshot({"vit", "tp0"}, false)->blocks[0].owner_of_unit.empty());
  // A move made is one the plan in force states and the workers run, with or without
  // ownership in the snapshot; not one it does not state, nor another ownership.
  EXPECT_FALSE(g->blocks[0].move_made) << "no plan states it";
  WorkloadPlan plan{.version = PlanVersion(3), .number = 1};
  plan.blocks = {{.block = BlockId(0),
                  .owner_of_unit = {RankId(0), RankId(0), RankId(0), RankId(0), RankId(0),
                                    RankId(1), RankId(1), RankId(1)}}};
  ASSERT_TRUE(registry_->Publish(g->ref, plan));
  EXPECT_TRUE(registry_->Snapshot({"vit", "tp0"}, false)->blocks[0].move_made);
  EXPECT_TRUE(registry_->Snapshot({"vit", "tp0"}, true)->blocks[0].move_made);
  plan.blocks[0].owner_of_unit[4] = RankId(1);
  ASSERT_TRUE(registry_->Publish(g->ref, plan));
  EXPECT_FALSE(registry_->Snapshot({"vit", "tp0"}, false)->blocks[0].move_made);
}

// The step feedback judges a plan by the steps that ran under it alone: a rank's
// per-plan samples start afresh with each plan version it reports.
TEST_F(GroupRegistryTest, StepsAreCountedPerPlanTheRankRan) {
  ASSERT_TRUE(registry_->AgentConnected(Hello({0, 0, 0, 0, 1, 1, 1, 1}), &sink_).ok());
  int64_t step = 0;
  auto report = [&](int64_t version, double seconds) {
    v1::WorkerReport r = testing::StepReport({}, 0, step++, 4, seconds);
    r.mutable_step()->set_plan_version(version);
    ASSERT_TRUE(registry_->Report("agent-1", r).ok());
  };
  for (int i = 0; i < 20; ++i) report(/*version=*/0, 0.010);
  for (int i = 0; i < 3; ++i) report(/*version=*/7, 0.020);
  GroupSnapshot g = *registry_->Snapshot({"vit", "tp0"}, false);
  EXPECT_EQ(g.ranks[0].plan_steps, 3);
  EXPECT_NEAR(g.ranks[0].plan_step_median, 0.020, 1e-12) << "none of plan 0's steps";
  EXPECT_NEAR(g.ranks[0].step_median, 0.010, 1e-12) << "the plain median spans both";
  for (int i = 0; i < 30; ++i) report(/*version=*/7, i < 15 ? 0.030 : 0.040);
  g = *registry_->Snapshot({"vit", "tp0"}, false);
  EXPECT_EQ(g.ranks[0].plan_steps, 33);
  EXPECT_NEAR(g.ranks[0].plan_step_median, 0.040, 1e-12) << "over the last 16";
}

TEST_F(GroupRegistryTest, AForgottenGroupRegisteredAgainIsAnotherIncarnation) {
  Make({.forget_after = absl::Seconds(1)});
  ASSERT_TRUE(registry_->AgentConnected(Hello({0, 0, 0, 0, 1, 1, 1, 1}), &sink_).ok());
  const GroupRef first = registry_->Groups().at(0);
  registry_->AgentDisconnected("agent-1", &sink_);
  clock_.Advance(absl::Milliseconds(500));
  EXPECT_TRUE(registry_->ForgetIdle().groups.empty());
  clock_.Advance(absl::Milliseconds(600));
  GroupRegistry::Forgotten forgotten = registry_->ForgetIdle();
  ASSERT_EQ(forgotten.groups.size(), 1u);
  EXPECT_EQ(forgotten.groups[0], first);
  EXPECT_EQ(registry_->Report("agent-1", Report(0, 1)).code(), absl::StatusCode::kNotFound);

  ASSERT_TRUE(registry_->AgentConnected(Hello({0, 0, 0, 0, 1, 1, 1, 1}), &sink_).ok());
  const GroupRef second = registry_->Groups().at(0);
  EXPECT_EQ(second.key, first.key);
  EXPECT_NE(second.incarnation, first.incarnation);
  // A plan decided for the old incarnation is dropped, not pushed.
  WorkloadPlan plan;
  plan.group = GroupId("tp0");
  plan.version = PlanVersion(5);
  EXPECT_FALSE(registry_->Publish(first, plan));
  EXPECT_TRUE(sink_.plans().empty());
  EXPECT_TRUE(registry_->Publish(second, plan));
  ASSERT_EQ(sink_.plans().size(), 1u);
  EXPECT_EQ(sink_.plans()[0].version(), 5);
}

// A worker identity of `blocks` blocks of `units` units each, all owned by rank 0.
v1::WorkerIdentity Shaped(const std::string& group, int blocks, int units) {
  v1::WorkerIdentity w;
  w.set_job("big");
  w.set_group(group);
  w.set_rank(0);
  w.set_group_size(2);
  w.set_device("dev-" + group);
  for (int b = 0; b < blocks; ++b) {
    v1::BlockInfo* info = w.add_blocks();
    info->set_block(b);
    info->set_num_units(units);
    info->mutable_owner_of_unit()->Resize(units, 0);
  }
  return w;
}

TEST_F(GroupRegistryTest, AHostileHelloOverTheShapeLimitsIsRefusedNamingTheLimit) {
  v1::AgentHello hello;
  hello.set_agent_id("hostile");
  *hello.add_workers() = Shaped("tp0", 4, 3'000'000);  // the 12.6 MB hello
  absl::Status s = registry_->AgentConnected(hello, &sink_);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("more than max_units_per_block 1048576"));
  *hello.mutable_workers(0) = Shaped("tp0", 65, 1);
  s = registry_->AgentConnected(hello, &sink_);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("65 blocks, more than max_blocks_per_worker 64"));
  EXPECT_EQ(registry_->WorkerJoined("hostile", Shaped("tp1", 65, 1)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(registry_->Groups().empty());
}

// A worker that leaves and rejoins with new block ids each time passes every per-agent cap
// (it announces 64 blocks each time) but would grow its group, which stays active and so
// is never forgotten: the group holds what one worker may announce.
TEST_F(GroupRegistryTest, RejoiningWithNewBlocksCannotGrowAGroupPastOneWorkersBlocks) {
  v1::AgentHello hello;
  hello.set_agent_id("churn");
  *hello.add_workers() = Shaped("tp0", 64, 1);
  ASSERT_TRUE(registry_->AgentConnected(hello, &sink_).ok());
  ASSERT_TRUE(registry_->WorkerLeft("churn", hello.workers(0)).ok());
  v1::WorkerIdentity renamed = hello.workers(0);
  for (v1::BlockInfo& b : *renamed.mutable_blocks()) b.set_block(b.block() + 64);
  absl::Status s = registry_->WorkerJoined("churn", renamed);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              HasSubstr("would hold 128 blocks, more than --max_blocks_per_worker=64"));
  // The same blocks again are welcome.
  EXPECT_TRUE(registry_->WorkerJoined("churn", hello.workers(0)).ok());
}

// What one agent can make the registry hold is its announced shapes' bytes (capped) and
// little more: the ownership once per group, not again per rank.
TEST_F(GroupRegistryTest, WhatAMaximalAgentCostsStaysWithinItsCap) {
  constexpr int kUnits = 1 << 20;  // max_units_per_block
  constexpr int kGroups = 16;      // 16 x 1M units x 4 bytes = max_shape_bytes_per_agent
  v1::AgentHello hello;
  hello.set_agent_id("big");
  for (int g = 0; g < kGroups; ++g) *hello.add_workers() = Shaped(absl::StrCat("tp", g), 1, kUnits);
  // One unit more is refused by the byte cap.
  v1::WorkerIdentity extra = Shaped("tp-extra", 1, 1);
#if defined(__SANITIZE_ADDRESS__)
  const bool measure = false;  // ASan's allocator does not feed mallinfo2
#else
  const bool measure = true;
#endif
  auto heap = [] {
    const struct mallinfo2 m = mallinfo2();
    return static_cast<int64_t>(m.uordblks + m.hblkhd);
  };
  const int64_t before = heap();
  ASSERT_TRUE(registry_->AgentConnected(hello, &sink_).ok());
  const int64_t held = heap() - before;
  absl::Status s = registry_->WorkerJoined("big", extra);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("more than --max_shape_bytes_per_agent=67108864"));
  const int64_t cap = RegistryOptions{}.max_shape_bytes_per_agent;
  if (measure) {
    ::testing::Test::RecordProperty("held_bytes", std::to_string(held));
    std::printf("a maximal agent (%d groups of %d units, hello of %zu bytes) holds %.1f MiB\n",
                kGroups, kUnits, hello.ByteSizeLong(), held / 1048576.0);
    // The ownership itself is the cap; everything else (ranks, maps, links) a few percent.
    EXPECT_GE(held, cap);
    EXPECT_LE(held, cap + cap / 8);
  }
}

}  // namespace
}  // namespace ballast::coordinator
