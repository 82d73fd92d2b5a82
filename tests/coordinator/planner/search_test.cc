// RangeBelow, the part of an interval where auto's branch and bound may still find a plan,
// by hand and against sampling.
#include "coordinator/planner/search.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace ballast::coordinator::planner_internal {
namespace {

// The bound RangeBelow reads: t + lambda * max(k, left(t), right(t)).
double Bound(double t, double lambda, double k, const LpLine& left, const LpLine& right) {
  return t + lambda * std::max({k, left(t), right(t)});
}

TEST(RangeBelowTest, TheCountAloneEndsIt) {
  // t + 0.01 * 5 < 1 for t < 0.95.
  const auto [lo, hi] = RangeBelow(0.5, 2.0, 0.01, 5, LpLine{}, LpLine{}, 1.0);
  EXPECT_DOUBLE_EQ(lo, 0.5);
  EXPECT_DOUBLE_EQ(hi, 0.95);
}

TEST(RangeBelowTest, ASteepLineStartsIt) {
  // LP >= -1000 (t - 1) left of 1: with lambda 0.01 the bound is 10 - 9 t there, below 1.5
  // for t > 17 / 18.
  const LpLine steep{1.0, 0.0, -1000.0};
  const auto [lo, hi] = RangeBelow(0.5, 1.0, 0.01, 0, LpLine{}, steep, 1.5);
  EXPECT_NEAR(lo, 17.0 / 18.0, 1e-12);
  EXPECT_DOUBLE_EQ(hi, 1.0);
}

TEST(RangeBelowTest, EmptyWhereTheBoundNeverGetsBelow) {
  const auto [lo, hi] = RangeBelow(0.5, 1.0, 0.01, 80, LpLine{}, LpLine{}, 1.0);
  EXPECT_GE(lo, hi);
}

TEST(RangeBelowTest, MatchesSampling) {
  std::mt19937_64 rng(14);
  std::uniform_real_distribution<double> unit(0, 1);
  for (int trial = 0; trial < 2000; ++trial) {
    const double a = unit(rng), b = a + 0.01 + unit(rng);
    const double lambda = 1e-3 + 0.05 * unit(rng);
    const double k = static_cast<double>(static_cast<int>(20 * unit(rng)));
    // Lines as the search draws them: falling, through points at the interval's ends.
    auto random_line = [&](double at) {
      if (unit(rng) < 0.2) return LpLine{};
      return LpLine{at, 40 * unit(rng), -200 * unit(rng)};
    };
    const LpLine left = random_line(a), right = random_line(b);
    const double limit =
        Bound(a + (b - a) * unit(rng), lambda, k, left, right) + 0.2 * (unit(rng) - 0.5);
    const auto [lo, hi] = RangeBelow(a, b, lambda, k, left, right, limit);
    EXPECT_GE(lo, a);
    EXPECT_LE(hi, b);
    for (int i = 1; i < 200; ++i) {
      const double t = a + (b - a) * i / 200.0;
      const double bound = Bound(t, lambda, k, left, right);
      const double margin = 1e-9 * (b - a);
      if (t > lo + margin && t < hi - margin) {
        EXPECT_LT(bound, limit) << "trial " << trial << " t " << t;
      } else if (t < lo - margin || t > hi + margin || lo >= hi) {
        EXPECT_GE(bound, limit - 1e-9) << "trial " << trial << " t " << t;
      }
    }
  }
}

}  // namespace
}  // namespace ballast::coordinator::planner_internal
