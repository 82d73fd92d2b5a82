// The fixture of StragglerKind's tests (straggler_kind_test.cc,
// straggler_kind_throttled_test.cc): one StragglerKind on a fake clock for group "gpt" "tp0",
// and the rounds its tests feed it (calm, a straggler, steps on a given split).
#ifndef BALLAST_TESTS_COORDINATOR_STRAGGLER_KIND_TEST_BASE_H_
#define BALLAST_TESTS_COORDINATOR_STRAGGLER_KIND_TEST_BASE_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/straggler_kind.h"
#include "testing/fake_clock.h"

namespace ballast::coordinator {

inline const GroupRef kGroup{.key = {"gpt", "tp0"}, .incarnation = 1};

// The workers run plan `version` (the newest pushed), without offloads unless said, at a
// step of 0.1 s whose collectives cost `collectives` at least.
inline StragglerKind::Round Ran(int32_t straggler, int64_t version, double collectives,
                                bool offloads = false, std::vector<int32_t> units = {}) {
  return {.straggler = straggler,
          .plan_version = version,
          .published_version = version,
          .offloads = offloads,
          .units = std::move(units),
          .step_seconds = 0.1,
          .collective_seconds = collectives};
}

// Plan 1 without offloads at a step of `step` s on `units`.
inline StragglerKind::Round RanStep(int32_t straggler, double step, double collectives,
                                    const std::vector<int32_t>& units) {
  StragglerKind::Round round = Ran(straggler, 1, collectives, false, units);
  round.step_seconds = step;
  return round;
}

// Plan 1 without offloads at a step of 0.15 s on `units`: rank 0's collectives cost
// 0.060 s a step and rank 1's `own` (the group's least is the smaller).
inline StragglerKind::Round RanOwn(int32_t straggler, const std::vector<int32_t>& units,
                                   double own) {
  StragglerKind::Round round = RanStep(straggler, 0.150, std::min(0.060, own), units);
  round.rank_collective_seconds = {0.060, own};
  return round;
}

// Plan 1 on `units` at steps of 0.1 s: rank 0's collectives `peer` a step and rank 1's
// `own` (the group's least is the smaller).
inline StragglerKind::Round RanPeerOwn(int32_t straggler, const std::vector<int32_t>& units,
                                       double peer, double own, bool offloads = false) {
  StragglerKind::Round round = Ran(straggler, 1, std::min(peer, own), offloads, units);
  round.rank_collective_seconds = {peer, own};
  return round;
}

class StragglerKindTest : public ::testing::Test {
 protected:
  StragglerKind::Kind Update(const StragglerKind::Round& round) {
    lines_.clear();
    return kinds_.Update(kGroup, round, lines_);
  }
  std::string Said() const { return lines_.empty() ? "" : lines_.back(); }
  // Calm for 2 s (16 steps of 0.1 s take 1.6 s), with collectives at 43 ms.
  void Calm(double collectives = 0.043) {
    Update(Ran(-1, 1, collectives));
    clock_.Advance(absl::Seconds(2));
    Update(Ran(-1, 1, collectives));
  }
  // Rank 1 straggles; 2 s later the plan in force (without offloads) shows `collectives`.
  StragglerKind::Kind Straggle(double collectives, int64_t version = 1) {
    Update(Ran(1, version, 0.043));  // the median still holds calm steps
    clock_.Advance(absl::Seconds(2));
    return Update(Ran(1, version, collectives));
  }

  // Calm for 2 s on the even split (45 units a rank) at 43 ms of collectives, then rank 1
  // straggling there for 2 s at `collectives` (plan 1): its kind.
  StragglerKind::Kind CalmThenJudgedOnEven(double collectives) {
    const std::vector<int32_t> even{45, 45};
    Update(Ran(-1, 1, 0.043, false, even));
    clock_.Advance(absl::Seconds(2));
    Update(Ran(-1, 1, 0.043, false, even));
    Update(Ran(1, 1, 0.043, false, even));
    clock_.Advance(absl::Seconds(2));
    return Update(Ran(1, 1, collectives, false, even));
  }

  // Calm on the even split (steps of 0.1 s, collectives at 43 ms), then rank 1 straggling
  // there, and 3 s later its round of plain TP with collectives of 0.100 s a step, which
  // judges it throttled whole with that straggling floor. Returns that round.
  StragglerKind::Round JudgeThrottledOnEven() {
    const std::vector<int32_t> even{45, 45};
    Update(RanStep(-1, 0.100, 0.043, even));
    clock_.Advance(absl::Seconds(2));
    Update(RanStep(-1, 0.100, 0.043, even));
    Update(RanStep(1, 0.100, 0.043, even));
    clock_.Advance(absl::Seconds(3));
    StragglerKind::Round plain = RanOwn(1, even, 0.100);
    plain.collective_seconds = 0.100;
    EXPECT_EQ(Update(plain), StragglerKind::Kind::kWhole);
    return plain;
  }

  // On another StragglerKind: calm for 2 s at 43 ms of collectives, then rank 1 straggling
  // (its first round).
  void CalmThenStraggling(StragglerKind& kinds, std::vector<std::string>& lines) {
    kinds.Update(kGroup, Ran(-1, 1, 0.043), lines);
    clock_.Advance(absl::Seconds(2));
    kinds.Update(kGroup, Ran(-1, 1, 0.043), lines);
    kinds.Update(kGroup, Ran(1, 1, 0.043), lines);
  }

  testing::FakeClock clock_;
  StragglerKind kinds_{&clock_, StragglerKindOptions{}};
  std::vector<std::string> lines_;
};

}  // namespace ballast::coordinator

#endif  // BALLAST_TESTS_COORDINATOR_STRAGGLER_KIND_TEST_BASE_H_
