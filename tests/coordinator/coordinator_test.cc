// The coordinator's decisions with fakes (clock, policy store, agent sink): no servers, so
// time and restarts are fully under the test's control. Its bookkeeping (options,
// forgetting, caps, names) is in coordinator_lifecycle_test.cc.
#include "coordinator/coordinator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
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

// A chronic straggler's units were resharded away; then it recovers. Once the group has
// been calm for reshard_after (2 s here) without a gap in the rounds, the split goes back
// to even, by a reshard (on this slow link offloading never pays, so nothing else could
// even it), and stays.
TEST_F(CoordinatorTest, ARecoveredStragglersSplitGoesBackToEvenOnceTheGroupHasBeenCalm) {
  RecordingSink sink;
  int64_t step = ReshardAChronicStraggler(&sink);
  ASSERT_EQ(sink.plans().size(), 1u) << "no reshard for the chronic straggler";
  std::vector<int> owned_now;
  const v1::WorkloadPlan resharded = sink.plans()[0];  // plans() is a copy
  for (const v1::BlockPlan& b : resharded.blocks()) {
    for (int32_t o : b.owner_of_unit()) owned_now.push_back(o);
  }
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
  // first report confirms the move, and the coordinator pushes all-local on it.) 1.5 s:
  // calm for less than 2 s, as the speed model needs a few reports to adopt the speed.
  for (int i = 0; i < 15; ++i) round(i == 0);
  EXPECT_EQ(moves(), 1) << "evened after 1.5 s, before 2 s of calm";
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
  std::vector<int> even_now;
  for (const v1::BlockPlan& b : evened.blocks()) {
    for (int32_t o : b.owner_of_unit()) even_now.push_back(o);
  }
  const size_t pushed = sink.plans().size();
  for (int j = 0; j < 30; ++j, ++step) {
    Report(step, {kUnits / 2, kUnits / 2}, {1e-3, 1e-3}, j == 0 ? even_now : std::vector<int>{});
    clock_.Advance(absl::Milliseconds(100));
    coordinator_->Tick();
  }
  EXPECT_EQ(moves(), 2);
  EXPECT_LE(sink.plans().size(), pushed + 1);  // at most the all-local on the confirmed move
  EXPECT_EQ(sink.plans().back().blocks_size(), 0);
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

// Units offloaded from rank 1 to rank 0 by a pushed plan (0 for all-local).
int OffloadedUnits(const v1::WorkloadPlan& proto) {
  absl::StatusOr<WorkloadPlan> plan = FromProto(proto);
  EXPECT_TRUE(plan.ok()) << plan.status();
  int units = 0;
  if (!plan.ok()) return units;
  for (const BlockPlan& bp : plan->blocks) {
    for (const Offload& o : bp.offloads) units += o.units;
  }
  return units;
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

// Two ranks of one block in lockstep for `steps` steps, planned every 100 ms: rank r
// computes units[r] units at c[r] s/unit and spends own[r] seconds in collectives of its
// own, then waits for the later rank (the step is the slowest compute + own collectives).
// `stall` is added to the first step's collective time on both ranks.
class TwoRankLockstep {
 public:
  TwoRankLockstep(Coordinator* coordinator, testing::FakeClock* clock)
      : coordinator_(coordinator), clock_(clock) {}
  void Run(int steps, const std::vector<int>& units, const std::vector<double>& c,
           const std::vector<double>& own, int64_t version, double stall = 0) {
    for (int i = 0; i < steps; ++i, ++step_) {
      const double compute[2] = {units[0] * c[0], units[1] * c[1]};
      const double step_seconds = std::max(compute[0] + own[0], compute[1] + own[1]);
      for (int rank : {0, 1}) {
        v1::WorkerReport r = testing::StepReport({}, rank, step_, units[rank], compute[rank]);
        r.mutable_step()->set_plan_version(version);
        r.mutable_step()->mutable_blocks(0)->set_comm_seconds(step_seconds - compute[rank] +
                                                              (i == 0 ? stall : 0));
        ASSERT_TRUE(coordinator_->Report("agent-1", r).ok());
      }
      clock_->Advance(absl::Milliseconds(100));
      coordinator_->Tick();
    }
  }
  v1::GroupStatus Status() {
    absl::StatusOr<v1::ClusterStatus> s = coordinator_->Status("vit");
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? s->jobs(0).groups(0) : v1::GroupStatus();
  }

 private:
  Coordinator* coordinator_;
  testing::FakeClock* clock_;
  int64_t step_ = 0;
};

// Status predicts the whole step: the planner's block compute plus the collectives' own
// cost, the smallest median over the ranks (the last rank to arrive waits least). The
// measured step is the slowest rank's median, so one stalled report moves neither. Here
// the ranks' collectives cost them alike (2 ms), and fixed costs are off: compute alone
// is balanced, as a cluster whose slow ranks are slow only in compute wants.
TEST_F(CoordinatorTest, StatusPredictsTheWholeStepFromMedians) {
  RecordingSink sink;
  ASSERT_NO_FATAL_FAILURE(StartMigrateJob({.fixed_costs = FixedCostsMode::kOff}, &sink));
  JobPolicy policy = *coordinator_->GetPolicy("vit");
  policy.mode = BalanceMode::kObserve;  // explain, push nothing: all-local stays
  ASSERT_TRUE(coordinator_->SetPolicy("vit", policy).ok());
  TwoRankLockstep ranks(coordinator_.get(), &clock_);
  const std::vector<double> c = {1e-3, 3e-3}, own = {2e-3, 2e-3};

  // All-local with rank 1 at 3x: 12 ms of compute on rank 1, 2 ms of collectives.
  ranks.Run(20, {4, 4}, c, own, 0);
  v1::GroupStatus g = ranks.Status();
  EXPECT_NEAR(g.predicted_collective_seconds(), 2e-3, 1e-9);
  EXPECT_NEAR(g.predicted_step_seconds(), 14e-3, 1e-9);
  EXPECT_NEAR(g.measured_step_seconds(), 14e-3, 1e-9);
  ranks.Run(1, {4, 4}, c, own, 0, /*stall=*/1.0);  // one report stalled a second
  g = ranks.Status();
  EXPECT_NEAR(g.predicted_step_seconds(), 14e-3, 1e-9);
  EXPECT_NEAR(g.measured_step_seconds(), 14e-3, 1e-9);
  absl::StatusOr<v1::Explanation> why = coordinator_->Explain("vit", "tp0");
  ASSERT_TRUE(why.ok());
  EXPECT_THAT(why->text(), ::testing::HasSubstr("step: 0.0140 s predicted = 0.0120 s of block "
                                                "compute + 0.0020 s of collectives"));
  EXPECT_THAT(why->text(), ::testing::HasSubstr("fixed costs: off"));

  // Balanced (migrate): 2 of rank 1's units on rank 0, 6 ms each, nobody waits.
  policy.mode = BalanceMode::kMigrate;
  ASSERT_TRUE(coordinator_->SetPolicy("vit", policy).ok());
  ranks.Run(1, {4, 4}, c, own, 0);
  ASSERT_EQ(sink.plans().size(), 1u);
  ASSERT_EQ(OffloadedUnits(sink.plans()[0]), 2);
  ranks.Run(20, {6, 2}, c, own, sink.plans()[0].version());
  g = ranks.Status();
  EXPECT_NEAR(g.measured_step_seconds(), 8e-3, 1e-9);
  // The planner adds the transfer of 2 units on a 1 GB/s link (2 x 2 us a unit).
  EXPECT_NEAR(g.predicted_step_seconds(), 8e-3, 1e-5);

  // Mode off: all-local again, and no prediction (it plans nothing), not the migrate
  // plan's 8 ms against a measured 14 ms.
  policy.mode = BalanceMode::kOff;
  ASSERT_TRUE(coordinator_->SetPolicy("vit", policy).ok());
  ranks.Run(1, {6, 2}, c, own, sink.plans()[0].version());
  ASSERT_EQ(sink.plans().size(), 2u);
  ASSERT_EQ(OffloadedUnits(sink.plans()[1]), 0);
  ranks.Run(20, {4, 4}, c, own, sink.plans()[1].version());
  g = ranks.Status();
  EXPECT_NEAR(g.measured_step_seconds(), 14e-3, 1e-9);
  EXPECT_EQ(g.predicted_step_seconds(), 0);
  EXPECT_EQ(g.predicted_collective_seconds(), 0);
  // Observe plans again, and predicts the all-local step it leaves in force.
  policy.mode = BalanceMode::kObserve;
  ASSERT_TRUE(coordinator_->SetPolicy("vit", policy).ok());
  ranks.Run(1, {4, 4}, c, own, sink.plans()[1].version());
  EXPECT_EQ(sink.plans().size(), 2u);
  EXPECT_NEAR(ranks.Status().predicted_step_seconds(), 14e-3, 1e-9);

  // Observe straight after a balancing mode ends its plan too (all-local, once), so the
  // step it predicts is the one in force, not the old plan left running unattended.
  policy.mode = BalanceMode::kMigrate;
  ASSERT_TRUE(coordinator_->SetPolicy("vit", policy).ok());
  ranks.Run(1, {4, 4}, c, own, sink.plans()[1].version());
  ASSERT_EQ(sink.plans().size(), 3u);
  ASSERT_EQ(OffloadedUnits(sink.plans()[2]), 2);
  policy.mode = BalanceMode::kObserve;
  ASSERT_TRUE(coordinator_->SetPolicy("vit", policy).ok());
  ranks.Run(1, {6, 2}, c, own, sink.plans()[2].version());
  ASSERT_EQ(sink.plans().size(), 4u);
  EXPECT_EQ(OffloadedUnits(sink.plans()[3]), 0);
  ranks.Run(20, {4, 4}, c, own, sink.plans()[3].version());
  EXPECT_EQ(sink.plans().size(), 4u) << "observe pushed a second plan";
  g = ranks.Status();
  EXPECT_NEAR(g.predicted_step_seconds(), 14e-3, 1e-9);
  EXPECT_NEAR(g.measured_step_seconds(), 14e-3, 1e-9);
}

// A straggler's collectives slow with it (a CPU quota: every wake-up waits for its share):
// rank 1 at 3x spends 6 ms of its own in collectives, rank 0 2 ms. Compute alone balanced
// (2 units offloaded) leaves rank 1 at 6 + 6 = 12 ms a step and rank 0 waiting. With its
// 4 ms of excess as a fixed cost the planner offloads 3 units: 7 + 2 = 3 + 6 = 9 ms. The
// estimate holds once rank 0 no longer waits, and the prediction stays the measured step.
TEST_F(CoordinatorTest, AStragglersSlowerCollectivesAreBalancedAsAFixedCost) {
  const std::vector<double> c = {1e-3, 3e-3}, own = {2e-3, 6e-3};
  for (bool fixed_costs : {true, false}) {
    SCOPED_TRACE(fixed_costs ? "fixed costs on" : "fixed costs off");
    RecordingSink sink;
    // (The offload check would probe the plan once 16 steps ran under it: this is about
    // what the plan is.)
    ASSERT_NO_FATAL_FAILURE(
        StartMigrateJob({.fixed_costs = fixed_costs ? FixedCostsMode::kOn : FixedCostsMode::kOff,
                         .offload_check = std::nullopt},
                        &sink));
    TwoRankLockstep ranks(coordinator_.get(), &clock_);
    ranks.Run(1, {4, 4}, c, own, 0);
    ASSERT_EQ(sink.plans().size(), 1u);
    const int offloaded = OffloadedUnits(sink.plans()[0]);
    EXPECT_EQ(offloaded, fixed_costs ? 3 : 2);
    ranks.Run(20, {4 + offloaded, 4 - offloaded}, c, own, sink.plans()[0].version());
    EXPECT_EQ(sink.plans().size(), 1u) << "the plan moved on its own outcome";
    const v1::GroupStatus g = ranks.Status();
    EXPECT_NEAR(g.measured_step_seconds(), fixed_costs ? 9e-3 : 12e-3, 1e-9);
    // Within the transfers' few microseconds.
    EXPECT_NEAR(g.predicted_step_seconds(), fixed_costs ? 9e-3 : 12e-3, 1e-5);
    absl::StatusOr<v1::Explanation> why = coordinator_->Explain("vit", "tp0");
    ASSERT_TRUE(why.ok());
    if (fixed_costs) {
      EXPECT_THAT(why->text(), ::testing::HasSubstr("fixed seconds a step beyond 0.002 s of "
                                                    "collectives (balanced with the units): "
                                                    "0 +0 1 +0.004"));
      EXPECT_THAT(why->text(), ::testing::HasSubstr("1:0.004+0.003x"));
    }
  }
}

// Job "vit" in mode observe: calm for 3 s if `calm_first` (10 ms a unit, 20 ms of
// collectives each), then rank 1 3x slower for 6 s, its own collectives `own` (all-local,
// so they are measured: straggler_kind.h); then one step in mode migrate.
void SlowUnderObserveThenMigrate(Coordinator* coordinator, testing::FakeClock* clock,
                                 bool calm_first, const std::vector<double>& own) {
  const std::vector<double> calm = {10e-3, 10e-3}, slow = {10e-3, 30e-3};
  JobPolicy policy = *coordinator->GetPolicy("vit");
  policy.mode = BalanceMode::kObserve;
  ASSERT_TRUE(coordinator->SetPolicy("vit", policy).ok());
  TwoRankLockstep ranks(coordinator, clock);
  if (calm_first) ranks.Run(30, {4, 4}, calm, {20e-3, 20e-3}, 0);
  ranks.Run(60, {4, 4}, slow, own, 0);
  policy.mode = BalanceMode::kMigrate;
  ASSERT_TRUE(coordinator->SetPolicy("vit", policy).ok());
  ranks.Run(1, {4, 4}, slow, own, 0);
}

// --fixed_costs=auto, the default: fixed costs only for a straggler whose collectives
// were measured slower than the group's calm ones. The group runs calm (10 ms a unit, 20
// ms of collectives each), then rank 1 turns 3x slower under mode observe (all-local, so
// its collectives are measured): as a CPU quota would (its own collectives 60 ms: the
// floor 3x the calm one), its 40 ms of excess are balanced as a fixed cost and migrate
// offloads 3 units; as a slower device would (its own still 20 ms), compute alone and 2
// units. A straggler there since the start has no calm floor to compare with: 2 units.
TEST_F(CoordinatorTest, FixedCostsOnlyWhereTheStragglersCollectivesSlowedWithIt) {
  struct Case {
    const char* name;
    bool calm_first;
    std::vector<double> own;
    int offloaded;
    const char* kind;
  };
  for (const Case& k : {Case{"quota", true, {20e-3, 60e-3}, 3, "slow in its collectives too"},
                        Case{"device", true, {20e-3, 20e-3}, 2, "slow in its compute alone"},
                        Case{"from the start", false, {20e-3, 60e-3}, 2, "unknown"}}) {
    SCOPED_TRACE(k.name);
    RecordingSink sink;
    // (A straggler of measured kind would be resharded at once: the next test. This one is
    // about the offloads' fixed costs.)
    ASSERT_NO_FATAL_FAILURE(StartMigrateJob({.reshard_slower_devices = false,
                                             .reshard_throttled_ranks = false,
                                             .offload_check = std::nullopt},
                                            &sink));
    ASSERT_NO_FATAL_FAILURE(
        SlowUnderObserveThenMigrate(coordinator_.get(), &clock_, k.calm_first, k.own));
    absl::StatusOr<v1::Explanation> why = coordinator_->Explain("vit", "tp0");
    ASSERT_TRUE(why.ok());
    EXPECT_THAT(why->text(),
                ::testing::HasSubstr(absl::StrCat("straggler kind (rank 1): ", k.kind)));
    ASSERT_EQ(sink.plans().size(), 1u);
    EXPECT_EQ(OffloadedUnits(sink.plans()[0]), k.offloaded);
    coordinator_.reset();
  }
}

// --reshard_slower_devices and --reshard_throttled_ranks, the defaults: a straggler whose
// kind was measured is resharded as soon as it is known, not offloaded until it has lasted
// reshard_after (60 s here). The group of the test above: calm, then rank 1 3x slower for
// 6 s under observe (all-local, so its collectives are measured), then migrate. As a
// slower device (its collectives as calm) or throttled whole (a CPU quota: its
// collectives 3x too) it owns fewer units in the first plan and offloads none; with its
// kind's flag off it is offloaded.
TEST_F(CoordinatorTest, AStragglerIsReshardedOnceItsKindIsMeasured) {
  struct Case {
    const char* name;
    bool reshard_slower_devices;
    bool reshard_throttled_ranks;
    std::vector<double> own;
    bool resharded;
    const char* why;
  };
  for (const Case& k :
       {Case{"device", true, true, {20e-3, 20e-3}, true, "rank 1: a slower device (measured)"},
        Case{"device, flag off", false, true, {20e-3, 20e-3}, false, ""},
        Case{"quota",
             true,
             true,
             {20e-3, 60e-3},
             true,
             "rank 1: throttled whole (its collectives slow too) (measured)"},
        Case{"quota, flag off", true, false, {20e-3, 60e-3}, false, ""}}) {
    SCOPED_TRACE(k.name);
    RecordingSink sink;
    ASSERT_NO_FATAL_FAILURE(StartMigrateJob({.reshard_slower_devices = k.reshard_slower_devices,
                                             .reshard_throttled_ranks = k.reshard_throttled_ranks,
                                             .offload_check = std::nullopt},
                                            &sink));
    ASSERT_NO_FATAL_FAILURE(SlowUnderObserveThenMigrate(coordinator_.get(), &clock_,
                                                        /*calm_first=*/true, k.own));
    ASSERT_EQ(sink.plans().size(), 1u);
    absl::StatusOr<WorkloadPlan> plan = FromProto(sink.plans()[0]);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_EQ(plan->blocks.size(), 1u);
    const std::vector<RankId>& owners = plan->blocks[0].owner_of_unit;
    absl::StatusOr<v1::Explanation> why = coordinator_->Explain("vit", "tp0");
    ASSERT_TRUE(why.ok());
    if (k.resharded) {
      ASSERT_EQ(owners.size(), static_cast<size_t>(kUnits));
      EXPECT_LT(std::count(owners.begin(), owners.end(), RankId(1)), kUnits / 2);
      EXPECT_EQ(OffloadedUnits(sink.plans()[0]), 0);
      EXPECT_THAT(why->text(), ::testing::HasSubstr(absl::StrCat(k.why, ": chronic now")));
      // Status shows the rank as the decisions see it (6 s of straggling: transient by
      // reshard_after alone).
      absl::StatusOr<v1::ClusterStatus> status = coordinator_->Status("vit");
      ASSERT_TRUE(status.ok()) << status.status();
      const v1::GroupStatus& g = status->jobs(0).groups(0);
      ASSERT_EQ(g.ranks_size(), 2);
      EXPECT_EQ(g.ranks(1).state(), "chronic");
    } else {
      EXPECT_TRUE(owners.empty()) << "resharded a straggler not chronic, its flag off";
      EXPECT_GT(OffloadedUnits(sink.plans()[0]), 0);
      EXPECT_THAT(why->text(), ::testing::Not(::testing::HasSubstr("chronic now")));
    }
    coordinator_.reset();
  }
}

}  // namespace
}  // namespace ballast::coordinator
