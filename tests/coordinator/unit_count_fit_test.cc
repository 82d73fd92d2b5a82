// UnitCountTimes: the fixed part of a rank's block time, fitted over the unit counts it
// ran, and the cases where no fit is the honest answer.
#include "coordinator/unit_count_fit.h"

#include <gtest/gtest.h>

#include <optional>

namespace ballast::coordinator {
namespace {

constexpr double kFixed = 0.038;  // the ViT device straggler's, by its plans' times
constexpr double kPerUnit = 0.0056;

void AddAt(UnitCountTimes& t, int64_t units, int n, double fixed = kFixed,
           double per_unit = kPerUnit) {
  for (int i = 0; i < n; ++i) t.Add(units, fixed + per_unit * static_cast<double>(units));
}

TEST(UnitCountTimesTest, FitsTheLineThroughEachCountsMedian) {
  UnitCountTimes t;
  AddAt(t, 21, 4);
  t.Add(21, 1.0);  // a stall: the median ignores it
  AddAt(t, 15, 5);
  AddAt(t, 9, 5);
  std::optional<AffineTime> f = t.Fit();
  ASSERT_TRUE(f.has_value());
  EXPECT_NEAR(f->fixed_seconds, kFixed, 1e-6);
  EXPECT_NEAR(f->seconds_per_unit, kPerUnit, 1e-7);
  EXPECT_EQ(f->counts, 3);
  EXPECT_EQ(f->fewest_units, 9);
  EXPECT_EQ(f->most_units, 21);
}

TEST(UnitCountTimesTest, OneCountOrTooFewSamplesIsNoFit) {
  UnitCountTimes t;
  EXPECT_FALSE(t.Fit().has_value());
  AddAt(t, 21, 5);
  EXPECT_FALSE(t.Fit().has_value()) << "one count says nothing of the fixed part";
  AddAt(t, 9, UnitCountTimes::kMinSamples - 1);
  EXPECT_FALSE(t.Fit().has_value()) << "a count with too few samples";
  AddAt(t, 9, 1);
  EXPECT_TRUE(t.Fit().has_value());
  t.Clear();
  EXPECT_FALSE(t.Fit().has_value());
}

TEST(UnitCountTimesTest, CountsTooCloseTogetherAreNoFit) {
  UnitCountTimes t;
  AddAt(t, 20, 5);
  AddAt(t, 17, 5);  // 20 / 17 < kMinSpan
  EXPECT_FALSE(t.Fit().has_value());
  AddAt(t, 16, 5);  // 20 / 16 = kMinSpan
  EXPECT_TRUE(t.Fit().has_value());
}

TEST(UnitCountTimesTest, TimesThatScaleWithTheUnitsAreNoFit) {
  UnitCountTimes t;
  AddAt(t, 21, 5, /*fixed=*/0);
  AddAt(t, 9, 5, /*fixed=*/0);
  EXPECT_FALSE(t.Fit().has_value()) << "no fixed part";
  t.Clear();
  // A fixed part of 2% of the time at 9 units: inside the timers' noise.
  AddAt(t, 21, 5, /*fixed=*/0.001);
  AddAt(t, 9, 5, /*fixed=*/0.001);
  EXPECT_FALSE(t.Fit().has_value());
  t.Clear();
  AddAt(t, 21, 5, /*fixed=*/-0.01);  // super-linear: per unit falls as units fall
  AddAt(t, 9, 5, /*fixed=*/-0.01);
  EXPECT_FALSE(t.Fit().has_value());
  t.Clear();
  AddAt(t, 21, 5, kFixed, /*per_unit=*/-0.001);  // fewer units, more time: no line to trust
  AddAt(t, 9, 5, kFixed, /*per_unit=*/-0.001);
  EXPECT_FALSE(t.Fit().has_value());
}

// 20 ms fixed + 4 ms a unit at 16 and 20 units: steady times show the fixed part; times
// that spread by +-4% put it within their noise (its error, propagated from the medians',
// is over a third of it), and no fit is better than a wrong one.
TEST(UnitCountTimesTest, AFixedPartWithinTheNoiseIsNoFit) {
  UnitCountTimes steady;
  AddAt(steady, 16, 5, 0.02, 0.004);
  AddAt(steady, 20, 5, 0.02, 0.004);
  std::optional<AffineTime> f = steady.Fit();
  ASSERT_TRUE(f.has_value());
  EXPECT_NEAR(f->fixed_seconds, 0.02, 1e-6);

  UnitCountTimes noisy;
  for (double spread : {1.0, 1.04, 0.96, 1.02, 0.98}) {
    noisy.Add(16, spread * (0.02 + 0.004 * 16));
    noisy.Add(20, spread * (0.02 + 0.004 * 20));
  }
  EXPECT_FALSE(noisy.Fit().has_value());
}

TEST(UnitCountTimesTest, ALineThatCallsMostOfTheTimeFixedIsNoFit) {
  UnitCountTimes t;
  AddAt(t, 10, 5, /*fixed=*/0.1, /*per_unit=*/0.001);  // 91% fixed at 10 units
  AddAt(t, 20, 5, /*fixed=*/0.1, /*per_unit=*/0.001);
  EXPECT_FALSE(t.Fit().has_value());
  t.Clear();
  AddAt(t, 10, 5, /*fixed=*/0.009, /*per_unit=*/0.001);  // 47%
  AddAt(t, 20, 5, /*fixed=*/0.009, /*per_unit=*/0.001);
  EXPECT_TRUE(t.Fit().has_value());
}

TEST(UnitCountTimesTest, ANewCountReplacesTheOneUsedLeastRecently) {
  UnitCountTimes t;
  AddAt(t, 10, 5, kFixed, 0.001);
  AddAt(t, 20, 5);
  AddAt(t, 30, 5);
  AddAt(t, 40, 5);
  AddAt(t, 20, 1);  // 10 is now the least recently used
  AddAt(t, 50, 5);  // replaces 10, a line of its own (a fit through it would be off)
  std::optional<AffineTime> f = t.Fit();
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->counts, UnitCountTimes::kMaxCounts);
  EXPECT_EQ(f->fewest_units, 20);
  EXPECT_EQ(f->most_units, 50);
  EXPECT_NEAR(f->fixed_seconds, kFixed, 1e-6);
}

TEST(UnitCountTimesTest, ACountNotRunForLongIsDropped) {
  UnitCountTimes t;
  AddAt(t, 21, 5);
  AddAt(t, 9, 5);
  ASSERT_TRUE(t.Fit().has_value());
  AddAt(t, 9, UnitCountTimes::kMaxAge - 5);  // 21 units last ran kMaxAge samples ago
  EXPECT_TRUE(t.Fit().has_value());
  AddAt(t, 9, 1);
  EXPECT_FALSE(t.Fit().has_value());
}

// A line in use stays while it is beyond 2 standard errors; a new one needs 3.
TEST(UnitCountTimesTest, ALineInUseIsKeptOnALowerBar) {
  // 20 ms + 4 ms a unit at 16 and 20 units, spread by +-s: the fixed part's error grows
  // with s. At s = 3.3% it is 2.5 errors: kept, not taken up.
  UnitCountTimes t;
  for (double spread : {1.0, 1.033, 0.967, 1.0165, 0.9835}) {
    t.Add(16, spread * (0.02 + 0.004 * 16));
    t.Add(20, spread * (0.02 + 0.004 * 20));
  }
  EXPECT_FALSE(t.Fit(/*in_use=*/false).has_value());
  EXPECT_TRUE(t.Fit(/*in_use=*/true).has_value());
}

TEST(UnitCountTimesTest, NoUnitsIsIgnored) {
  UnitCountTimes t;
  AddAt(t, 21, 5);
  for (int i = 0; i < UnitCountTimes::kMinSamples; ++i) {
    t.Add(0, 0.5);  // as a count, these would put the line's fixed part at 0.5 s
    t.Add(-3, 0.5);
  }
  AddAt(t, 9, 5);
  std::optional<AffineTime> f = t.Fit();
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->counts, 2);
}

}  // namespace
}  // namespace ballast::coordinator
