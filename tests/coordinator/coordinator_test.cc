// The coordinator's decisions with fakes (clock, policy store, agent sink): no servers, so
// time and restarts are fully under the test's control. Its bookkeeping (options,
// forgetting, caps, names) is in coordinator_lifecycle_test.cc; the step it predicts and
// what a straggler's measured kind changes, in coordinator_step_test.cc.
#include "coordinator/coordinator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "proto/convert.h"
#include "testing/control_plane_messages.h"
#include "testing/coordinator_fixtures.h"
#include "testing/fake_clock.h"
#include "testing/fake_policy_store.h"
#include "tests/coordinator/coordinator_test_base.h"

namespace ballast::coordinator {
namespace {

using testing::Hello;
using testing::kUnits;
using testing::RecordingSink;

TEST_F(CoordinatorTest, ChronicStragglerIsReshardedAndARestartPlansOnTheNewOwnership) {
  // Rank 1 runs 2x slower: once it is chronic the planner reshards.
  RecordingSink sink;
  int64_t step = ReshardAChronicStraggler(&sink);
  const std::vector<int> even = {0, 0, 0, 0, 1, 1, 1, 1};
  ASSERT_EQ(sink.plans().size(), 1u) << "no reshard after " << step << " steps";
  EXPECT_GE(step, 20) << "resharded before the straggler was chronic";
  absl::StatusOr<WorkloadPlan> plan = FromProto(sink.plans()[0]);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->blocks.size(), 1u);
  const std::vector<RankId>& moved = plan->blocks[0].owner_of_unit;
  ASSERT_EQ(moved.size(), static_cast<size_t>(kUnits));
  const int rank1_units = std::count(moved.begin(), moved.end(), RankId(1));
  EXPECT_LT(rank1_units, 4);  // work moved off the straggler, for good

  // The workers apply it and say so in their next reports. Then the coordinator dies.
  std::vector<int> now_owned;
  for (RankId r : moved) now_owned.push_back(r.value());
  Report(step++, {kUnits - rank1_units, rank1_units}, {1e-3, 2e-3}, now_owned);
  Restart();
  EXPECT_EQ(coordinator_->GetPolicy("vit")->mode, BalanceMode::kMigrate);  // durable

  // The agent re-announces the workers (its cached identity may predate the reshard);
  // reports carry the ownership the workers really have, and every later plan must be
  // valid against it, as the workers' own validation will check.
  RecordingSink sink2;
  ASSERT_TRUE(coordinator_->AgentConnected(Hello(even), &sink2).ok());
  for (int i = 0; i < 40; ++i, ++step) {
    // Rank 0 now slows down a lot, so the coordinator wants to act again.
    Report(step, {kUnits - rank1_units, rank1_units}, {6e-3, 2e-3},
           i == 0 ? now_owned : std::vector<int>{});
    clock_.Advance(absl::Milliseconds(100));
    coordinator_->Tick();
  }
  GroupShape shape{.group = GroupId("tp0"), .size = 2};
  shape.blocks.push_back({BlockId(0), kUnits, moved});
  ASSERT_FALSE(sink2.plans().empty()) << "the restarted coordinator made no plan";
  for (const v1::WorkloadPlan& p : sink2.plans()) {
    absl::StatusOr<WorkloadPlan> got = FromProto(p);
    ASSERT_TRUE(got.ok());
    // A plan without owner_of_unit counts units against the ownership in force.
    for (const BlockPlan& bp : got->blocks) {
      if (!bp.owner_of_unit.empty()) shape.blocks[0].owner_of_unit = bp.owner_of_unit;
    }
    EXPECT_TRUE(ValidatePlan(*got, shape).ok()) << ValidatePlan(*got, shape);
  }
}

// The owner of each unit, as `plan` states it over its blocks.
std::vector<int> StatedOwners(const v1::WorkloadPlan& plan) {
  std::vector<int> owners;
  for (const v1::BlockPlan& b : plan.blocks()) {
    for (int32_t o : b.owner_of_unit()) owners.push_back(o);
  }
  return owners;
}

// A chronic straggler's units were resharded away; then it recovers. Once the group has
// been calm for reshard_after (2 s here) without a gap in the rounds, the split goes back
// to even, by a reshard (on this slow link offloading never pays, so nothing else could
// even it), and stays.
TEST_F(CoordinatorTest, ARecoveredStragglersSplitGoesBackToEvenOnceTheGroupHasBeenCalm) {
  RecordingSink sink;
  int64_t step = ReshardAChronicStraggler(&sink);
  ASSERT_EQ(sink.plans().size(), 1u) << "no reshard for the chronic straggler";
  const std::vector<int> owned_now = StatedOwners(sink.plans()[0]);
  ASSERT_EQ(owned_now.size(), static_cast<size_t>(kUnits));
  const int rank1_units = std::count(owned_now.begin(), owned_now.end(), 1);
  ASSERT_LT(rank1_units, kUnits / 2);
  auto moves = [&] {
    int n = 0;
    for (const v1::WorkloadPlan& p : sink.plans()) {
      n += p.blocks_size() > 0 && p.blocks(0).owner_of_unit_size() > 0;
    }
    return n;
  };
  auto round = [&](bool confirm) {
    Report(step++, {kUnits - rank1_units, rank1_units}, {1e-3, 1e-3},
           confirm ? owned_now : std::vector<int>{});
    clock_.Advance(absl::Milliseconds(100));
    coordinator_->Tick();
  };

  // Recovered: both ranks as fast, on the uneven split the workers now run. (Their
  // first report confirms the move; the reshard's plan stays in force, stating it.) 1.5 s:
  // calm for less than 2 s, as the speed model needs a few reports to adopt the speed.
  for (int i = 0; i < 15; ++i) round(i == 0);
  EXPECT_EQ(moves(), 1) << "evened after 1.5 s, before 2 s of calm";
  EXPECT_EQ(sink.plans().size(), 1u) << "a plan pushed only to drop the confirmed move";
  // A pause: 1 s without a round judged. Calm counts from the next round again.
  clock_.Advance(absl::Seconds(1));
  const absl::Duration resumed = clock_.Monotonic();
  int i = 0;
  for (; i < 100 && moves() == 1; ++i) round(false);
  ASSERT_EQ(moves(), 2) << "the uneven split was kept for " << i << " more steps";
  EXPECT_GE(clock_.Monotonic() - resumed, absl::Seconds(2)) << "the pause counted as calm";
  std::vector<int> counts(2, 0);
  const v1::WorkloadPlan evened = sink.plans().back();
  for (const v1::BlockPlan& b : evened.blocks()) {
    EXPECT_EQ(b.offloads_size(), 0);
    for (int32_t o : b.owner_of_unit()) ++counts[o];
  }
  EXPECT_THAT(counts, ::testing::ElementsAre(kUnits / 2, kUnits / 2));
  absl::StatusOr<v1::Explanation> why = coordinator_->Explain("vit", "tp0");
  ASSERT_TRUE(why.ok());
  EXPECT_THAT(why->text(), ::testing::HasSubstr("back to the even split"));

  // Applied: calm on the even split, nothing more is pushed.
  const std::vector<int> even_now = StatedOwners(evened);
  const size_t pushed = sink.plans().size();
  for (int j = 0; j < 30; ++j, ++step) {
    Report(step, {kUnits / 2, kUnits / 2}, {1e-3, 1e-3}, j == 0 ? even_now : std::vector<int>{});
    clock_.Advance(absl::Milliseconds(100));
    coordinator_->Tick();
  }
  EXPECT_EQ(moves(), 2);
  EXPECT_EQ(sink.plans().size(), pushed) << "the evening plan, its move made, is what they run";
}

// The reshard's plan stays in force, stating its move, once the workers have made it
// (group_planner.h, WithoutMadeMove), and the group runs all-local on the new split: a
// straggler there that is marginal (1.2x, within the marginal factor) is waited out
// before balancing, as on any all-local plan (StragglerJudge, group_figures.h:
// PlanRunsAllLocal), and nothing is pushed meanwhile.
TEST_F(CoordinatorTest, AMarginalStragglerOnTheSplitAReshardLeftIsWaitedOut) {
  RecordingSink sink;
  int64_t step = ReshardAChronicStraggler(&sink);
  ASSERT_EQ(sink.plans().size(), 1u) << "no reshard for the chronic straggler";
  const std::vector<int> owned_now = StatedOwners(sink.plans()[0]);
  const int rank1_units = std::count(owned_now.begin(), owned_now.end(), 1);
  // Rank 1, relieved, now 1.2x rank 0 per unit: its first report confirms the move.
  for (int i = 0; i < 12; ++i, ++step) {
    Report(step, {kUnits - rank1_units, rank1_units}, {1e-3, 1.2e-3},
           i == 0 ? owned_now : std::vector<int>{});
    clock_.Advance(absl::Milliseconds(100));
    coordinator_->Tick();
  }
  absl::StatusOr<v1::Explanation> why = coordinator_->Explain("vit", "tp0");
  ASSERT_TRUE(why.ok());
  EXPECT_THAT(why->text(), ::testing::HasSubstr("1 1.20x straggling; a marginal straggler, for "));
  EXPECT_EQ(sink.plans().size(), 1u);
}

// A coordinator killed while the workers ran its plan, restarted after the straggler has
// gone: the workers still offload under the lost plan, so the new coordinator must replace
// it with the all-local plan it decides, numbered above the workers' version, once.
TEST_F(CoordinatorTest, ARestartedCoordinatorReplacesAPlanItDoesNotKnow) {
  RecordingSink sink;
  ASSERT_NO_FATAL_FAILURE(StartMigrateJob({}, &sink));
  const int64_t lost_version = absl::ToUnixMicros(clock_.Now()) + 1'000'000'000;
  int64_t step = 0;
  for (; step < 10; ++step) {
    Report(step, {4, 4}, {1e-3, 1e-3}, {}, lost_version, /*plan_number=*/7);
    clock_.Advance(absl::Milliseconds(100));
    coordinator_->Tick();
  }
  ASSERT_EQ(sink.plans().size(), 1u) << "the plan in force was not replaced";
  EXPECT_EQ(sink.plans()[0].blocks_size(), 0);  // calm ranks: all-local
  const int64_t version = sink.plans()[0].version();
  EXPECT_GT(version, lost_version);
  EXPECT_EQ(sink.plans()[0].number(), 8);  // numbered on from the plan the workers ran
  // Once the workers run it, nothing more is pushed.
  for (int i = 0; i < 10; ++i, ++step) {
    Report(step, {4, 4}, {1e-3, 1e-3}, {}, version);
    clock_.Advance(absl::Milliseconds(100));
    coordinator_->Tick();
  }
  EXPECT_EQ(sink.plans().size(), 1u);
}

TEST_F(CoordinatorTest, PlanLatencyRunsFromDecisionUntilEveryRankReportsUnderThePlan) {
  RecordingSink sink;
  ASSERT_NO_FATAL_FAILURE(StartMigrateJob({}, &sink));
  int64_t step = 0;
  for (; step < 40 && sink.plans().empty(); ++step) {
    Report(step, {4, 4}, {1e-3, 2e-3});
    clock_.Advance(absl::Milliseconds(100));
    coordinator_->Tick();
  }
  ASSERT_FALSE(sink.plans().empty());
  const int64_t version = sink.plans().back().version();
  CoordinatorObservations seen = coordinator_->TakeObservations();
  EXPECT_GE(seen.decision_seconds.size(), 1u);  // every Tick that planned
  EXPECT_TRUE(seen.plan_latency_seconds.empty());
  // Reports still under the old plan do not end it; once both ranks run under the new
  // one, the latency is the time since the decision.
  clock_.Advance(absl::Milliseconds(300));
  Report(step++, {4, 4}, {1e-3, 2e-3}, {}, /*plan_version=*/0);
  EXPECT_TRUE(coordinator_->TakeObservations().plan_latency_seconds.empty());
  clock_.Advance(absl::Milliseconds(200));
  Report(step++, {5, 3}, {1e-3, 2e-3}, {}, version);
  seen = coordinator_->TakeObservations();
  ASSERT_EQ(seen.plan_latency_seconds.size(), 1u);
  EXPECT_NEAR(seen.plan_latency_seconds[0], 0.5, 1e-9);
  // Observed once per plan.
  Report(step++, {5, 3}, {1e-3, 2e-3}, {}, version);
  EXPECT_TRUE(coordinator_->TakeObservations().plan_latency_seconds.empty());
}

TEST_F(CoordinatorTest, PausedJobsKeepTheirPlanAndObserveModePushesNothing) {
  JobPolicy policy;
  policy.mode = BalanceMode::kObserve;
  policy.report_period = absl::Milliseconds(100);
  // Offloading cannot pay on this link; cheap accuracy makes pruning the straggler pay.
  policy.accuracy_weight_seconds = 1e-3;
  ASSERT_TRUE(coordinator_->SetPolicy("vit", policy).ok());
  RecordingSink sink;
  ASSERT_TRUE(coordinator_->AgentConnected(Hello({0, 0, 0, 0, 1, 1, 1, 1}), &sink).ok());
  for (int step = 0; step < 20; ++step) {
    Report(step, {4, 4}, {1e-3, 3e-3});
    clock_.Advance(absl::Milliseconds(100));
    coordinator_->Tick();
  }
  EXPECT_TRUE(sink.plans().empty());
  absl::StatusOr<v1::Explanation> why = coordinator_->Explain("vit", "tp0");
  ASSERT_TRUE(why.ok());
  // Explained, not pushed; rendered when asked, in order: the speeds' verdict, the
  // link, each block, the step.
  const std::string& text = why->text();
  const size_t pooled = text.find("pooled"), link = text.find("\nlink: "),
               block = text.find("\nblock 0:\nblock 0 mode observe"), step = text.find("\nstep: ");
  ASSERT_NE(pooled, std::string::npos) << text;
  ASSERT_NE(link, std::string::npos) << text;
  ASSERT_NE(block, std::string::npos) << text;
  ASSERT_NE(step, std::string::npos) << text;
  EXPECT_LT(pooled, link);
  EXPECT_LT(link, block);
  EXPECT_LT(block, step);
  EXPECT_THAT(text, ::testing::HasSubstr("would push"));

  ASSERT_TRUE(coordinator_->SetPaused("", true).ok());
  policy.mode = BalanceMode::kAuto;
  ASSERT_TRUE(coordinator_->SetPolicy("vit", policy).ok());
  for (int step = 20; step < 30; ++step) {
    Report(step, {4, 4}, {1e-3, 3e-3});
    clock_.Advance(absl::Milliseconds(100));
    coordinator_->Tick();
  }
  EXPECT_TRUE(sink.plans().empty()) << "a paused cluster got a plan";
  ASSERT_TRUE(coordinator_->SetPaused("", false).ok());
  clock_.Advance(absl::Milliseconds(100));
  coordinator_->Tick();
  EXPECT_EQ(sink.plans().size(), 1u);
}

TEST_F(CoordinatorTest, AfterAChangeOnlyALargeImprovementChangesThePlanUntilTheDwellEnds) {
  RecordingSink sink;
  ASSERT_NO_FATAL_FAILURE(
      StartMigrateJob({.plan_dwell = absl::Seconds(2), .dwell_hysteresis = 0.3}, &sink));
  int64_t step = 0;
  // One planning round (100 ms) per step, with rank 1 at `slow` seconds per unit.
  auto run = [&](int steps, double slow) {
    for (int i = 0; i < steps; ++i, ++step) {
      Report(step, {4, 4}, {1e-3, slow});
      clock_.Advance(absl::Milliseconds(100));
      coordinator_->Tick();
    }
  };

  // Rank 1 at 3x: moving 2 of its 4 units balances the block (6 vs 6, from 12).
  for (int i = 0; i < 20 && sink.plans().empty(); ++i) run(1, 3e-3);
  ASSERT_EQ(sink.plans().size(), 1u);
  EXPECT_EQ(OffloadedUnits(sink.plans()[0]), 2);

  // Rank 1 drifts to 4x: a third unit would give 7 instead of 8, 12.5% better. That beats
  // the job's 5% hysteresis but not the dwell's 30%, so the plan holds for the dwell (2 s
  // from the change; the speed model adopts the new speed within 3 reports) and changes
  // right after it.
  run(15, 4e-3);
  EXPECT_EQ(sink.plans().size(), 1u) << "changed within the dwell";
  absl::StatusOr<v1::Explanation> why = coordinator_->Explain("vit", "tp0");
  ASSERT_TRUE(why.ok());
  EXPECT_THAT(why->text(), ::testing::HasSubstr("hysteresis 0.3 until the 2s dwell ends"));
  run(10, 4e-3);
  ASSERT_EQ(sink.plans().size(), 2u) << "not changed after the dwell";
  EXPECT_EQ(OffloadedUnits(sink.plans()[1]), 3);
  // Plans are numbered 1, 2, ... per group, for people (versions are wall-clock µs).
  EXPECT_EQ(sink.plans()[0].number(), 1);
  EXPECT_EQ(sink.plans()[1].number(), 2);

  // Rank 1 at 12x, within the new plan's dwell: moving all 4 units (8 instead of 12) is
  // 33% better, so it is pushed at once, as soon as the speed model adopts the new speed.
  run(5, 12e-3);
  ASSERT_EQ(sink.plans().size(), 3u) << "a large improvement waited for the dwell";
  EXPECT_EQ(OffloadedUnits(sink.plans()[2]), 4);
}

// Both ranks of vit/tp0 with `blocks` blocks of 64 units each, split evenly.
v1::AgentHello HelloWithBlocks(int blocks) {
  std::vector<int> owners(64, 0);
  std::fill(owners.begin() + 32, owners.end(), 1);
  v1::AgentHello hello = Hello(owners);
  for (v1::WorkerIdentity& w : *hello.mutable_workers()) {
    for (int b = 1; b < blocks; ++b) {
      v1::BlockInfo* info = w.add_blocks();
      *info = w.blocks(0);
      info->set_block(b);
    }
  }
  return hello;
}

// Calm ranks whose per-block estimates differ by noise (each rank 25% slower than the
// other in one block of four: 1.06x over its blocks) stay all-local: a rank's verdict is
// pooled over its blocks. Before pooling, each noisy block alone offloaded 3 units
// (40 -> 36 units of time, 9.4% better, above the 5% hysteresis). A rank slow in every block is
// balanced, and once it is calm again the group goes back to all-local and stays there.
TEST_F(CoordinatorTest, CalmRanksWithNoisyBlocksStayAllLocalAStragglerIsBalanced) {
  coordinator_ = *Coordinator::Create({.marginal_straggler_for = absl::Milliseconds(500)}, &clock_,
                                      &store_, speeds_.get());
  JobPolicy policy;
  policy.mode = BalanceMode::kMigrate;
  policy.report_period = absl::Milliseconds(100);
  ASSERT_TRUE(coordinator_->SetPolicy("vit", policy).ok());
  RecordingSink sink;
  constexpr int kBlocks = 4;
  ASSERT_TRUE(coordinator_->AgentConnected(HelloWithBlocks(kBlocks), &sink).ok());
  int64_t step = 0;
  int64_t version = 0;
  // One planning round per step; spu[rank][block] seconds per unit.
  auto run = [&](int steps, const std::vector<std::vector<double>>& spu) {
    for (int i = 0; i < steps; ++i, ++step) {
      for (int rank : {0, 1}) {
        v1::WorkerReport r = testing::StepReport({}, rank, step, 32, 32 * spu[rank][0]);
        r.mutable_step()->set_plan_version(version);
        for (int b = 1; b < kBlocks; ++b) {
          *r.mutable_step()->add_blocks() = testing::BlockTime(b, 32, 32 * spu[rank][b]);
        }
        ASSERT_TRUE(coordinator_->Report("agent-1", r).ok());
      }
      clock_.Advance(absl::Milliseconds(100));
      coordinator_->Tick();
      if (!sink.plans().empty()) version = sink.plans().back().version();
    }
  };

  const std::vector<std::vector<double>> calm = {{1e-3, 1.25e-3, 1e-3, 1e-3},
                                                 {1.25e-3, 1e-3, 1e-3, 1e-3}};
  run(30, calm);
  EXPECT_TRUE(sink.plans().empty()) << "noise in one block moved a plan";
  absl::StatusOr<v1::Explanation> why = coordinator_->Explain("vit", "tp0");
  ASSERT_TRUE(why.ok());
  EXPECT_THAT(why->text(), ::testing::HasSubstr("ranks pooled over 4 blocks"));
  EXPECT_THAT(why->text(), ::testing::HasSubstr("1.06x; calm"));

  // Rank 1 at 1.2x in every block: a marginal straggler, balanced only once it has lasted
  // marginal_straggler_for, 5 planning rounds here (the speed model adopts the new speed
  // after 3 reports first).
  const std::vector<std::vector<double>> marginal = {{1e-3, 1e-3, 1e-3, 1e-3},
                                                     {1.2e-3, 1.2e-3, 1.2e-3, 1.2e-3}};
  run(4, marginal);
  EXPECT_TRUE(sink.plans().empty()) << "a marginal straggler was balanced at once";
  why = coordinator_->Explain("vit", "tp0");
  ASSERT_TRUE(why.ok());
  EXPECT_THAT(why->text(), ::testing::HasSubstr("a marginal straggler, for "));
  EXPECT_THAT(why->text(), ::testing::HasSubstr(" of 500ms before balancing: all-local"));
  // A blip: calm again before it lasted. The next one counts from its own start.
  run(10, calm);
  run(4, marginal);
  EXPECT_TRUE(sink.plans().empty()) << "two short blips added up to a plan";
  // A pause is a gap in the rounds, not time the straggler was seen to last: the run
  // starts again after it.
  ASSERT_TRUE(coordinator_->SetPaused("", true).ok());
  clock_.Advance(absl::Seconds(2));
  coordinator_->Tick();
  ASSERT_TRUE(coordinator_->SetPaused("", false).ok());
  run(2, marginal);
  EXPECT_TRUE(sink.plans().empty()) << "paused time counted towards the marginal straggler";
  run(6, marginal);
  EXPECT_FALSE(sink.plans().empty()) << "a lasting marginal straggler was not balanced";

  // Rank 1 at 3x in every block (3.9x in one). Every block is balanced on rank 1's
  // slowdown pooled over the blocks, 3.225x, not on its own estimate: 17 of rank 1's 32
  // units move in each (49 vs 48.4 units of time), the 3.9x block included (on its own
  // estimate it would move 19, and 16 in the others).
  const std::vector<std::vector<double>> slow = {{1e-3, 1e-3, 1e-3, 1e-3},
                                                 {3e-3, 3e-3, 3.9e-3, 3e-3}};
  run(10, slow);
  ASSERT_FALSE(sink.plans().empty()) << "a straggler in every block was not balanced";
  absl::StatusOr<WorkloadPlan> relief = FromProto(sink.plans().back());
  ASSERT_TRUE(relief.ok()) << relief.status();
  ASSERT_EQ(relief->blocks.size(), static_cast<size_t>(kBlocks));
  for (const BlockPlan& bp : relief->blocks) {
    int offloaded = 0;
    for (const Offload& o : bp.offloads) offloaded += o.units;
    EXPECT_EQ(offloaded, 17) << "block " << bp.block.value();
  }

  // Calm again: all-local within a few rounds (3 calm samples per rank and block), then no
  // further plan while the noise goes on.
  const size_t before = sink.plans().size();
  run(10, calm);
  ASSERT_EQ(sink.plans().size(), before + 1);
  EXPECT_EQ(sink.plans().back().blocks_size(), 0);
  run(30, calm);
  EXPECT_EQ(sink.plans().size(), before + 1) << "a calm group's plan changed";
}

}  // namespace
}  // namespace ballast::coordinator
