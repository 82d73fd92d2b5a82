// Balancing a mixture-of-experts block by replicas: Zipf-skewed loads end within the
// tolerance of the balanced time on 2 and 4 ranks, with shares the plan validator takes;
// uniform loads and moves that do not pay make no replicas; bad input is refused by name.
#include "coordinator/planner/expert_balance.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "ballast/ownership.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/coordinator/planner/planner_test_util.h"

namespace ballast::coordinator {
namespace {

using ::testing::HasSubstr;

using planner_testing::Zipf;

ExpertLoads ZipfLoads(int experts, int ranks) {
  return {.work = Zipf(experts, 1.2, 1.0),
          .owner_of_unit = EvenOwnership(experts, ranks),
          .speed = std::vector<double>(ranks, 1.0),
          .replica_cost = 0.002};
}

void ExpectBalancedAndValid(const ExpertLoads& loads) {
  absl::StatusOr<std::vector<Replica>> replicas = BalanceExperts(loads);
  ASSERT_TRUE(replicas.ok()) << replicas.status();
  const std::vector<double> before = RankTimes(loads, {});
  const std::vector<double> after = RankTimes(loads, *replicas);
  // Balanced: the work and the replicas' transfers (two each) spread by speed.
  const double speed = std::accumulate(loads.speed.begin(), loads.speed.end(), 0.0);
  const double balanced =
      std::accumulate(loads.work.begin(), loads.work.end(), 0.0) / speed +
      2 * loads.replica_cost * replicas->size() * loads.speed.size() / speed / loads.speed.size();
  const double slowest = *std::max_element(after.begin(), after.end());
  // Plus one transfer: ranks filled early were filled to the balanced time before later
  // replicas' transfers raised it.
  EXPECT_LE(slowest, balanced * (1 + loads.tolerance) + loads.replica_cost)
      << "before " << *std::max_element(before.begin(), before.end());
  // The workers' validator takes them.
  BlockShape shape{.block = BlockId(1),
                   .num_units = static_cast<int32_t>(loads.work.size()),
                   .owner_of_unit = loads.owner_of_unit,
                   .units_divide = true};
  BlockPlan plan{.block = BlockId(1), .replicas = *replicas};
  EXPECT_TRUE(ValidateBlockPlan(plan, shape, static_cast<int32_t>(loads.speed.size())).ok());
}

TEST(ExpertBalanceTest, ZipfOverEightExpertsOnTwoRanks) {
  const ExpertLoads loads = ZipfLoads(8, 2);
  // Static placement: rank 0 holds the four hottest experts, 81% of the work.
  EXPECT_NEAR(RankTimes(loads, {})[0], 0.81, 0.01);
  ExpectBalancedAndValid(loads);
}

TEST(ExpertBalanceTest, ZipfOnFourRanksSplitsTheHottestExpert) {
  const ExpertLoads loads = ZipfLoads(8, 4);
  // Expert 0 alone is 43% of the work, over the balanced 25%: only a split balances it.
  ASSERT_GT(loads.work[0], 0.4);
  ExpectBalancedAndValid(loads);
  const std::vector<Replica> replicas = *BalanceExperts(loads);
  EXPECT_GE(
      std::count_if(replicas.begin(), replicas.end(), [](const Replica& r) { return r.unit == 0; }),
      2);
}

TEST(ExpertBalanceTest, ASlowerRankGetsLessWork) {
  ExpertLoads loads{.work = std::vector<double>(8, 0.125),
                    .owner_of_unit = EvenOwnership(8, 2),
                    .speed = {1.0, 0.5}};
  ExpectBalancedAndValid(loads);
  const std::vector<double> after = RankTimes(loads, *BalanceExperts(loads));
  EXPECT_NEAR(after[0], after[1], 0.03);
}

TEST(ExpertBalanceTest, UniformLoadsAndMovesThatDoNotPayMakeNoReplicas) {
  ExpertLoads uniform{.work = std::vector<double>(8, 0.125),
                      .owner_of_unit = EvenOwnership(8, 4),
                      .speed = std::vector<double>(4, 1.0),
                      .replica_cost = 0.001};
  EXPECT_TRUE(BalanceExperts(uniform)->empty());
  ExpertLoads costly = ZipfLoads(8, 2);
  costly.replica_cost = 1.0;  // a transfer costs more than the whole step
  EXPECT_TRUE(BalanceExperts(costly)->empty());
  ExpertLoads one_rank = ZipfLoads(8, 1);
  EXPECT_TRUE(BalanceExperts(one_rank)->empty());
}

TEST(ExpertBalanceTest, RefusesBadInputByName) {
  ExpertLoads l = ZipfLoads(4, 2);
  l.work[2] = -1;
  EXPECT_THAT(std::string(BalanceExperts(l).status().message()), HasSubstr("work[2] = -1"));
  l = ZipfLoads(4, 2);
  l.owner_of_unit[1] = RankId(2);
  EXPECT_THAT(std::string(BalanceExperts(l).status().message()),
              HasSubstr("owner_of_unit[1] = 2 out of range [0, 2)"));
  l = ZipfLoads(4, 2);
  l.speed[1] = 0;
  EXPECT_THAT(std::string(BalanceExperts(l).status().message()), HasSubstr("speed[1] = 0"));
  l = ZipfLoads(4, 2);
  l.owner_of_unit.pop_back();
  EXPECT_THAT(std::string(BalanceExperts(l).status().message()),
              HasSubstr("owner_of_unit has 3 entries, work has 4"));
  l = ZipfLoads(4, 2);
  l.replica_cost = std::nan("");
  EXPECT_THAT(std::string(BalanceExperts(l).status().message()), HasSubstr("replica_cost"));
}

}  // namespace
}  // namespace ballast::coordinator
