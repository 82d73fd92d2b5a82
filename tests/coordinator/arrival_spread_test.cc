// The arrival spread: the wait beyond the mean lateness is what a normal lateness makes
// each side wait (checked against a numerical integral, not the closed form), it is
// largest at the balanced split and fades as either side leads, and the fit recovers the
// spread from the two sides' waits where they tell it (within half a spread of each
// other), and only there; absurd figures end it at once.
#include "coordinator/arrival_spread.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

namespace ballast::coordinator {
namespace {

// E[max(D, 0)] for D ~ N(lead, spread^2), by Simpson's rule over lead +- 12 spreads.
double ExpectedWait(double lead, double spread) {
  const double lo = std::max(0.0, lead - 12 * spread);
  const double hi = std::max(lo, lead + 12 * spread);
  const int n = 20000;  // even
  const double h = (hi - lo) / n;
  const auto f = [&](double x) {
    const double z = (x - lead) / spread;
    return x * std::exp(-0.5 * z * z) / (spread * std::sqrt(2 * M_PI));
  };
  double sum = f(lo) + f(hi);
  for (int i = 1; i < n; ++i) sum += (i % 2 == 1 ? 4 : 2) * f(lo + i * h);
  return sum * h / 3;
}

// The waits a plan measures: the others wait for the throttled rank's lateness, it for
// their lead over it.
struct Waits {
  double others;
  double throttled;
};
Waits WaitsOf(double lead, double spread) {
  return {ExpectedWait(lead, spread), ExpectedWait(-lead, spread)};
}

TEST(ArrivalSpreadTest, TheWaitIsWhatANormalLatenessMakesEachSideWaitBeyondTheMean) {
  for (const double spread : {0.01, 0.03, 0.06}) {
    for (const double lead : {-0.05, -0.02, -0.004, 0.0, 0.004, 0.02, 0.05}) {
      const Waits w = WaitsOf(lead, spread);
      EXPECT_NEAR(SpreadWait(spread, lead), w.others - std::max(lead, 0.0), 1e-9)
          << "spread " << spread << " lead " << lead;
      EXPECT_NEAR(SpreadWait(spread, lead), w.throttled - std::max(-lead, 0.0), 1e-9);
    }
  }
  // 0.399 spreads at the balanced split; a spread's lead either way leaves 0.083 of one.
  EXPECT_NEAR(SpreadWait(0.03, 0), 0.03 / std::sqrt(2 * M_PI), 1e-12);
  EXPECT_NEAR(SpreadWait(0.03, 0.03) / 0.03, 0.08332, 1e-5);
  EXPECT_DOUBLE_EQ(SpreadWait(0.03, 0.03), SpreadWait(0.03, -0.03));
  EXPECT_LT(SpreadWait(0.03, 0.06), SpreadWait(0.03, 0.03));
  // No spread, or bad figures: no wait.
  EXPECT_EQ(SpreadWait(0, 0.01), 0);
  EXPECT_EQ(SpreadWait(-0.03, 0), 0);
  EXPECT_EQ(SpreadWait(std::numeric_limits<double>::quiet_NaN(), 0), 0);
  EXPECT_EQ(SpreadWait(0.03, std::numeric_limits<double>::infinity()), 0);
}

TEST(ArrivalSpreadTest, TheFitRecoversTheSpreadFromBothSidesWaitsNearTheBalancedSplit) {
  for (const double spread : {0.01, 0.03, 0.06}) {
    for (const double lead : {-0.48, -0.2, 0.0, 0.2, 0.48}) {  // in spreads
      const Waits w = WaitsOf(lead * spread, spread);
      const std::optional<double> fit = FitArrivalSpread(w.others, w.throttled);
      ASSERT_TRUE(fit.has_value()) << "spread " << spread << " lead " << lead;
      EXPECT_NEAR(*fit, spread, 1e-6 * spread);
    }
  }
  // The ViT's 30% split under a 2x quota (docs/benchmarks.md, 2026-12-04 (g)): the others
  // waited 0.0105 s beyond calm, the straggler 0.0150 s beyond its floor.
  const std::optional<double> vit = FitArrivalSpread(0.0105, 0.0150);
  ASSERT_TRUE(vit.has_value());
  EXPECT_NEAR(*vit, 0.03164, 1e-5);
  EXPECT_NEAR(SpreadWait(*vit, 0.0150 - 0.0105), 0.0105, 1e-9);
}

TEST(ArrivalSpreadTest, FarFromTheBalancedSplitTheWaitsDoNotTellTheSpread) {
  // Plain TP: the others wait the whole lead, the straggler nothing.
  EXPECT_FALSE(FitArrivalSpread(0.085, 0).has_value());
  EXPECT_FALSE(FitArrivalSpread(0.085, -0.002).has_value()) << "a negative wait is none";
  // Nor a little: 12 ms of its floor's noise beside a 0.115 s lead would fit 0.125 s.
  EXPECT_FALSE(FitArrivalSpread(0.127, 0.012).has_value());
  // The sides 0.8 spreads apart: the smaller wait is 0.12 of a spread, under g(1/2) times
  // the lead.
  const Waits apart = WaitsOf(0.8 * 0.03, 0.03);
  EXPECT_FALSE(FitArrivalSpread(apart.others, apart.throttled).has_value());
  // Just inside half a spread it is taken.
  const Waits inside = WaitsOf(0.49 * 0.03, 0.03);
  EXPECT_TRUE(FitArrivalSpread(inside.others, inside.throttled).has_value());
  // No wait at all, figures that are not numbers, or too large to double: none, at once.
  EXPECT_FALSE(FitArrivalSpread(0, 0).has_value());
  EXPECT_FALSE(FitArrivalSpread(std::numeric_limits<double>::quiet_NaN(), 0.01).has_value());
  EXPECT_FALSE(FitArrivalSpread(0.01, std::numeric_limits<double>::infinity()).has_value());
  const double huge = std::numeric_limits<double>::max();
  EXPECT_FALSE(FitArrivalSpread(huge, huge).has_value());
  EXPECT_FALSE(FitArrivalSpread(huge / 4, huge / 2).has_value());
}

}  // namespace
}  // namespace ballast::coordinator
