#include "coordinator/link_model.h"

#include <limits>

#include <gtest/gtest.h>

namespace ballast::coordinator {
namespace {

// Every sample and look at one time, except in the staleness tests.
constexpr absl::Duration kNow = absl::Seconds(100);

TEST(LinkModelTest, NothingLearnedBeforeEnoughSamples) {
  LinkModel links;
  EXPECT_FALSE(links.Slowest(kNow).has_value());
  for (size_t i = 0; i + 1 < LinkModel::kMinSamples; ++i) {
    ASSERT_TRUE(links.Add(RankId(1), RankId(0), 1'000'000, 0.04, kNow).ok());
  }
  EXPECT_FALSE(links.Slowest(kNow).has_value());
  ASSERT_TRUE(links.Add(RankId(0), RankId(1), 1'000'000, 0.04, kNow).ok());  // either direction
  ASSERT_TRUE(links.Slowest(kNow).has_value());
  EXPECT_NEAR(links.Slowest(kNow)->bytes_per_second, 25e6, 1);
  EXPECT_EQ(links.Slowest(kNow)->a, RankId(0));
  EXPECT_EQ(links.Slowest(kNow)->b, RankId(1));
  EXPECT_EQ(links.Slowest(kNow)->samples, static_cast<int32_t>(LinkModel::kMinSamples));
}

TEST(LinkModelTest, WaitsForAPeerDoNotSlowTheLinkDown) {
  // 25 MB/s, but half the transfers also waited for a late peer (2x to 5x as long).
  LinkModel links;
  for (int i = 0; i < 16; ++i) {
    const double wait = i % 2 == 0 ? 1.0 : 2.0 + (i % 4);
    ASSERT_TRUE(links.Add(RankId(0), RankId(1), 500'000, 0.02 * wait, kNow).ok());
  }
  EXPECT_NEAR(links.Slowest(kNow)->bytes_per_second, 25e6, 1);
}

TEST(LinkModelTest, TheWindowForgetsOldSamplesAndTheSlowestPairPrices) {
  LinkModel links;
  for (size_t i = 0; i < LinkModel::kWindow; ++i) {
    ASSERT_TRUE(links.Add(RankId(0), RankId(1), 1'000'000, 0.001, kNow).ok());  // 1 GB/s
    ASSERT_TRUE(links.Add(RankId(2), RankId(1), 1'000'000, 0.010, kNow).ok());  // 100 MB/s
  }
  EXPECT_NEAR(links.Slowest(kNow)->bytes_per_second, 100e6, 1);
  EXPECT_EQ(links.Slowest(kNow)->a, RankId(1));
  EXPECT_EQ(links.Slowest(kNow)->b, RankId(2));
  // The 1-2 link gets faster (traffic moved off it): a window later it is 1 GB/s too.
  for (size_t i = 0; i < LinkModel::kWindow; ++i) {
    ASSERT_TRUE(links.Add(RankId(1), RankId(2), 1'000'000, 0.001, kNow).ok());
  }
  EXPECT_NEAR(links.Slowest(kNow)->bytes_per_second, 1e9, 1e3);
}

TEST(LinkModelTest, BadSamplesAreRefusedByName) {
  LinkModel links;
  EXPECT_EQ(links.Add(RankId(1), RankId(1), 10, 1, kNow).message(),
            "transfer from rank 1 to rank 1: not two distinct ranks");
  EXPECT_EQ(links.Add(RankId(1), RankId(-1), 10, 1, kNow).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(links.Add(RankId(1), RankId(0), 0, 1, kNow).message(), "transfer bytes 0 must be > 0");
  EXPECT_EQ(links.Add(RankId(1), RankId(0), 10, std::numeric_limits<double>::quiet_NaN(), kNow)
                .message(),
            "transfer seconds nan must be finite and > 0");
  EXPECT_EQ(links.Add(RankId(1), RankId(0), 10, 0, kNow).code(),
            absl::StatusCode::kInvalidArgument);
  // None of them was recorded: one good sample short of learning, the pair is not learned.
  for (size_t i = 0; i + 1 < LinkModel::kMinSamples; ++i) {
    ASSERT_TRUE(links.Add(RankId(1), RankId(0), 10, 1, kNow).ok());
  }
  EXPECT_FALSE(links.Slowest(kNow).has_value());
}

TEST(LinkModelTest, PairsAreBoundedAndARankCanBeForgotten) {
  LinkModel links;
  for (size_t i = 0; i < LinkModel::kMinSamples; ++i) {
    ASSERT_TRUE(links.Add(RankId(0), RankId(1), 1000, 1, kNow).ok());
    ASSERT_TRUE(links.Add(RankId(2), RankId(3), 1000, 0.1, kNow).ok());
  }
  EXPECT_EQ(links.Slowest(kNow)->a, RankId(0));
  links.ForgetRank(RankId(1));  // rank 1 moved: its slow link is not its own any more
  EXPECT_EQ(links.Slowest(kNow)->a, RankId(2));
  int32_t pairs = 1;  // (2, 3)
  for (int32_t r = 4; pairs < static_cast<int32_t>(LinkModel::kMaxPairs); ++r, ++pairs) {
    ASSERT_TRUE(links.Add(RankId(0), RankId(r), 1000, 1, kNow).ok());
  }
  EXPECT_EQ(links.Add(RankId(0), RankId(100000), 1000, 1, kNow).code(),
            absl::StatusCode::kResourceExhausted);
  // A pair it holds still learns.
  EXPECT_TRUE(links.Add(RankId(2), RankId(3), 1000, 0.1, kNow).ok());
}

// What a CPU quota did to a 1 GB/s loopback link in the interleaved benchmark: the
// throttled sender was descheduled inside most transfers for a while, the quartile read
// 48 MB/s, offloading was priced out and no transfer was measured again.
TEST(LinkModelTest, AStaleLinkIsPricedAtItsFastestSampleThenRelearned) {
  LinkModel links(absl::Seconds(60));
  const absl::Duration t0 = absl::Seconds(10);
  for (int i = 0; i < 16; ++i) {  // 3 of 16 at 1 GB/s, the rest 20x slower
    const double seconds = i % 6 == 0 ? 0.001 : 0.020;
    ASSERT_TRUE(links.Add(RankId(0), RankId(1), 1'000'000, seconds, t0).ok());
  }
  std::optional<LinkModel::Estimate> e = links.Slowest(t0 + absl::Seconds(60));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->basis, LinkModel::Basis::kLearned);  // fresh up to stale_after itself
  EXPECT_NEAR(e->bytes_per_second, 50e6, 1);
  e = links.Slowest(t0 + absl::Seconds(61));
  EXPECT_EQ(e->basis, LinkModel::Basis::kStale);
  EXPECT_NEAR(e->bytes_per_second, 1e9, 1e3);  // the fastest kept sample
  EXPECT_EQ(e->age, absl::Seconds(61));
  EXPECT_EQ(e->samples, 16);
  // Offloads resume: the first new sample starts the window afresh, and until
  // kMinSamples are in the pair stays at the stale price, whatever the new ones read.
  const absl::Duration t1 = t0 + absl::Seconds(90);
  for (size_t i = 0; i + 1 < LinkModel::kMinSamples; ++i) {
    ASSERT_TRUE(links.Add(RankId(1), RankId(0), 1'000'000, 0.002, t1).ok());  // 500 MB/s
    e = links.Slowest(t1);
    EXPECT_EQ(e->basis, LinkModel::Basis::kRelearning);
    EXPECT_NEAR(e->bytes_per_second, 1e9, 1e3);
    EXPECT_EQ(e->samples, static_cast<int32_t>(i + 1));
  }
  ASSERT_TRUE(links.Add(RankId(1), RankId(0), 1'000'000, 0.002, t1).ok());
  e = links.Slowest(t1);
  EXPECT_EQ(e->basis, LinkModel::Basis::kLearned);  // the old slow samples are gone
  EXPECT_NEAR(e->bytes_per_second, 500e6, 1);
  EXPECT_EQ(LinkBasisName(e->basis), std::string("learned"));
}

TEST(LinkModelTest, SteadySamplesNeverGoStaleAndANeverLearnedPairStaysUnlearned) {
  LinkModel links(absl::Seconds(60));
  // One sample every 30 s for 20 minutes: the newest is never older than 60 s.
  for (int i = 0; i < 40; ++i) {
    const absl::Duration at = absl::Seconds(30 * i);
    ASSERT_TRUE(links.Add(RankId(0), RankId(1), 1'000'000, 0.04, at).ok());
    if (i + 1 >= static_cast<int>(LinkModel::kMinSamples)) {
      EXPECT_EQ(links.Slowest(at + absl::Seconds(59))->basis, LinkModel::Basis::kLearned);
    }
  }
  // A pair with fewer than kMinSamples samples ever is not learned, however old.
  LinkModel few(absl::Seconds(60));
  ASSERT_TRUE(few.Add(RankId(0), RankId(1), 1'000'000, 0.04, absl::ZeroDuration()).ok());
  EXPECT_FALSE(few.Slowest(absl::Hours(1)).has_value());
  ASSERT_TRUE(few.Add(RankId(0), RankId(1), 1'000'000, 0.04, absl::Hours(1)).ok());
  EXPECT_FALSE(few.Slowest(absl::Hours(1)).has_value());  // the window restarted: 1 sample
}

TEST(LinkModelTest, StalePairsArePricedOnTheirOwnAndTheSlowestStillPrices) {
  LinkModel links(absl::Seconds(60));
  for (size_t i = 0; i < LinkModel::kMinSamples; ++i) {
    // 0-1 measured long ago at 10-40 MB/s; 2-3 lately at a steady 100 MB/s.
    const double seconds = i == 0 ? 0.025 : 0.1;
    ASSERT_TRUE(links.Add(RankId(0), RankId(1), 1'000'000, seconds, absl::Seconds(0)).ok());
    ASSERT_TRUE(links.Add(RankId(2), RankId(3), 1'000'000, 0.01, absl::Seconds(100)).ok());
  }
  // 0-1 is stale, priced at its fastest sample, 40 MB/s: still the slowest pair.
  std::optional<LinkModel::Estimate> e = links.Slowest(absl::Seconds(100));
  EXPECT_EQ(e->a, RankId(0));
  EXPECT_EQ(e->basis, LinkModel::Basis::kStale);
  EXPECT_NEAR(e->bytes_per_second, 40e6, 1);
  // Once 0-1 is measured faster than 2-3 (a new window), 2-3 prices the group.
  for (size_t i = 0; i < LinkModel::kMinSamples; ++i) {
    ASSERT_TRUE(links.Add(RankId(1), RankId(0), 1'000'000, 0.001, absl::Seconds(110)).ok());
  }
  e = links.Slowest(absl::Seconds(110));
  EXPECT_EQ(e->a, RankId(2));
  EXPECT_EQ(e->basis, LinkModel::Basis::kLearned);
  EXPECT_NEAR(e->bytes_per_second, 100e6, 1);
}

}  // namespace
}  // namespace ballast::coordinator
