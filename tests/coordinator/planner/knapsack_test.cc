// PruneKnapsack against brute force: the fewest extra prunes that reach a coverage gain.
#include "coordinator/planner/knapsack.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "coordinator/planner/problem.h"

namespace ballast::coordinator::planner_internal {
namespace {

struct Instance {
  std::vector<PruneKnapsack::Item> items;
  int64_t target = 0;
  int64_t budget = 0;
};

// Every choice of at most one option per item: the least cost reaching target within
// budget, or kNoPlan.
int64_t BruteForce(const Instance& in) {
  int64_t best = kNoPlan;
  std::vector<size_t> pick(in.items.size(), 0);  // 0: none, j: options[j - 1]
  while (true) {
    int64_t cost = 0, gain = 0;
    for (size_t i = 0; i < in.items.size(); ++i) {
      if (pick[i] == 0) continue;
      cost += in.items[i].options[pick[i] - 1].cost;
      gain += in.items[i].options[pick[i] - 1].gain;
    }
    if (gain >= in.target && cost <= in.budget && cost < best) best = cost;
    size_t i = 0;
    while (i < pick.size() && ++pick[i] > in.items[i].options.size()) pick[i++] = 0;
    if (i == pick.size()) return best;
  }
}

// Options like the solver's: cost and gain both increasing, gains from a concave-ish line
// with rounding noise (one prune gains about `rate` units), some items with a long tail.
Instance RandomInstance(std::mt19937_64& rng) {
  std::uniform_int_distribution<int> num_items(1, 4), num_options(1, 6), coin(0, 3);
  std::uniform_real_distribution<double> rate(0.3, 3.0);
  Instance in;
  int64_t total_gain = 0;
  for (int i = num_items(rng); i > 0; --i) {
    PruneKnapsack::Item item{.rank = static_cast<int32_t>(in.items.size()), .options = {}};
    const double r = rate(rng);
    int64_t last_gain = 0;
    for (int32_t cost = 1, n = num_options(rng); cost <= n + coin(rng); ++cost) {
      const int64_t gain = static_cast<int64_t>(r * cost + 0.5 * coin(rng));
      if (gain <= last_gain) continue;
      item.options.push_back({cost, gain});
      last_gain = gain;
    }
    total_gain += last_gain;
    in.items.push_back(std::move(item));
  }
  in.target = 1 + std::uniform_int_distribution<int64_t>(0, total_gain)(rng);
  in.budget = std::uniform_int_distribution<int64_t>(0, 20)(rng);
  return in;
}

// The same optimum by a plain DP over (items, gain so far), with nothing pruned: an
// oracle for instances too large to enumerate.
int64_t ReferenceDp(const Instance& in) {
  constexpr int64_t kUnreached = std::numeric_limits<int64_t>::max();
  std::vector<int64_t> least(in.target + 1, kUnreached);  // least cost to have gained g
  least[0] = 0;
  for (const PruneKnapsack::Item& item : in.items) {
    std::vector<int64_t> next = least;
    for (int64_t g = 0; g <= in.target; ++g) {
      if (least[g] == kUnreached) continue;
      for (const PruneKnapsack::Option& o : item.options) {
        const int64_t to = std::min(in.target, g + o.gain);
        next[to] = std::min(next[to], least[g] + o.cost);
      }
    }
    least = std::move(next);
  }
  return least[in.target] <= in.budget ? least[in.target] : kNoPlan;
}

// Instances at the planner benchmark's size: up to 8 ranks, each with up to 64 prunes whose
// gains follow floor(j * s + f) (a sender: s >= 1), then a keep stretch (gains at a slope
// below 1), and targets of a few hundred units. With `jumpy`, some ranks' gains grow by
// irregular steps instead, far from their hull, which the LP's roundings cannot always
// settle: the DP runs at this size too.
Instance SolverSizedInstance(std::mt19937_64& rng, bool jumpy) {
  std::uniform_int_distribution<int> num_items(2, 8), num_prunes(1, 64), jump(0, 9);
  std::uniform_real_distribution<double> slope(1.0, 4.0), keep(0.2, 0.95), unit(0, 1);
  Instance in;
  int64_t total_gain = 0;
  for (int i = num_items(rng); i > 0; --i) {
    PruneKnapsack::Item item{.rank = static_cast<int32_t>(in.items.size()), .options = {}};
    const double s = slope(rng), f = unit(rng), k = keep(rng);
    const int32_t prunes = num_prunes(rng),
                  sending = std::uniform_int_distribution<int>(1, prunes)(rng);
    const bool irregular = jumpy && unit(rng) < 0.5;
    int64_t last_gain = 0, walk = 0;
    for (int32_t j = 1; j <= prunes; ++j) {
      walk += jump(rng) < 8 ? 1 : 12;  // mostly one a prune, now and then a leap
      const int64_t gain = irregular      ? walk
                           : j <= sending ? static_cast<int64_t>(j * s + f)
                                          : static_cast<int64_t>(sending * s + f) +
                                                static_cast<int64_t>((j - sending) * k);
      if (gain <= last_gain) continue;
      item.options.push_back({j, gain});
      last_gain = gain;
    }
    total_gain += last_gain;
    in.items.push_back(std::move(item));
  }
  in.target = 1 + std::uniform_int_distribution<int64_t>(0, total_gain)(rng);
  in.budget = std::uniform_int_distribution<int64_t>(0, 8 * 64)(rng);
  return in;
}

// Solve's answer is the optimum, and the prunes it hands back are whole options that cost
// what it said and reach the target.
void ExpectSolved(const Instance& in, int64_t got, const std::vector<int32_t>& z, int64_t want,
                  int trial) {
  ASSERT_EQ(got, want) << "trial " << trial;
  if (got == kNoPlan) return;
  int64_t cost = 0, gain = 0;
  for (size_t i = 0; i < in.items.size(); ++i) {
    cost += z[i];
    if (z[i] == 0) continue;
    bool is_option = false;
    for (const PruneKnapsack::Option& o : in.items[i].options) {
      if (o.cost == z[i]) {
        gain += o.gain;
        is_option = true;
      }
    }
    ASSERT_TRUE(is_option) << "trial " << trial << " item " << i << " prunes " << z[i];
  }
  EXPECT_EQ(cost, got) << "trial " << trial;
  EXPECT_GE(gain, in.target) << "trial " << trial;
}

TEST(PruneKnapsackTest, MatchesAPlainDpAtTheSolversSize) {
  std::mt19937_64 rng(20261126);
  PruneKnapsack knapsack;
  constexpr int kTrials = 600;
  for (int trial = 0; trial < kTrials; ++trial) {
    const Instance in = SolverSizedInstance(rng, /*jumpy=*/trial % 2 == 1);
    knapsack.Clear();
    for (const PruneKnapsack::Item& item : in.items) knapsack.Add(item.rank).options = item.options;
    std::vector<int32_t> z(in.items.size(), 0);
    const int64_t got = knapsack.Solve(in.target, in.budget, &z);
    ExpectSolved(in, got, z, ReferenceDp(in), trial);
  }
  // Every way a solve ends was taken at this size too.
  const PruneKnapsack::Stats& stats = knapsack.stats();
  EXPECT_GT(stats.by_rounding, 50);
  EXPECT_GT(stats.by_repair, 50);
  EXPECT_GT(stats.by_dp, 30);
  EXPECT_GT(stats.infeasible, 10);
  EXPECT_EQ(stats.by_rounding + stats.by_repair + stats.by_dp + stats.infeasible, kTrials);
}

TEST(PruneKnapsackTest, MatchesBruteForceAndItsPrunesAddUp) {
  std::mt19937_64 rng(20261125);
  PruneKnapsack knapsack;  // reused, as the solver does
  int solved = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const Instance in = RandomInstance(rng);
    knapsack.Clear();
    for (const PruneKnapsack::Item& item : in.items) knapsack.Add(item.rank).options = item.options;
    std::vector<int32_t> z(in.items.size(), 0);
    const int64_t got = knapsack.Solve(in.target, in.budget, &z);
    ExpectSolved(in, got, z, BruteForce(in), trial);
    if (got != kNoPlan) ++solved;
  }
  EXPECT_GT(solved, 1000) << "the instances should mostly be solvable";
  // Every way a solve can end was taken, so each is checked against brute force above.
  const PruneKnapsack::Stats& stats = knapsack.stats();
  EXPECT_GT(stats.by_rounding, 50);
  EXPECT_GT(stats.by_repair, 50);
  EXPECT_GT(stats.by_dp, 50);
  EXPECT_GT(stats.infeasible, 50);
  EXPECT_EQ(stats.by_rounding + stats.by_repair + stats.by_dp + stats.infeasible, 3000);
}

}  // namespace
}  // namespace ballast::coordinator::planner_internal
