#include "coordinator/link_model.h"

#include <limits>

#include <gtest/gtest.h>

namespace ballast::coordinator {
namespace {

TEST(LinkModelTest, NothingLearnedBeforeEnoughSamples) {
  LinkModel links;
  EXPECT_FALSE(links.Slowest().has_value());
  for (size_t i = 0; i + 1 < LinkModel::kMinSamples; ++i) {
    ASSERT_TRUE(links.Add(RankId(1), RankId(0), 1'000'000, 0.04).ok());
  }
  EXPECT_FALSE(links.Slowest().has_value());
  ASSERT_TRUE(links.Add(RankId(0), RankId(1), 1'000'000, 0.04).ok());  // either direction
  ASSERT_TRUE(links.Slowest().has_value());
  EXPECT_NEAR(links.Slowest()->bytes_per_second, 25e6, 1);
  EXPECT_EQ(links.Slowest()->a, RankId(0));
  EXPECT_EQ(links.Slowest()->b, RankId(1));
  EXPECT_EQ(links.Slowest()->samples, static_cast<int32_t>(LinkModel::kMinSamples));
}

TEST(LinkModelTest, WaitsForAPeerDoNotSlowTheLinkDown) {
  // 25 MB/s, but half the transfers also waited for a late peer (2x to 5x as long).
  LinkModel links;
  for (int i = 0; i < 16; ++i) {
    const double wait = i % 2 == 0 ? 1.0 : 2.0 + (i % 4);
    ASSERT_TRUE(links.Add(RankId(0), RankId(1), 500'000, 0.02 * wait).ok());
  }
  EXPECT_NEAR(links.Slowest()->bytes_per_second, 25e6, 1);
}

TEST(LinkModelTest, TheWindowForgetsOldSamplesAndTheSlowestPairPrices) {
  LinkModel links;
  for (size_t i = 0; i < LinkModel::kWindow; ++i) {
    ASSERT_TRUE(links.Add(RankId(0), RankId(1), 1'000'000, 0.001).ok());  // 1 GB/s
    ASSERT_TRUE(links.Add(RankId(2), RankId(1), 1'000'000, 0.010).ok());  // 100 MB/s
  }
  EXPECT_NEAR(links.Slowest()->bytes_per_second, 100e6, 1);
  EXPECT_EQ(links.Slowest()->a, RankId(1));
  EXPECT_EQ(links.Slowest()->b, RankId(2));
  // The 1-2 link gets faster (traffic moved off it): a window later it is 1 GB/s too.
  for (size_t i = 0; i < LinkModel::kWindow; ++i) {
    ASSERT_TRUE(links.Add(RankId(1), RankId(2), 1'000'000, 0.001).ok());
  }
  EXPECT_NEAR(links.Slowest()->bytes_per_second, 1e9, 1e3);
}

TEST(LinkModelTest, BadSamplesAreRefusedByName) {
  LinkModel links;
  EXPECT_EQ(links.Add(RankId(1), RankId(1), 10, 1).message(),
            "transfer from rank 1 to rank 1: not two distinct ranks");
  EXPECT_EQ(links.Add(RankId(1), RankId(-1), 10, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(links.Add(RankId(1), RankId(0), 0, 1).message(), "transfer bytes 0 must be > 0");
  EXPECT_EQ(links.Add(RankId(1), RankId(0), 10, std::numeric_limits<double>::quiet_NaN())
                .message(),
            "transfer seconds nan must be finite and > 0");
  EXPECT_EQ(links.Add(RankId(1), RankId(0), 10, 0).code(), absl::StatusCode::kInvalidArgument);
  // None of them was recorded: one good sample short of learning, the pair is not learned.
  for (size_t i = 0; i + 1 < LinkModel::kMinSamples; ++i) {
    ASSERT_TRUE(links.Add(RankId(1), RankId(0), 10, 1).ok());
  }
  EXPECT_FALSE(links.Slowest().has_value());
}

TEST(LinkModelTest, PairsAreBoundedAndARankCanBeForgotten) {
  LinkModel links;
  for (size_t i = 0; i < LinkModel::kMinSamples; ++i) {
    ASSERT_TRUE(links.Add(RankId(0), RankId(1), 1000, 1).ok());
    ASSERT_TRUE(links.Add(RankId(2), RankId(3), 1000, 0.1).ok());
  }
  EXPECT_EQ(links.Slowest()->a, RankId(0));
  links.ForgetRank(RankId(1));  // rank 1 moved: its slow link is not its own any more
  EXPECT_EQ(links.Slowest()->a, RankId(2));
  int32_t pairs = 1;  // (2, 3)
  for (int32_t r = 4; pairs < static_cast<int32_t>(LinkModel::kMaxPairs); ++r, ++pairs) {
    ASSERT_TRUE(links.Add(RankId(0), RankId(r), 1000, 1).ok());
  }
  EXPECT_EQ(links.Add(RankId(0), RankId(100000), 1000, 1).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(links.Add(RankId(2), RankId(3), 1000, 0.1).ok());  // a pair it holds still learns
}

}  // namespace
}  // namespace ballast::coordinator
