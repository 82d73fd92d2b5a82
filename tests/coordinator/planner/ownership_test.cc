// ownership.h: the water-filled counts a reshard aims at, the halfway counts a refinement
// goes to, and the fewest unit moves that reach them.
#include "ballast/ownership.h"

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

#include "coordinator/planner/ownership.h"
#include "tests/coordinator/planner/planner_test_util.h"

namespace ballast::coordinator {
namespace {

using planner_testing::kInf;

std::vector<PlannerRank> Ranks(const std::vector<double>& seconds_per_unit) {
  std::vector<PlannerRank> ranks;
  for (double c : seconds_per_unit) ranks.push_back({.seconds_per_unit = c});
  return ranks;
}

TEST(PlannerWaterFillTest, FillsBySpeedAndTiesToTheLowerRank) {
  // Rank 1 at half the speed gets half the units: 6 and 3 both take 6 ms.
  EXPECT_EQ(WaterFillCounts(Ranks({1e-3, 2e-3}), 9), (std::vector<int32_t>{6, 3}));
  // Equal speeds: the unit left over goes to the lowest ranks first.
  EXPECT_EQ(WaterFillCounts(Ranks({1e-3, 1e-3, 1e-3}), 7), (std::vector<int32_t>{3, 2, 2}));
  EXPECT_EQ(WaterFillCounts(Ranks({1e-3, 1e-3}), 0), (std::vector<int32_t>{0, 0}));
}

TEST(PlannerWaterFillTest, CordonsAndFixedCostsTakeUnitsAway) {
  std::vector<PlannerRank> ranks = Ranks({1e-3, 1e-3, 1e-3});
  ranks[1].cordoned = true;
  EXPECT_EQ(WaterFillCounts(ranks, 5), (std::vector<int32_t>{3, 0, 2}));
  // A fixed cost of 2 units' time on rank 0: both end at 4 ms (2 + 2 units, 4 units).
  ranks[1].cordoned = false;
  ranks[0].fixed_seconds = 2e-3;
  EXPECT_EQ(WaterFillCounts(ranks, 10), (std::vector<int32_t>{2, 4, 4}));
  // One above everything the others would carry: no unit at all.
  ranks[0].fixed_seconds = 1;
  EXPECT_EQ(WaterFillCounts(ranks, 10), (std::vector<int32_t>{0, 5, 5}));
}

// Input PlanBlock would have refused (ValidatePlannerRanks) is a caller's bug, but it
// must not write out of bounds: with nobody to give units to, the counts come back short.
TEST(PlannerWaterFillTest, EveryRankCordonedGetsNothing) {
  std::vector<PlannerRank> ranks = Ranks({1e-3, 1e-3});
  for (PlannerRank& rank : ranks) rank.cordoned = true;
  EXPECT_EQ(WaterFillCounts(ranks, 4), (std::vector<int32_t>{0, 0}));
}

TEST(PlannerWaterFillTest, MatchesBruteForce) {
  std::mt19937_64 rng(11);
  for (int i = 0; i < 300; ++i) {
    const int p = std::uniform_int_distribution<int>(1, 4)(rng);
    const int total = std::uniform_int_distribution<int>(0, 12)(rng);
    std::vector<PlannerRank> ranks(p);
    for (int r = 0; r < p; ++r) {
      ranks[r].seconds_per_unit = i % 4 == 0
                                      ? 1e-3 * std::uniform_int_distribution<int>(1, 3)(rng)
                                      : std::uniform_real_distribution<double>(1e-3, 1e-2)(rng);
      ranks[r].cordoned = p > 1 && r == 0 && i % 5 == 0;
      // A third with fixed costs, up to 6 units of the slowest speed: some ranks then get
      // no unit at all.
      if (i % 3 == 1) ranks[r].fixed_seconds = std::uniform_real_distribution<double>(0, 6e-2)(rng);
    }
    const std::vector<int32_t> counts = WaterFillCounts(ranks, total);
    auto worst = [&](const std::vector<int32_t>& n) {
      double t = 0;
      for (int r = 0; r < p; ++r) {
        t = std::max(t, ranks[r].fixed_seconds + ranks[r].seconds_per_unit * n[r]);
      }
      return t;
    };
    int sum = 0;
    for (int r = 0; r < p; ++r) {
      sum += counts[r];
      if (ranks[r].cordoned) {
        EXPECT_EQ(counts[r], 0);
      }
    }
    EXPECT_EQ(sum, total);
    // Every composition of `total` over the non-cordoned ranks.
    double best = kInf;
    std::vector<int32_t> n(p, 0);
    while (true) {
      int s = 0;
      bool ok = true;
      for (int r = 0; r < p; ++r) {
        s += n[r];
        ok = ok && !(ranks[r].cordoned && n[r] > 0);
      }
      if (ok && s == total) best = std::min(best, worst(n));
      int r = 0;
      while (r < p && n[r] == total) n[r++] = 0;
      if (r == p) break;
      ++n[r];
    }
    EXPECT_DOUBLE_EQ(worst(counts), best);
  }
}

TEST(PlannerWaterFillTest, MoveUnitsMovesTheFewest) {
  const std::vector<RankId> owners = EvenOwnership(12, 3);  // 0000 1111 2222
  const std::vector<RankId> moved = MoveUnits(owners, {6, 5, 1});
  std::vector<int> counts(3, 0);
  int changed = 0;
  for (size_t u = 0; u < moved.size(); ++u) {
    ++counts[moved[u].value()];
    changed += moved[u] != owners[u];
  }
  EXPECT_EQ(counts, (std::vector<int>{6, 5, 1}));
  EXPECT_EQ(changed, 3);  // rank 2 gives 3 units: its highest ids, to rank 0 then rank 1
  EXPECT_EQ(moved[8], RankId(2));
  EXPECT_EQ(moved[9], RankId(0));
  EXPECT_EQ(moved[10], RankId(0));
  EXPECT_EQ(moved[11], RankId(1));
}

// Against the rule written out literally: each rank keeps min(old, new) of its units,
// lowest ids first; the freed units, lowest id first, go to the ranks that need more, in
// rank order.
TEST(PlannerWaterFillTest, MoveUnitsFollowsTheRuleOnRandomSplits) {
  std::mt19937_64 rng(5);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int i = 0; i < 500; ++i) {
    const int p = pick(1, 8), units = pick(0, 40);
    std::vector<RankId> owners;
    std::vector<int32_t> counts(p, 0);
    for (int u = 0; u < units; ++u) {
      owners.push_back(RankId(pick(0, p - 1)));
      ++counts[pick(0, p - 1)];
    }
    std::vector<int32_t> kept(p, 0), old_counts(p, 0);
    for (RankId r : owners) ++old_counts[r.value()];
    std::vector<size_t> freed;
    std::vector<RankId> want = owners;
    for (size_t u = 0; u < owners.size(); ++u) {
      const int32_t r = owners[u].value();
      if (kept[r] < std::min(old_counts[r], counts[r])) {
        ++kept[r];
      } else {
        freed.push_back(u);
      }
    }
    size_t next = 0;
    for (int r = 0; r < p; ++r) {
      for (int32_t j = kept[r]; j < counts[r]; ++j) want[freed[next++]] = RankId(r);
    }
    ASSERT_EQ(MoveUnits(owners, counts), want) << "case " << i;
  }
}

// Counts whose total is not the block's are a caller's bug: every unit stays with its
// owner rather than going nowhere.
TEST(PlannerWaterFillTest, MoveUnitsLeavesUnitsWhenTheCountsDoNotAddUp) {
  const std::vector<RankId> owners = EvenOwnership(8, 2);  // 0000 1111
  EXPECT_EQ(MoveUnits(owners, {4, 4}), owners);
  EXPECT_EQ(MoveUnits(owners, {2, 2}), owners);
  EXPECT_EQ(MoveUnits(owners, {6, 6}), owners);
  // Too few: a rank short still gets freed units, lowest id first, as far as they go.
  const std::vector<RankId> moved = MoveUnits(owners, {1, 5});
  EXPECT_EQ(moved, (std::vector<RankId>{RankId(0), RankId(1), RankId(0), RankId(0), RankId(1),
                                        RankId(1), RankId(1), RankId(1)}));
}

TEST(PlannerWaterFillTest, HalfwayCountsMoveHalfTheWay) {
  EXPECT_EQ(HalfwayCounts({111, 69}, {123, 57}), (std::vector<int32_t>{117, 63}));
  EXPECT_EQ(HalfwayCounts({90, 90}, {111, 69}), (std::vector<int32_t>{100, 80}));
  EXPECT_EQ(HalfwayCounts({90, 90}, {91, 89}), (std::vector<int32_t>{90, 90}));  // no move
  // Two odd moves up, one even move down: one of the two goes up by its rounded-up half.
  EXPECT_EQ(HalfwayCounts({3, 3, 3}, {4, 4, 1}), (std::vector<int32_t>{4, 3, 2}));
  // Counts that do not pair up are left alone.
  EXPECT_EQ(HalfwayCounts({3, 3}, {6}), (std::vector<int32_t>{3, 3}));
  EXPECT_EQ(HalfwayCounts({3, 3}, {6, 1}), (std::vector<int32_t>{3, 3}));
  // On random splits: the total kept, every rank within half a unit of halfway and
  // between where it is and where it aims, and a rank past the truncated half only
  // where the lowest ranks with such a move have all gone past it too.
  std::mt19937_64 rng(8);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int i = 0; i < 500; ++i) {
    const int p = pick(1, 8), units = pick(0, 60);
    std::vector<int32_t> from(p, 0), to(p, 0);
    for (int u = 0; u < units; ++u) {
      ++from[pick(0, p - 1)];
      ++to[pick(0, p - 1)];
    }
    const std::vector<int32_t> got = HalfwayCounts(from, to);
    ASSERT_EQ(got.size(), from.size());
    int32_t total = 0;
    bool skipped_up = false, skipped_down = false;
    for (int r = 0; r < p; ++r) {
      total += got[r];
      const int32_t move = to[r] - from[r], made = got[r] - from[r];
      ASSERT_LE(std::abs(2 * made - move), 1) << "case " << i << " rank " << r;
      ASSERT_LE(std::min(from[r], to[r]), got[r]) << "case " << i << " rank " << r;
      ASSERT_LE(got[r], std::max(from[r], to[r])) << "case " << i << " rank " << r;
      if (move % 2 == 0) continue;
      const bool past = 2 * std::abs(made) > std::abs(move);  // rounded away from `from`
      bool& skipped = move > 0 ? skipped_up : skipped_down;
      ASSERT_FALSE(past && skipped) << "case " << i << ": rank " << r << " before a lower one";
      skipped = skipped || !past;
    }
    ASSERT_EQ(total, units) << "case " << i;
  }
}

}  // namespace
}  // namespace ballast::coordinator
