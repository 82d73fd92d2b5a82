// Helpers of the coordinator's step tests (coordinator_step_test.cc,
// coordinator_throttled_test.cc): two ranks of one block in lockstep on the fake clock,
// and job "vit" run calm, then with rank 1 slow under mode observe, then in mode migrate.
#ifndef BALLAST_TESTS_COORDINATOR_COORDINATOR_STEP_TEST_BASE_H_
#define BALLAST_TESTS_COORDINATOR_COORDINATOR_STEP_TEST_BASE_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "coordinator/coordinator.h"
#include "testing/control_plane_messages.h"
#include "testing/coordinator_fixtures.h"
#include "testing/fake_clock.h"

namespace ballast::coordinator {

// Two ranks of one block in lockstep for `steps` steps, planned every 100 ms: rank r
// computes units[r] units at c[r] s/unit and spends own[r] seconds in collectives of its
// own, then waits for the later rank (the step is the slowest compute + own collectives).
// `stall` is added to the first step's collective time on both ranks; `spread_wait` to
// every step's, on both ranks: what a throttled rank's scattered arrival costs each side
// near the balanced split (arrival_spread.h).
class TwoRankLockstep {
 public:
  TwoRankLockstep(Coordinator* coordinator, testing::FakeClock* clock)
      : coordinator_(coordinator), clock_(clock) {}
  void Run(int steps, const std::vector<int>& units, const std::vector<double>& c,
           const std::vector<double>& own, int64_t version, double stall = 0,
           double spread_wait = 0) {
    for (int i = 0; i < steps; ++i, ++step_) {
      const double compute[2] = {units[0] * c[0], units[1] * c[1]};
      const double step_seconds = std::max(compute[0] + own[0], compute[1] + own[1]) + spread_wait;
      for (int rank : {0, 1}) {
        v1::WorkerReport r = testing::StepReport({}, rank, step_, units[rank], compute[rank]);
        r.mutable_step()->set_plan_version(version);
        r.mutable_step()->mutable_blocks(0)->set_comm_seconds(step_seconds - compute[rank] +
                                                              (i == 0 ? stall : 0));
        ASSERT_TRUE(coordinator_->Report("agent-1", r).ok());
      }
      clock_->Advance(absl::Milliseconds(100));
      coordinator_->Tick();
    }
  }
  v1::GroupStatus Status() {
    absl::StatusOr<v1::ClusterStatus> s = coordinator_->Status("vit");
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? s->jobs(0).groups(0) : v1::GroupStatus();
  }

 private:
  Coordinator* coordinator_;
  testing::FakeClock* clock_;
  int64_t step_ = 0;
};

// Job "vit" in mode observe: calm for 3 s if `calm_first` (10 ms a unit, 20 ms of
// collectives each), then rank 1 at `slow` (3x) for 6 s, its own collectives `own` (all-local,
// so they are measured: straggler_kind.h); then one step in mode migrate.
inline void SlowUnderObserveThenMigrate(Coordinator* coordinator, testing::FakeClock* clock,
                                        bool calm_first, const std::vector<double>& own,
                                        const std::vector<double>& slow = {10e-3, 30e-3}) {
  const std::vector<double> calm = {10e-3, 10e-3};
  JobPolicy policy = *coordinator->GetPolicy("vit");
  policy.mode = BalanceMode::kObserve;
  ASSERT_TRUE(coordinator->SetPolicy("vit", policy).ok());
  TwoRankLockstep ranks(coordinator, clock);
  if (calm_first) ranks.Run(30, {4, 4}, calm, {20e-3, 20e-3}, 0);
  ranks.Run(60, {4, 4}, slow, own, 0);
  policy.mode = BalanceMode::kMigrate;
  ASSERT_TRUE(coordinator->SetPolicy("vit", policy).ok());
  ranks.Run(1, {4, 4}, slow, own, 0);
}

}  // namespace ballast::coordinator

#endif  // BALLAST_TESTS_COORDINATOR_COORDINATOR_STEP_TEST_BASE_H_
