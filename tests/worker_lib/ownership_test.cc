// Tests for ProportionalOwnership / EvenOwnership (worker_lib/ownership.cc).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "ballast/block.h"

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
