// Tests for ProportionalOwnership / EvenOwnership (plan/ownership.cc).
#include "ballast/ownership.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

namespace ballast {
namespace {

std::vector<int> Counts(const std::vector<RankId>& owners, int size) {
  std::vector<int> counts(size, 0);
  for (RankId r : owners) ++counts[r.value()];
  return counts;
}

TEST(OwnershipTest, EvenSplitIsContiguousAndBalanced) {
  std::vector<RankId> owners = EvenOwnership(10, 4);
  ASSERT_EQ(owners.size(), 10u);
  EXPECT_THAT(Counts(owners, 4), ::testing::ElementsAre(3, 3, 2, 2));
  EXPECT_TRUE(std::is_sorted(owners.begin(), owners.end()));
}

TEST(OwnershipTest, ProportionalFollowsShares) {
  const std::vector<double> shares = {3, 1};
  auto owners = ProportionalOwnership(8, shares);
  ASSERT_TRUE(owners.ok()) << owners.status();
  EXPECT_THAT(Counts(*owners, 2), ::testing::ElementsAre(6, 2));
}

TEST(OwnershipTest, LargestRemainderSumsExactly) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> share(0.1, 5.0);
  for (int trial = 0; trial < 200; ++trial) {
    const int p = 1 + trial % 8;
    const int units = 1 + trial % 50;
    std::vector<double> shares(p);
    double total = 0;
    for (double& s : shares) total += (s = share(rng));
    auto owners = ProportionalOwnership(units, shares);
    ASSERT_TRUE(owners.ok());
    const std::vector<int> counts = Counts(*owners, p);
    int sum = 0;
    for (int r = 0; r < p; ++r) {
      sum += counts[r];
      // Largest remainder never strays a whole unit from the exact quota.
      EXPECT_LT(std::abs(counts[r] - units * shares[r] / total), 1.0);
    }
    EXPECT_EQ(sum, units);
  }
}

// Any finite positive shares, whatever their scale: these summed to infinity and read
// past the end of the remainders (found by reading the code for the fuzz targets).
TEST(OwnershipTest, HugeAndTinySharesSplitLikeTheirRatios) {
  auto huge = ProportionalOwnership(8, std::vector<double>{1.5e308, 1.5e308});
  ASSERT_TRUE(huge.ok()) << huge.status();
  EXPECT_THAT(Counts(*huge, 2), ::testing::ElementsAre(4, 4));
  auto mixed = ProportionalOwnership(8, std::vector<double>{1.7e308, 5.6e307});
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  EXPECT_THAT(Counts(*mixed, 2), ::testing::ElementsAre(6, 2));
  auto tiny = ProportionalOwnership(4, std::vector<double>{4.9e-324, 1.0, 4.9e-324});
  ASSERT_TRUE(tiny.ok()) << tiny.status();
  EXPECT_THAT(Counts(*tiny, 3), ::testing::ElementsAre(0, 4, 0));
}

TEST(OwnershipTest, RejectsBadShares) {
  EXPECT_FALSE(ProportionalOwnership(0, std::vector<double>{1}).ok());
  EXPECT_FALSE(ProportionalOwnership(4, std::vector<double>{}).ok());
  auto status = ProportionalOwnership(4, std::vector<double>{1, -2}).status();
  EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr("shares[1]"));
  EXPECT_FALSE(ProportionalOwnership(4, std::vector<double>{1, std::nan("")}).ok());
  EXPECT_TRUE(EvenOwnership(0, 2).empty());
}

}  // namespace
}  // namespace ballast
