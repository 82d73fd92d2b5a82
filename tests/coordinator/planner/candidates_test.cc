// candidates.h: the list PlanBlock walks, and which of its entries a block prices.
#include "coordinator/planner/candidates.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "coordinator/planner/planner.h"
#include "tests/coordinator/planner/planner_test_util.h"

namespace ballast::coordinator {
namespace {

using planner_internal::CandidateEntry;
using planner_internal::CandidateList;
using planner_testing::Case;
using planner_testing::MakeInput;
using planner_testing::Straggler;
using ::testing::ElementsAre;

std::vector<CandidateKind> Kinds(const BlockDecision& d) {
  std::vector<CandidateKind> kinds;
  for (const PlanCandidate& c : d.candidates) kinds.push_back(c.kind);
  return kinds;
}

// Explanations and the planner's digest list the candidates in this order.
TEST(CandidateListTest, EveryCandidateOnceInOrder) {
  std::vector<CandidateKind> kinds;
  for (const CandidateEntry& entry : CandidateList()) {
    kinds.push_back(entry.kind);
    EXPECT_NE(entry.applies, nullptr);
    EXPECT_NE(entry.evaluate, nullptr);
  }
  EXPECT_THAT(kinds,
              ElementsAre(CandidateKind::kAllLocal, CandidateKind::kResize, CandidateKind::kMigrate,
                          CandidateKind::kAuto, CandidateKind::kReshard, CandidateKind::kCurrent));
}

TEST(CandidateListTest, EachModePricesItsOwnEntries) {
  Case k = Straggler();
  k.chronic.assign(8, false);
  k.chronic[7] = true;  // a reshard is worth pricing
  const PlannerInput in = MakeInput(k);
  const BlockPlan all_local{.block = BlockId(1)};
  auto decide = [&](BalanceMode mode, const BlockPlan* current) {
    JobPolicy policy = k.policy;
    policy.mode = mode;
    absl::StatusOr<BlockDecision> d = PlanBlock(in, policy, current);
    EXPECT_TRUE(d.ok()) << d.status();
    return d.ok() ? Kinds(*d) : std::vector<CandidateKind>{};
  };
  EXPECT_THAT(decide(BalanceMode::kAuto, &all_local),
              ElementsAre(CandidateKind::kAllLocal, CandidateKind::kResize, CandidateKind::kMigrate,
                          CandidateKind::kAuto, CandidateKind::kReshard, CandidateKind::kCurrent));
  // No plan in force: nothing to hold on to.
  EXPECT_THAT(
      decide(BalanceMode::kMigrate, nullptr),
      ElementsAre(CandidateKind::kAllLocal, CandidateKind::kMigrate, CandidateKind::kReshard));
  // Resize moves no unit: no reshard, chronic or not.
  EXPECT_THAT(
      decide(BalanceMode::kResize, &all_local),
      ElementsAre(CandidateKind::kAllLocal, CandidateKind::kResize, CandidateKind::kCurrent));
  // Observe prices what auto would do and pushes all-local: the plan in force does not
  // compete.
  EXPECT_THAT(decide(BalanceMode::kObserve, &all_local),
              ElementsAre(CandidateKind::kAllLocal, CandidateKind::kResize, CandidateKind::kMigrate,
                          CandidateKind::kAuto, CandidateKind::kReshard));
}

// The verdicts: the recommendation is the mode's best technique or a reshard that beats
// it; the plan pushed is all-local when the block does not balance, the plan in force
// when it is kept, else the recommendation.
TEST(CandidateListTest, ThePushedPlanFollowsTheVerdicts) {
  Case k = Straggler();
  const PlannerInput in = MakeInput(k);
  absl::StatusOr<BlockDecision> first = PlanBlock(in, k.policy, nullptr);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->chosen, CandidateKind::kAuto);
  EXPECT_EQ(first->recommended.kind, CandidateKind::kAuto);
  EXPECT_EQ(first->plan, first->recommended.plan);
  // Kept: the same plan in force, not beaten by the hysteresis.
  absl::StatusOr<BlockDecision> kept = PlanBlock(in, k.policy, &first->plan);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->chosen, CandidateKind::kCurrent);
  EXPECT_TRUE(kept->kept_current);
  EXPECT_EQ(kept->recommended.kind, CandidateKind::kAuto);
  // Observe: all-local pushed, auto recommended.
  JobPolicy observe = k.policy;
  observe.mode = BalanceMode::kObserve;
  absl::StatusOr<BlockDecision> watched = PlanBlock(in, observe, &first->plan);
  ASSERT_TRUE(watched.ok()) << watched.status();
  EXPECT_EQ(watched->chosen, CandidateKind::kAllLocal);
  EXPECT_FALSE(watched->kept_current);
  EXPECT_EQ(watched->recommended.kind, CandidateKind::kAuto);
}

}  // namespace
}  // namespace ballast::coordinator
