// planner.h's interface: EvaluatePlan, the input's validation, the caller's workspace.
#include "coordinator/planner/planner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/coordinator/planner/planner_test_util.h"

namespace ballast::coordinator {
namespace {

using planner_testing::Case;
using planner_testing::Explained;
using planner_testing::kInf;
using planner_testing::MakeInput;
using planner_testing::PlanExplained;
using planner_testing::RandomCase;
using planner_testing::Straggler;
using planner_testing::WorkerAccepts;
using ::testing::HasSubstr;

TEST(PlannerTest, EvaluatePlanPricesAndRejects) {
  Case k = Straggler();
  const PlannerInput in = MakeInput(k);
  BlockPlan plan;
  plan.block = BlockId(1);
  plan.offloads = {{RankId(7), RankId(0), 4}};
  absl::StatusOr<PlanCost> cost = EvaluatePlan(in, k.policy, plan);
  ASSERT_TRUE(cost.ok()) << cost.status();
  EXPECT_DOUBLE_EQ(cost->rank_seconds[7], 2e-3 * 60 + 1e-4 * 4);
  EXPECT_DOUBLE_EQ(cost->rank_seconds[0], 1e-3 * 68 + 1e-4 * 4);
  plan.pruned_units.assign(8, 0);
  plan.pruned_units[7] = 33;
  EXPECT_EQ(EvaluatePlan(in, k.policy, plan).status().code(),
            absl::StatusCode::kFailedPrecondition);
  JobPolicy migrate = k.policy;
  migrate.mode = BalanceMode::kMigrate;
  plan.pruned_units[7] = 1;
  EXPECT_THAT(std::string(EvaluatePlan(in, migrate, plan).status().message()),
              HasSubstr("pruned_units[7]"));
  plan.pruned_units.clear();
  plan.offloads.push_back({RankId(7), RankId(0), 1});
  EXPECT_EQ(EvaluatePlan(in, k.policy, plan).status().code(), absl::StatusCode::kInvalidArgument);
}

// A malformed plan gets the workers' own verdict, word for word: the planner has no
// validator of its own (ballast::ValidateBlockPlan, the block part of ValidatePlan).
TEST(PlannerTest, EvaluatePlanRejectsAMalformedPlanAsTheWorkersDo) {
  Case k = Straggler();
  const PlannerInput in = MakeInput(k);
  std::vector<BlockPlan> malformed(5);
  malformed[0].offloads = {{RankId(7), RankId(9), 4}};    // helper out of range
  malformed[1].offloads = {{RankId(7), RankId(7), 4}};    // to itself
  malformed[2].pruned_units = {0, 0, 0, 0, 0, 0, 0, 65};  // more than it owns
  malformed[3].pruned_units = {0, 1};                     // one entry per rank, or none
  malformed[4].owner_of_unit = {RankId(0)};               // one owner per unit, or none
  for (size_t i = 0; i < malformed.size(); ++i) {
    BlockPlan& plan = malformed[i];
    plan.block = BlockId(1);
    const absl::Status workers = WorkerAccepts(in, plan);
    ASSERT_EQ(workers.code(), absl::StatusCode::kInvalidArgument) << i;
    // The same words, less the version a whole plan carries and a block on its own has not.
    const absl::Status planner = EvaluatePlan(in, k.policy, plan).status();
    EXPECT_EQ(planner.code(), absl::StatusCode::kInvalidArgument) << i;
    EXPECT_EQ(absl::StrCat("plan v1 ", planner.message()), workers.message()) << i;
  }
}

// The plan in force is priced by the same rules: a malformed one is listed infeasible with
// the workers' reason, and replaced.
TEST(PlannerTest, AMalformedPlanInForceIsReplaced) {
  Case k = Straggler();
  const PlannerInput in = MakeInput(k);
  BlockPlan current;
  current.block = BlockId(1);
  current.offloads = {{RankId(7), RankId(9), 4}};
  absl::StatusOr<BlockDecision> d = PlanBlock(in, k.policy, &current);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_FALSE(d->kept_current);
  ASSERT_EQ(d->candidates.back().kind, CandidateKind::kCurrent);
  EXPECT_FALSE(d->candidates.back().feasible);
  EXPECT_THAT(d->candidates.back().note, HasSubstr("offloads[0].helper 9 out of range [0, 8)"));
}

// ---------------------------------------------------------------------------------------
// The workspace.

void ExpectSameDecision(const BlockDecision& a, const BlockDecision& b, const std::string& what) {
  EXPECT_EQ(a.chosen, b.chosen) << what;
  EXPECT_EQ(a.plan, b.plan) << what;
  EXPECT_EQ(a.objective, b.objective) << what;
  EXPECT_EQ(a.kept_current, b.kept_current) << what;
  ASSERT_EQ(a.candidates.size(), b.candidates.size()) << what;
  for (size_t i = 0; i < a.candidates.size(); ++i) {
    EXPECT_EQ(a.candidates[i].kind, b.candidates[i].kind) << what;
    EXPECT_EQ(a.candidates[i].feasible, b.candidates[i].feasible) << what;
    EXPECT_EQ(a.candidates[i].plan, b.candidates[i].plan) << what;
    EXPECT_EQ(a.candidates[i].cost.objective, b.candidates[i].cost.objective) << what;
    EXPECT_EQ(a.candidates[i].note, b.candidates[i].note) << what;
  }
}

// One workspace through blocks of every size and mode, with and without a plan in force,
// decides each exactly as a fresh one: what it held before changes nothing. (Also after
// being moved: the coordinator may keep one in a container.)
TEST(PlannerWorkspaceTest, AReusedWorkspaceDecidesAsAFreshOne) {
  std::mt19937_64 rng(3);
  PlannerWorkspace reused;
  const BalanceMode modes[] = {BalanceMode::kAuto, BalanceMode::kMigrate, BalanceMode::kResize,
                               BalanceMode::kObserve};
  int compared = 0;
  for (int i = 0; i < 300; ++i) {
    Case k = RandomCase(rng, /*max_ranks=*/i % 2 == 0 ? 12 : 4, /*max_units=*/40,
                        /*cordon_chance=*/0.2);
    if (i % 3 == 0) k.chronic[0] = true;
    k.policy.mode = modes[i % 4];
    const PlannerInput in = MakeInput(k);
    const std::string what = absl::StrCat("case ", i);
    absl::StatusOr<BlockDecision> fresh = PlanBlock(in, k.policy, nullptr);
    absl::StatusOr<BlockDecision> again = PlanBlock(in, k.policy, nullptr, &reused);
    ASSERT_EQ(fresh.status(), again.status()) << what;
    if (!fresh.ok()) continue;
    ExpectSameDecision(*fresh, *again, what);
    // A little later, with the first plan in force.
    const BlockPlan first = again->plan;
    PlannerInput later = in;
    for (PlannerRank& rank : later.ranks) rank.seconds_per_unit *= 1.1;
    fresh = PlanBlock(later, k.policy, &first);
    again = PlanBlock(later, k.policy, &first, &reused);
    ASSERT_EQ(fresh.status(), again.status()) << what;
    if (fresh.ok()) ExpectSameDecision(*fresh, *again, what);
    ++compared;
    if (i == 150) {
      PlannerWorkspace moved = std::move(reused);
      reused = std::move(moved);
    }
  }
  EXPECT_GT(compared, 250);
}

// ---------------------------------------------------------------------------------------
// Bad input names the field.

void ExpectInvalid(const PlannerInput& in, const JobPolicy& policy, const std::string& field) {
  absl::StatusOr<Explained> d = PlanExplained(in, policy, nullptr);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << d.status();
  EXPECT_THAT(std::string(d.status().message()), HasSubstr(field));
}

TEST(PlannerInputTest, BadInputsNameTheField) {
  const Case k = Straggler();
  const PlannerInput good = MakeInput(k);
  ASSERT_TRUE(PlanBlock(good, k.policy, nullptr).ok());
  for (double bad : {std::nan(""), kInf, -kInf, 0.0, -1e-3}) {
    PlannerInput in = good;
    in.ranks[2].seconds_per_unit = bad;
    ExpectInvalid(in, k.policy, "ranks[2].seconds_per_unit");
  }
  {
    PlannerInput in = good;
    in.ranks[2].seconds_per_unit = std::nan("");
    ExpectInvalid(in, k.policy, "ranks[2].seconds_per_unit nan");
  }
  for (double bad : {std::nan(""), kInf, -1e-3}) {
    PlannerInput in = good;
    in.ranks[3].fixed_seconds = bad;
    ExpectInvalid(in, k.policy, "ranks[3].fixed_seconds");
    // The one check of the ranks, which the layers below PlanBlock trust.
    EXPECT_THAT(std::string(ValidatePlannerRanks(in.ranks).message()),
                HasSubstr("ranks[3].fixed_seconds"));
  }
  {
    PlannerInput in = good;
    in.ranks[1].owned_units = -1;
    ExpectInvalid(in, k.policy, "ranks[1].owned_units");
  }
  {
    PlannerInput in = good;
    in.ranks[1].owned_units = 63;
    ExpectInvalid(in, k.policy, "ranks[1].owned_units 63");
  }
  {
    PlannerInput in = good;
    in.owner_of_unit[5] = RankId(8);
    ExpectInvalid(in, k.policy, "owner_of_unit[5]");
  }
  {
    PlannerInput in = good;
    for (PlannerRank& r : in.ranks) r.cordoned = true;
    ExpectInvalid(in, k.policy, "cordoned");
  }
  for (double bad : {std::nan(""), -1e-4, kInf}) {
    PlannerInput in = good;
    in.transfer_seconds_per_unit = bad;
    ExpectInvalid(in, k.policy, "transfer_seconds_per_unit");
  }
  {
    PlannerInput in = good;
    in.ranks.clear();
    ExpectInvalid(in, k.policy, "ranks");
  }
  {
    JobPolicy policy = k.policy;
    policy.hysteresis = 2;
    ExpectInvalid(good, policy, "hysteresis");
    policy = k.policy;
    policy.max_pruned_fraction_rank = std::nan("");
    ExpectInvalid(good, policy, "max_pruned_fraction_rank");
    policy = k.policy;
    policy.accuracy_weight_seconds = -1;
    ExpectInvalid(good, policy, "accuracy_weight_seconds");
  }
}

}  // namespace
}  // namespace ballast::coordinator
