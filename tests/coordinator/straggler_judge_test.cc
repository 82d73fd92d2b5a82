// StragglerJudge on a fake clock: a rank is chronic after reshard_after of straggling
// without a break, a gap in the rounds breaks the run, a reshard restarts the count, and a
// group registered again starts afresh. A block's skewed loads last the same way, per
// block.
#include "coordinator/straggler_judge.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "testing/fake_clock.h"

namespace ballast::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Two ranks, rank 1 at `slowdown` (straggling above 1.1x).
PooledGroup Pooled(double slowdown) {
  PooledGroup g;
  g.ranks = {{.slowdown = 1, .blocks_judged = 1},
             {.slowdown = slowdown, .blocks_judged = 1, .straggling = slowdown > 1.1}};
  g.calm = slowdown <= 1.1;
  return g;
}

class StragglerJudgeTest : public ::testing::Test {
 protected:
  StragglerJudgeTest() : judge_(&clock_, absl::Seconds(1)) {
    policy_.report_period = absl::Milliseconds(100);
    policy_.reshard_after = absl::Seconds(2);
  }
  StragglerJudge::Verdict Round(double slowdown, bool all_local = false) {
    clock_.Advance(absl::Milliseconds(100));
    std::vector<std::string> lines;
    return judge_.Judge(ref_, {0, 1}, 2, Pooled(slowdown), 1, policy_, all_local, lines);
  }

  testing::FakeClock clock_;
  StragglerJudge judge_;
  JobPolicy policy_;
  GroupRef ref_{{"vit", "tp0"}, 1};
};

TEST_F(StragglerJudgeTest, ARankIsChronicAfterReshardAfterWithoutABreak) {
  for (int i = 0; i < 20; ++i) EXPECT_THAT(Round(2.0).chronic, ElementsAre(false, false)) << i;
  EXPECT_THAT(Round(2.0).chronic, ElementsAre(false, true));
  EXPECT_TRUE(judge_.Ranks(ref_).at(1).straggling_since.has_value());
  // A gap of more than 3 report periods breaks the run: the count starts again.
  clock_.Advance(absl::Seconds(1));
  EXPECT_THAT(Round(2.0).chronic, ElementsAre(false, false));
}

TEST_F(StragglerJudgeTest, AReshardRestartsTheCountToChronic) {
  for (int i = 0; i < 21; ++i) Round(2.0);
  judge_.UnitsMoved(ref_);
  for (int i = 0; i < 19; ++i) EXPECT_FALSE(Round(2.0).chronic[1]) << i;
  EXPECT_TRUE(Round(2.0).chronic[1]);
}

TEST_F(StragglerJudgeTest, CalmLastsOnlyAfterReshardAfterAndAMarginalStragglerIsWaitedOut) {
  for (int i = 0; i < 20; ++i) EXPECT_FALSE(Round(1.0).calm_lasted) << i;
  EXPECT_TRUE(Round(1.0).calm_lasted);
  // 1.2x is marginal (within 1 + 3 x 0.1): a group running all-local stays calm for 1 s.
  int calm_rounds = 0;
  while (calm_rounds < 30 && Round(1.2, /*all_local=*/true).calm) ++calm_rounds;
  EXPECT_GE(calm_rounds, 9);  // 1 s of 100 ms rounds
  EXPECT_LE(calm_rounds, 11);
  // A large straggler is balanced at once.
  EXPECT_FALSE(Round(2.0, true).calm);
}

TEST_F(StragglerJudgeTest, AGroupRegisteredAgainStartsAfresh) {
  for (int i = 0; i < 21; ++i) Round(2.0);
  ASSERT_TRUE(Round(2.0).chronic[1]);
  ref_.incarnation = 2;
  EXPECT_TRUE(judge_.Ranks(ref_).empty());
  EXPECT_FALSE(Round(2.0).chronic[1]);
  judge_.Forget(ref_.key);
  EXPECT_TRUE(judge_.Ranks(ref_).empty());
}

TEST_F(StragglerJudgeTest, ABlocksSkewLastsAfterReshardAfterPerBlockAndRestartsOnAMove) {
  std::vector<std::string> lines;
  auto skewed = [&](int32_t block, bool skew) {
    clock_.Advance(absl::Milliseconds(100));
    return judge_.SkewLasted(ref_, block, skew, policy_, lines);
  };
  for (int i = 0; i < 20; ++i) EXPECT_FALSE(skewed(3, true)) << i;
  EXPECT_TRUE(skewed(3, true));
  EXPECT_THAT(lines.back(), HasSubstr("block 3: loads unbalanced on its experts' ownership for 2s: "
                                      "lasted, a reshard is priced (reshard_after 2s)"));
  // Another block's run is its own; a balanced round ends a run.
  EXPECT_FALSE(skewed(4, true));
  EXPECT_FALSE(skewed(3, false));
  EXPECT_FALSE(skewed(3, true));
  // A plan that moved units restarts the count, as for a chronic straggler.
  for (int i = 0; i < 25; ++i) skewed(3, true);
  ASSERT_TRUE(skewed(3, true));
  judge_.UnitsMoved(ref_);
  for (int i = 0; i < 19; ++i) EXPECT_FALSE(skewed(3, true)) << i;
  EXPECT_THAT(lines.back(), HasSubstr("since the last reshard"));
  EXPECT_TRUE(skewed(3, true));
  // A gap of more than 3 report periods breaks it too.
  clock_.Advance(absl::Seconds(1));
  EXPECT_FALSE(skewed(3, true));
}

}  // namespace
}  // namespace ballast::coordinator
