// The speed model (design brief section 4): robust per-rank speeds from compute timings,
// outlier rejection versus adoption of a real change, and straggler classification.
#include "coordinator/speed_model.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "testing/fake_clock.h"

namespace ballast::coordinator {
namespace {

using ::ballast::testing::FakeClock;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr double kThreshold = 0.10;
const absl::Duration kChronicAfter = absl::Seconds(60);

SpeedKey Key(int rank, int block = 0, std::string job = "vit", std::string group = "vit/tp0") {
  return SpeedKey{std::move(job), GroupId(std::move(group)), RankId(rank), BlockId(block)};
}

class SpeedModelTest : public ::testing::Test {
 protected:
  void SetUp() override { Recreate(SpeedModelOptions{}); }

  void Recreate(const SpeedModelOptions& options) {
    absl::StatusOr<std::unique_ptr<SpeedModel>> m = SpeedModel::Create(options, &clock_);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = *std::move(m);
    next_step_.clear();
  }

  // Reports `seconds_per_unit` for 8 units at the key's next step.
  absl::Status Sample(const SpeedKey& key, double seconds_per_unit) {
    int64_t& step = next_step_[key.rank.value() * 1000 + key.block.value()];
    return model_->Report(key, seconds_per_unit * 8, 8, step++, clock_.Now());
  }

  void SampleN(const SpeedKey& key, double seconds_per_unit, int n) {
    for (int i = 0; i < n; ++i) ASSERT_TRUE(Sample(key, seconds_per_unit).ok());
  }

  RankSpeed Speed(int rank, int block = 0) {
    absl::StatusOr<GroupSpeeds> g =
        model_->Speeds("vit", GroupId("vit/tp0"), BlockId(block), kThreshold, kChronicAfter);
    EXPECT_TRUE(g.ok()) << g.status();
    if (!g.ok()) return {};
    for (const RankSpeed& r : g->ranks) {
      if (r.rank == RankId(rank)) return r;
    }
    ADD_FAILURE() << "rank " << rank << " missing";
    return {};
  }

  GroupSpeeds Group(int block = 0) {
    absl::StatusOr<GroupSpeeds> g =
        model_->Speeds("vit", GroupId("vit/tp0"), BlockId(block), kThreshold, kChronicAfter);
    EXPECT_TRUE(g.ok()) << g.status();
    return g.ok() ? *g : GroupSpeeds{};
  }

  FakeClock clock_;
  std::unique_ptr<SpeedModel> model_;
  absl::flat_hash_map<int, int64_t> next_step_;
};

TEST(SpeedModelOptionsTest, RejectsBadOptionsNamingTheField) {
  FakeClock clock;
  auto expect_bad = [&](SpeedModelOptions o, const char* field) {
    absl::StatusOr<std::unique_ptr<SpeedModel>> m = SpeedModel::Create(o, &clock);
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_THAT(m.status().message(), HasSubstr(field));
  };
  expect_bad({.window = 0}, "window");
  expect_bad({.outlier_k = std::nan("")}, "outlier_k");
  expect_bad({.mad_floor_fraction = -0.1}, "mad_floor_fraction");
  expect_bad({.window = 4, .persist_samples = 5}, "persist_samples");
  expect_bad({.min_samples_for_outliers = 0}, "min_samples_for_outliers");
  expect_bad({.stale_after = absl::ZeroDuration()}, "stale_after");
  expect_bad({.forget_after = absl::Seconds(1)}, "forget_after");
  expect_bad({.max_keys = 0}, "max_keys");
  EXPECT_FALSE(SpeedModel::Create({}, nullptr).ok());
  EXPECT_TRUE(SpeedModel::Create({}, &clock).ok());
}

TEST_F(SpeedModelTest, SteadySpeedsConverge) {
  // 1 ms per unit with +-3% jitter: within the +-10% band, so nothing is an outlier.
  const double jitter[] = {0.97, 1.02, 1.0, 1.03, 0.99, 1.01, 0.98, 1.0};
  for (int i = 0; i < 40; ++i) ASSERT_TRUE(Sample(Key(0), 1e-3 * jitter[i % 8]).ok());
  RankSpeed r = Speed(0);
  EXPECT_TRUE(r.has_estimate);
  EXPECT_NEAR(r.seconds_per_unit, 1e-3, 1e-5);
  EXPECT_EQ(r.window_samples, 16);
  EXPECT_EQ(r.samples, 40);
  EXPECT_EQ(r.outliers, 0);
  EXPECT_EQ(r.speed_changes, 0);
  EXPECT_EQ(r.last_step, 39);
  EXPECT_EQ(r.last_report_time, clock_.Now());
  EXPECT_FALSE(r.stale);
}

TEST_F(SpeedModelTest, SingleStallIsRejectedAndCounted) {
  SampleN(Key(0), 1e-3, 16);
  const double before = Speed(0).seconds_per_unit;
  ASSERT_TRUE(Sample(Key(0), 20e-3).ok());  // one 20x stall
  RankSpeed r = Speed(0);
  EXPECT_EQ(r.seconds_per_unit, before);
  EXPECT_EQ(r.outliers, 1);
  EXPECT_EQ(r.samples, 17);
  EXPECT_EQ(r.window_samples, 16);
  SampleN(Key(0), 1e-3, 5);  // back to normal: the run of outliers ends
  r = Speed(0);
  EXPECT_EQ(r.seconds_per_unit, before);
  EXPECT_EQ(r.outliers, 1);
  EXPECT_EQ(r.speed_changes, 0);
  EXPECT_EQ(model_->counters().outliers, 1);
}

TEST_F(SpeedModelTest, StallsSeparatedByNormalSamplesNeverAdopted) {
  SampleN(Key(0), 1e-3, 16);
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(Sample(Key(0), 20e-3).ok());
    ASSERT_TRUE(Sample(Key(0), 20e-3).ok());  // two in a row, still fewer than M = 3
    ASSERT_TRUE(Sample(Key(0), 1e-3).ok());
  }
  RankSpeed r = Speed(0);
  EXPECT_DOUBLE_EQ(r.seconds_per_unit, 1e-3);
  EXPECT_EQ(r.outliers, 20);
  EXPECT_EQ(r.speed_changes, 0);
}

TEST_F(SpeedModelTest, PersistentSlowdownIsAdoptedAfterMSamples) {
  SampleN(Key(0), 1e-3, 16);
  const int m = model_->options().persist_samples;
  for (int i = 0; i < m - 1; ++i) {
    ASSERT_TRUE(Sample(Key(0), 2e-3).ok());
    EXPECT_DOUBLE_EQ(Speed(0).seconds_per_unit, 1e-3) << "after " << i + 1 << " slow samples";
  }
  ASSERT_TRUE(Sample(Key(0), 2e-3).ok());
  RankSpeed r = Speed(0);
  EXPECT_DOUBLE_EQ(r.seconds_per_unit, 2e-3);
  EXPECT_EQ(r.window_samples, m);
  EXPECT_EQ(r.speed_changes, 1);
  EXPECT_EQ(r.outliers, m);
  // The new speed is now the normal one: more of it are not outliers.
  SampleN(Key(0), 2e-3, 10);
  r = Speed(0);
  EXPECT_DOUBLE_EQ(r.seconds_per_unit, 2e-3);
  EXPECT_EQ(r.outliers, m);
  EXPECT_EQ(r.window_samples, m + 10);
}

TEST_F(SpeedModelTest, PersistentSpeedupIsAdoptedToo) {
  SampleN(Key(0), 2e-3, 16);
  SampleN(Key(0), 1e-3, model_->options().persist_samples);
  EXPECT_DOUBLE_EQ(Speed(0).seconds_per_unit, 1e-3);
  EXPECT_EQ(Speed(0).speed_changes, 1);
}

// A block time with a fixed part: 38 ms + 5.6 ms a unit (the ViT device straggler's). A
// plan that offloads from 21 units to 9 moves seconds per unit from 7.4 ms to 9.8 ms, a
// persistent outlier: the window restarts, but the block times at 21 units stay, and the
// fit over both counts finds the fixed part.
TEST_F(SpeedModelTest, AFixedPartIsFittedOverTheUnitCountsAPlanChangeRan) {
  int64_t step = 0;
  auto report = [&](int64_t units, double slowdown = 1) {
    ASSERT_TRUE(
        model_->Report(Key(0), slowdown * (0.038 + 0.0056 * units), units, step++, clock_.Now())
            .ok());
  };
  for (int i = 0; i < 8; ++i) report(21);
  EXPECT_FALSE(Speed(0).affine.has_value()) << "one count";
  for (int i = 0; i < 4; ++i) report(9);
  EXPECT_FALSE(Speed(0).affine.has_value()) << "4 samples at 9 units";
  report(9);
  RankSpeed r = Speed(0);
  EXPECT_EQ(r.speed_changes, 1) << "the plan change read as a speed change";
  EXPECT_NEAR(r.seconds_per_unit, (0.038 + 0.0056 * 9) / 9, 1e-9);
  ASSERT_TRUE(r.affine.has_value());
  EXPECT_NEAR(r.affine->fixed_seconds, 0.038, 1e-5);
  EXPECT_NEAR(r.affine->seconds_per_unit, 0.0056, 1e-6);
  EXPECT_EQ(r.affine->counts, 2);

  // Then the rank slows 1.5x at the count it runs: a real speed change, and the times at
  // 21 units are of the old speed. The fit is forgotten until another count is run.
  for (int i = 0; i < model_->options().persist_samples; ++i) report(9, 1.5);
  r = Speed(0);
  EXPECT_EQ(r.speed_changes, 2);
  EXPECT_FALSE(r.affine.has_value());
  for (int i = 0; i < 2; ++i) report(9, 1.5);
  for (int i = 0; i < 5; ++i) report(21, 1.5);
  r = Speed(0);
  ASSERT_TRUE(r.affine.has_value());
  EXPECT_NEAR(r.affine->fixed_seconds, 1.5 * 0.038, 1e-5);
}

TEST_F(SpeedModelTest, OutlierRunMustStayOnOneSide) {
  SampleN(Key(0), 1e-3, 16);
  ASSERT_TRUE(Sample(Key(0), 20e-3).ok());
  ASSERT_TRUE(Sample(Key(0), 20e-3).ok());
  ASSERT_TRUE(Sample(Key(0), 0.1e-3).ok());  // a fast glitch does not complete the run
  RankSpeed r = Speed(0);
  EXPECT_DOUBLE_EQ(r.seconds_per_unit, 1e-3);
  EXPECT_EQ(r.outliers, 3);
  EXPECT_EQ(r.speed_changes, 0);
}

TEST_F(SpeedModelTest, FirstSamplesAreNotJudgedAndMedianAbsorbsAnEarlyStall) {
  ASSERT_TRUE(Sample(Key(0), 20e-3).ok());  // the very first sample is a stall
  SampleN(Key(0), 1e-3, 4);
  RankSpeed r = Speed(0);
  EXPECT_DOUBLE_EQ(r.seconds_per_unit, 1e-3);
  EXPECT_EQ(r.outliers, 0);
  EXPECT_EQ(r.window_samples, 5);
}

TEST_F(SpeedModelTest, InvalidReportsNameTheFieldAndChangeNothing) {
  SampleN(Key(0), 1e-3, 5);
  const RankSpeed before = Speed(0);
  const SpeedModelCounters counters_before = model_->counters();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  struct Case {
    SpeedKey key;
    double seconds;
    int64_t units;
    int64_t step;
    absl::Time at;
    const char* field;
  };
  const absl::Time now = clock_.Now();
  const Case cases[] = {
      {Key(0), nan, 8, 100, now, "compute_seconds nan"},
      {Key(0), inf, 8, 100, now, "compute_seconds inf"},
      {Key(0), -inf, 8, 100, now, "compute_seconds -inf"},
      {Key(0), -0.5, 8, 100, now, "compute_seconds -0.5"},
      {Key(0), 3601, 8, 100, now, "compute_seconds 3601"},
      {Key(0), 1e300, 8, 100, now, "compute_seconds"},
      {Key(0), 0.01, -1, 100, now, "units_computed -1"},
      {Key(0), 0.01, (int64_t{1} << 40) + 1, 100, now, "units_computed 1099511627777"},
      {Key(0), 0.01, 8, -3, now, "step -3"},
      {Key(0), 0.01, 8, 100, absl::InfiniteFuture(), "at_time"},
      {Key(0, 0, ""), 0.01, 8, 100, now, "job is empty"},
      {Key(0, 0, std::string(300, 'j')), 0.01, 8, 100, now, "longer than 256 bytes"},
      {Key(0, 0, std::string("v\0it", 4)), 0.01, 8, 100, now, "job 'v\\x00it' has byte 0x00"},
      {Key(0, 0, "vit", ""), 0.01, 8, 100, now, "group is empty"},
      {Key(-1), 0.01, 8, 100, now, "rank -1"},
      {Key(0, -2), 0.01, 8, 100, now, "block -2"},
  };
  for (const Case& c : cases) {
    absl::Status s = model_->Report(c.key, c.seconds, c.units, c.step, c.at);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_THAT(s.message(), HasSubstr(c.field));
  }
  const RankSpeed after = Speed(0);
  EXPECT_EQ(after.seconds_per_unit, before.seconds_per_unit);
  EXPECT_EQ(after.samples, before.samples);
  EXPECT_EQ(after.last_step, before.last_step);
  EXPECT_EQ(after.window_samples, before.window_samples);
  const SpeedModelCounters counters_after = model_->counters();
  EXPECT_EQ(counters_after.keys, counters_before.keys);
  EXPECT_EQ(counters_after.reports, counters_before.reports);
  EXPECT_EQ(counters_after.rejected,
            counters_before.rejected + static_cast<int64_t>(std::size(cases)));
  EXPECT_THAT(model_->ListBlocks("vit"), ElementsAre(GroupBlock{GroupId("vit/tp0"), BlockId(0)}));
}

TEST_F(SpeedModelTest, ZeroUnitReportsRefreshButCarryNoSpeed) {
  ASSERT_TRUE(model_->Report(Key(0), 0.0, 0, 0, clock_.Now()).ok());
  RankSpeed r = Speed(0);
  EXPECT_FALSE(r.has_estimate);
  EXPECT_EQ(r.samples, 0);
  EXPECT_EQ(r.last_step, 0);
  EXPECT_EQ(Group().reference_ranks, 0);

  for (int step = 1; step <= 3; ++step) {
    ASSERT_TRUE(model_->Report(Key(0), 8e-3, 8, step, clock_.Now()).ok());
  }
  clock_.Advance(absl::Seconds(8));
  ASSERT_TRUE(model_->Report(Key(0), 0.0, 0, 4, clock_.Now()).ok());
  clock_.Advance(absl::Seconds(8));  // 16 s since the last sample, 8 s since the report
  r = Speed(0);
  EXPECT_FALSE(r.stale);
  EXPECT_DOUBLE_EQ(r.seconds_per_unit, 1e-3);
  EXPECT_EQ(r.samples, 3);
}

TEST_F(SpeedModelTest, RepeatedStepIsIgnored) {
  ASSERT_TRUE(model_->Report(Key(0), 8e-3, 8, 7, clock_.Now()).ok());
  ASSERT_TRUE(model_->Report(Key(0), 80e-3, 8, 7, clock_.Now()).ok());  // a resend
  RankSpeed r = Speed(0);
  EXPECT_EQ(r.samples, 1);
  EXPECT_DOUBLE_EQ(r.seconds_per_unit, 1e-3);
  EXPECT_EQ(model_->counters().duplicates, 1);
  // A lower step is a restart from a checkpoint, and counts.
  ASSERT_TRUE(model_->Report(Key(0), 8e-3, 8, 2, clock_.Now()).ok());
  EXPECT_EQ(Speed(0).samples, 2);
  EXPECT_EQ(Speed(0).last_step, 2);
}

TEST_F(SpeedModelTest, StragglerGoesTransientThenChronicAndRecovers) {
  auto tick = [&](double slow) {
    for (int r = 0; r < 3; ++r) ASSERT_TRUE(Sample(Key(r), 1e-3).ok());
    ASSERT_TRUE(Sample(Key(3), slow).ok());
  };
  for (int i = 0; i < 16; ++i) tick(1.05e-3);  // 5% slower: within the 10% threshold
  EXPECT_EQ(Speed(3).state, StragglerState::kNormal);
  EXPECT_NEAR(Speed(3).slowdown, 1.05, 1e-9);

  for (int i = 0; i < 3; ++i) tick(1.5e-3);  // throttled: adopted after M samples
  GroupSpeeds g = Group();
  EXPECT_DOUBLE_EQ(g.reference_seconds_per_unit, 1e-3);
  EXPECT_EQ(g.reference_ranks, 4);
  EXPECT_EQ(g.ranks[3].state, StragglerState::kTransient);
  EXPECT_EQ(g.ranks[3].straggling_for, absl::ZeroDuration());
  EXPECT_NEAR(g.ranks[3].slowdown, 1.5, 1e-9);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(g.ranks[r].state, StragglerState::kNormal);

  // Keep reporting (every 5 s, within stale_after) while the clock crosses chronic_after.
  for (int i = 0; i < 11; ++i) {
    clock_.Advance(absl::Seconds(5));
    tick(1.5e-3);
    EXPECT_EQ(Speed(3).state, StragglerState::kTransient) << i;
  }
  clock_.Advance(absl::Seconds(5));
  tick(1.5e-3);
  RankSpeed r = Speed(3);
  EXPECT_EQ(r.state, StragglerState::kChronic);
  EXPECT_EQ(r.straggling_for, absl::Seconds(60));

  // The co-tenant leaves: the speed-up is adopted after M samples, and the rank is normal.
  for (int i = 0; i < 3; ++i) tick(1e-3);
  r = Speed(3);
  EXPECT_EQ(r.state, StragglerState::kNormal);
  EXPECT_EQ(r.straggling_for, absl::ZeroDuration());

  // Straggling again starts the clock from zero.
  for (int i = 0; i < 3; ++i) tick(1.5e-3);
  EXPECT_EQ(Speed(3).state, StragglerState::kTransient);
  clock_.Advance(absl::Seconds(5));
  tick(1.5e-3);
  EXPECT_EQ(Speed(3).state, StragglerState::kTransient);
  EXPECT_EQ(Speed(3).straggling_for, absl::Seconds(5));
}

TEST_F(SpeedModelTest, ZeroChronicAfterIsChronicAtOnce) {
  SampleN(Key(0), 1e-3, 3);
  SampleN(Key(1), 3e-3, 3);
  absl::StatusOr<GroupSpeeds> g =
      model_->Speeds("vit", GroupId("vit/tp0"), BlockId(0), 0.1, absl::ZeroDuration());
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->ranks[1].state, StragglerState::kChronic);
}

TEST_F(SpeedModelTest, PolicyOverloadUsesThresholdAndReshardAfter) {
  SampleN(Key(0), 1e-3, 3);
  SampleN(Key(1), 1.15e-3, 3);
  JobPolicy policy;
  policy.straggler_threshold = 0.2;
  policy.reshard_after = absl::ZeroDuration();
  absl::StatusOr<GroupSpeeds> g = model_->Speeds("vit", GroupId("vit/tp0"), BlockId(0), policy);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->ranks[1].state, StragglerState::kNormal);  // 15% < 20%
  policy.straggler_threshold = 0.1;
  g = model_->Speeds("vit", GroupId("vit/tp0"), BlockId(0), policy);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->ranks[1].state, StragglerState::kChronic);
}

TEST_F(SpeedModelTest, TwoRankGroupMeasuresTheSlowRankAgainstTheFastOne) {
  SampleN(Key(0), 1e-3, 3);
  SampleN(Key(1), 1.2e-3, 3);
  GroupSpeeds g = Group();
  EXPECT_DOUBLE_EQ(g.reference_seconds_per_unit, 1e-3);
  EXPECT_EQ(g.ranks[0].state, StragglerState::kNormal);
  EXPECT_EQ(g.ranks[1].state, StragglerState::kTransient);
}

TEST_F(SpeedModelTest, StaleRanksAreExcludedFromTheReference) {
  // Ranks 0-2 report slowly once and then fall silent; ranks 3 and 4 keep reporting.
  for (int r = 0; r < 3; ++r) SampleN(Key(r), 2e-3, 3);
  clock_.Advance(absl::Seconds(11));
  SampleN(Key(3), 1e-3, 3);
  SampleN(Key(4), 1.5e-3, 3);
  GroupSpeeds g = Group();
  ASSERT_EQ(g.ranks.size(), 5u);
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(g.ranks[r].stale) << r;
    EXPECT_EQ(g.ranks[r].state, StragglerState::kNormal) << r;  // stale: not judged
    EXPECT_DOUBLE_EQ(g.ranks[r].seconds_per_unit, 2e-3);        // still shown
  }
  EXPECT_EQ(g.reference_ranks, 2);
  // With the stale ranks the median would be 2e-3 and rank 4 would look fast.
  EXPECT_DOUBLE_EQ(g.reference_seconds_per_unit, 1e-3);
  EXPECT_EQ(g.ranks[4].state, StragglerState::kTransient);

  // Exactly stale_after is not yet stale.
  clock_.Advance(absl::Seconds(10));
  EXPECT_FALSE(Speed(3).stale);
  clock_.Advance(absl::Milliseconds(1));
  EXPECT_TRUE(Speed(3).stale);
  EXPECT_EQ(Group().reference_ranks, 0);
  EXPECT_EQ(Speed(4).state, StragglerState::kNormal);
}

TEST_F(SpeedModelTest, BlocksAreIndependent) {
  SampleN(Key(0, /*block=*/0), 1e-3, 3);
  SampleN(Key(0, /*block=*/1), 5e-3, 3);
  SampleN(Key(0, 0, "vit", "vit/tp1"), 9e-3, 3);
  EXPECT_DOUBLE_EQ(Speed(0, 0).seconds_per_unit, 1e-3);
  EXPECT_DOUBLE_EQ(Speed(0, 1).seconds_per_unit, 5e-3);
  EXPECT_THAT(model_->ListBlocks("vit"), ElementsAre(GroupBlock{GroupId("vit/tp0"), BlockId(0)},
                                                     GroupBlock{GroupId("vit/tp0"), BlockId(1)},
                                                     GroupBlock{GroupId("vit/tp1"), BlockId(0)}));
  EXPECT_TRUE(model_->ListBlocks("other").empty());
}

TEST_F(SpeedModelTest, SpeedsRejectsBadArgumentsAndUnknownBlocks) {
  SampleN(Key(0), 1e-3, 1);
  EXPECT_EQ(
      model_->Speeds("vit", GroupId("vit/tp0"), BlockId(0), -0.1, kChronicAfter).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(model_->Speeds("vit", GroupId("vit/tp0"), BlockId(0), std::nan(""), kChronicAfter)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      model_->Speeds("vit", GroupId("vit/tp0"), BlockId(0), 0.1, absl::Seconds(-1)).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      model_->Speeds("vit", GroupId("vit/tp0"), BlockId(9), 0.1, kChronicAfter).status().code(),
      absl::StatusCode::kNotFound);
  EXPECT_EQ(
      model_->Speeds("nope", GroupId("vit/tp0"), BlockId(0), 0.1, kChronicAfter).status().code(),
      absl::StatusCode::kNotFound);
}

TEST_F(SpeedModelTest, RemoveDropsAJob) {
  SampleN(Key(0), 1e-3, 1);
  SampleN(Key(1), 1e-3, 1);
  SampleN(Key(0, 0, "other", "other/tp0"), 1e-3, 1);
  EXPECT_EQ(model_->Remove("vit"), 2);
  EXPECT_EQ(model_->Remove("vit"), 0);
  EXPECT_EQ(model_->counters().keys, 1);
  EXPECT_EQ(
      model_->Speeds("vit", GroupId("vit/tp0"), BlockId(0), 0.1, kChronicAfter).status().code(),
      absl::StatusCode::kNotFound);
  EXPECT_EQ(model_->ListBlocks("other").size(), 1u);
}

TEST_F(SpeedModelTest, SweepForgetsSilentKeys) {
  SampleN(Key(0), 1e-3, 1);
  SampleN(Key(1), 1e-3, 1);
  SampleN(Key(0, 1), 1e-3, 1);
  SampleN(Key(0, 0, "other", "other/tp0"), 1e-3, 1);
  clock_.Advance(absl::Minutes(4));
  SampleN(Key(1), 1e-3, 1);
  EXPECT_EQ(model_->Sweep(), 0);
  clock_.Advance(absl::Minutes(1) + absl::Milliseconds(1));
  EXPECT_EQ(model_->Sweep(), 3);  // vit rank 0 blocks 0 and 1, and the other job
  EXPECT_EQ(model_->counters().keys, 1);
  EXPECT_THAT(model_->ListBlocks("vit"), ElementsAre(GroupBlock{GroupId("vit/tp0"), BlockId(0)}));
  EXPECT_TRUE(model_->ListBlocks("other").empty());
  EXPECT_EQ(Group().ranks.size(), 1u);
  // A forgotten key starts afresh when it reports again.
  SampleN(Key(0), 3e-3, 1);
  EXPECT_EQ(Speed(0).samples, 1);
  EXPECT_DOUBLE_EQ(Speed(0).seconds_per_unit, 3e-3);
}

TEST_F(SpeedModelTest, MaxKeysBoundsMemory) {
  Recreate({.max_keys = 2});
  SampleN(Key(0), 1e-3, 1);
  SampleN(Key(1), 1e-3, 1);
  absl::Status s = Sample(Key(2), 1e-3);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("max_keys"));
  EXPECT_EQ(model_->counters().keys, 2);
  EXPECT_EQ(Group().ranks.size(), 2u);
  SampleN(Key(1), 1e-3, 1);  // known keys still report
  EXPECT_EQ(model_->Remove("vit"), 2);
  EXPECT_TRUE(Sample(Key(2), 1e-3).ok());
}

TEST_F(SpeedModelTest, ConcurrentReportersAndReaders) {
  constexpr int kThreads = 4;
  constexpr int kReports = 2000;
  std::atomic<bool> done{false};
  std::thread reader([&] {
    while (!done.load()) {
      (void)model_->Speeds("vit", GroupId("vit/tp0"), BlockId(0), kThreshold, kChronicAfter);
      (void)model_->counters();
      (void)model_->Sweep();
    }
  });
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&, t] {
      for (int i = 0; i < kReports; ++i) {
        // Every thread shares rank 0 (contention on one key) and owns its rank t + 1.
        absl::Status a = model_->Report(Key(0), 8e-3, 8, int64_t{t} * kReports + i, clock_.Now());
        absl::Status b = model_->Report(Key(t + 1, i % 3), 8e-3 * (t + 1), 8, i, clock_.Now());
        if (!a.ok() || !b.ok()) ADD_FAILURE() << a << " " << b;
        if (i % 500 == 0) clock_.Advance(absl::Milliseconds(1));
      }
    });
  }
  for (std::thread& w : writers) w.join();
  done = true;
  reader.join();

  SpeedModelCounters c = model_->counters();
  EXPECT_EQ(c.reports, 2 * kThreads * kReports);
  EXPECT_EQ(c.keys, 1 + kThreads * 3);
  EXPECT_EQ(c.rejected, 0);
  EXPECT_EQ(Speed(0).samples + c.duplicates, kThreads * kReports);
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_DOUBLE_EQ(Speed(t + 1).seconds_per_unit, 1e-3 * (t + 1));
    EXPECT_EQ(Speed(t + 1, 0).samples + Speed(t + 1, 1).samples + Speed(t + 1, 2).samples,
              kReports);
  }
}

TEST(StragglerStateNameTest, Names) {
  EXPECT_EQ(StragglerStateName(StragglerState::kNormal), "normal");
  EXPECT_EQ(StragglerStateName(StragglerState::kTransient), "transient");
  EXPECT_EQ(StragglerStateName(StragglerState::kChronic), "chronic");
}

}  // namespace
}  // namespace ballast::coordinator
