// PlanFlaps: a group's plan that keeps being undone is held longer.
//
// The dwell (group_planner.h: DwellOptions) holds a new plan against noise for plan_dwell
// after each change. That is not enough where a straggler's estimates wander by more than
// the job's hysteresis over tens of seconds, as a CPU quota's do (its slowdown moves with
// its load): the e2e benchmark's 2x quota straggler moved a unit per block to rank 0 and
// back every 20-40 s, each change undone the moment its 2 s dwell ended (8 changes in 1,000
// steps, 2026-11-28). A change undone that soon is evidence that the two plans are within
// the noise of each other. So a plan that undoes the change to the plan in force, within
// `flap_hold` (DwellOptions) of it, is a flap: it restores the plan before, or moves some
// rank's work in some block back the way that change moved it (a partial undo: after a
// 2x quota straggler's reshard, auto offloaded 3 of its units a block, then had it
// compute one of its peer's 7 s later, then offloaded one again 3 s after that,
// docs/benchmarks.md 2026-12-02; under a quota a rank relieved of work is throttled less
// and looks faster). After a flap, a change is held by the dwell's hysteresis for
// flap_hold, doubled for each further flap (at most 16x), and each hold that passes
// twice over without a change halves it again.
//
// The hold applies only while the plan in force balances (offloads, replicas or prunes;
// a capacity cap, or the ownership a reshard left, runs all-local). A group running
// all-local balances a new straggler as usual: a 2x straggler on 2 ranks gains at most a
// third, which the dwell's 30% could hold off for minutes, and its blips are the
// marginal-straggler rule's to wait out. Calm ends a plan at once, whatever the dwell. A
// plan that moves units starts the history afresh: the plans before it ran on another
// ownership, so an all-local plan after a reshard does not undo the all-local plan before
// it. The caller starts afresh too (a new PlanFlaps) when an operator changes a setting:
// that is no noise.
//
//   PlanFlaps flaps;                                   // one per group
//   DwellOptions dwell = flaps.Dwell(options, now);    // plan with it
//   if (decided_a_change) flaps.Pushed(plan.blocks, moves_units, probed, options, now);
//
// Pure: the caller gives the monotonic time. Not thread-safe: the caller keeps one per
// group under its own lock.
#ifndef BALLAST_COORDINATOR_PLANNER_PLAN_FLAPS_H_
#define BALLAST_COORDINATOR_PLANNER_PLAN_FLAPS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "ballast/plan.h"
#include "coordinator/planner/group_planner.h"

namespace ballast::coordinator {

class PlanFlaps {
 public:
  // The most a hold grows: flap_hold times 2^kMaxDoublings.
  static constexpr int32_t kMaxDoublings = 4;

  // A plan with these blocks (`moves_units`: it reshards) was pushed at `now`, planned
  // with `base` (Dwell's). `deliberate`: it was chosen to be measured (the step
  // feedback's probe, or its way back), so it is recorded but never a flap. Returns
  // whether it undid the change before it (a flap): it restores the plan before the one
  // in force, or moves some rank's work back the way that change moved it, and the plan
  // in force had stood less than flap_hold beyond the hold in force (a change held by the
  // dwell is undone as soon as its hold ends, if noise made it).
  bool Pushed(const std::vector<BlockPlan>& blocks, bool moves_units, bool deliberate,
              const DwellOptions& base, absl::Duration now);
  // The dwell to plan with at `now`: `base`, with plan_dwell raised to the hold while the
  // group flaps and its plan in force balances. Decays the hold first.
  DwellOptions Dwell(const DwellOptions& base, absl::Duration now);
  // Flaps counted and not yet decayed (0: none).
  int32_t level() const { return level_; }
  // "plans undone soon after they changed: 2 flaps counted, so a change of a plan that
  // balances is held 1m by hysteresis 0.3" (empty with no flap), for explanations.
  std::string Describe(const DwellOptions& base) const;

 private:
  // flap_hold x 2^(level - 1), at most 2^kMaxDoublings x; zero at level 0.
  absl::Duration Hold(const DwellOptions& base) const;

  std::optional<std::vector<BlockPlan>> before_;  // blocks of the plan before the one in force
  std::optional<std::vector<BlockPlan>> in_force_;
  absl::Duration pushed_at_ = absl::ZeroDuration();    // of the plan in force
  absl::Duration quiet_since_ = absl::ZeroDuration();  // the last change, or decay
  int32_t level_ = 0;
};

}  // namespace ballast::coordinator

#endif  // BALLAST_COORDINATOR_PLANNER_PLAN_FLAPS_H_
