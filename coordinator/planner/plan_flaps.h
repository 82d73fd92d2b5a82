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
// The hold applies only while the plan in force balances (offloads, replicas or prunes; a
// capacity cap, or the ownership a reshard left, runs all-local): the dwell's 30% would
// hold off a new 2x straggler on 2 ranks (it gains at most a third) for minutes. Calm ends
// a plan at once, whatever the dwell. A group running all-local meets its flaps at the
// start instead: balancing that calm ended within flap_hold of its start (plus the hold in
// force) is a flap too (the caller says the group was judged calm), a blip balanced after
// it had passed, and while the group flaps a straggler must outlast the blips before
// balancing starts again (StartWait; the straggler judge waits it out). On an idle 2-core
// VM, a calm rank was 1.2-1.7x slower for 1-15 s at a time during minute-long slowdowns
// of the whole VM: a plan started for each spell and calm ended it within seconds, 10
// changes in 1,000 steps (docs/benchmarks.md, 2026-12-02). A straggler that lasts
// balances on its first start and is no flap; one that comes and goes within seconds is
// not worth a plan that takes a second to arrive. The wait is twice the longest blip
// counted (how long its balancing lasted: the reports' lag delays its start as much as
// its end), at most the hold: a straggler must outlast the blips this group has seen,
// not the hold. With the hold as the wait, a 2x quota straggler that came 3 s after a
// blip of 0.25 s ran unbalanced for 34 s, 165 steps (docs/benchmarks.md, 2026-12-03). The
// blips are remembered for kBlipMemory after the last, past the hold's decay (the wait
// then at most flap_hold): the VM's blips came a minute or more apart, after one flap's
// hold had decayed, so each cost a plan and its end (4 changes in 1,000 calm steps where
// the target is 2; docs/benchmarks.md, 2026-12-03 (later)). What it costs is that wait for
// a straggler that arrives within kBlipMemory of a blip (twice the blip, seconds). A
// plan that moves units starts the history afresh: the plans before it ran on another
// ownership, so an all-local plan after a reshard does not undo the all-local plan before
// it. The caller starts afresh too (a new PlanFlaps) when an operator changes a setting:
// that is no noise.
//
//   PlanFlaps flaps;                                   // one per group
//   flaps.Seed(group.plan.blocks);                     // the plan in force, once known
//   DwellOptions dwell = flaps.Dwell(options, now);    // plan with it
//   absl::Duration wait = flaps.StartWait(options);    // the judge waits a straggler out
//   if (decided_a_change) flaps.Pushed(plan.blocks, moves_units, probed, options, now, calm);
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
  // How many times the longest blip counted a straggler must last (StartWait): a spell a
  // little longer than the last is still waited out.
  static constexpr int32_t kBlipsOutlasted = 2;
  // How long after the last blip counted a straggler must still outlast the blips, once
  // the flaps have decayed to none.
  static constexpr absl::Duration kBlipMemory = absl::Minutes(10);

  // A plan with these blocks (`moves_units`: it reshards) was pushed at `now`, planned
  // with `base` (Dwell's). `deliberate`: it was chosen to be measured (the step
  // feedback's probe, or its way back; the offload check's), so it is recorded but never
  // a flap. Returns
  // whether it undid the change before it (a flap): it restores the plan before the one
  // in force, or moves some rank's work back the way that change moved it, and the plan
  // in force had stood less than flap_hold beyond the hold in force (a change held by the
  // dwell is undone as soon as its hold ends, if noise made it); or `calm` (the round
  // that decided it judged the group calm) and it ends balancing by speed (offloads,
  // prunes) that started less than that long ago: a blip. A start right after a blip is
  // not counted again. (Balancing ended otherwise, say because offloads stopped paying on
  // a link measured slow, is no blip: its straggler is still there. Nor are experts'
  // replicas: they follow token loads.)
  bool Pushed(const std::vector<BlockPlan>& blocks, bool moves_units, bool deliberate,
              const DwellOptions& base, absl::Duration now, bool calm);
  // The dwell to plan with at `now`: `base`, with plan_dwell raised to the hold while the
  // group flaps and its plan in force balances. Decays the hold first.
  DwellOptions Dwell(const DwellOptions& base, absl::Duration now);
  // How long a straggler must last before a group whose plan in force balances nothing by
  // speed (no offloads, no prunes) starts balancing: after a blip (balancing that calm
  // ended soon), kBlipsOutlasted times the longest blip counted, at most the hold (at
  // least flap_hold), until the flaps have decayed to none and kBlipMemory has passed
  // since the last blip, balancing outlasts the window, or a plan moves units; else
  // zero. Zero too while the plan in force was pushed deliberately: the offload check's
  // probe of a straggler without its offloads (or a step-feedback probe) measures a
  // straggler that outlasted the wait, and waiting it out again would end the probe with
  // "no straggler" and start balancing afresh after the wait, again and again (a 2x device
  // straggler after a blip: offloads and the probe's all-local every 2.5 s, 26 plan
  // changes in 500 steps; with the hold as the wait, unbalanced for 150 steps until it
  // turned chronic). Call after Dwell (which decays the hold) at the same time. The judge
  // drops it for a chronic straggler.
  absl::Duration StartWait(const DwellOptions& base) const;
  // The plan in force when this history starts, if no plan was pushed since (a fresh
  // PlanFlaps knows none, and a start from an unknown plan is no start of balancing).
  void Seed(const std::vector<BlockPlan>& in_force);
  // Flaps counted and not yet decayed (0: none).
  int32_t level() const { return level_; }
  // "plans undone soon after they changed: 2 flaps counted, so a change of a plan that
  // balances is held 1m by hysteresis 0.3" (and, after a blip, "..., and (balancing ended
  // by calm soon after it started: blips of up to 1.5s) a straggler must last 3s or turn
  // chronic before balancing starts"; once the flaps decayed, "blips of up to 1.5s within
  // the last 10m: a straggler must last 3s ..."; empty with neither), for explanations.
  std::string Describe(const DwellOptions& base) const;

 private:
  // flap_hold x 2^(level - 1), at most 2^kMaxDoublings x; zero at level 0.
  absl::Duration Hold(const DwellOptions& base) const;
  // kBlipsOutlasted x the longest blip, at most the hold or flap_hold, whichever is more:
  // StartWait where a wait applies.
  absl::Duration BlipWait(const DwellOptions& base) const;

  std::optional<std::vector<BlockPlan>> before_;  // blocks of the plan before the one in force
  std::optional<std::vector<BlockPlan>> in_force_;
  absl::Duration pushed_at_ = absl::ZeroDuration();  // of the plan in force
  // When the balancing by speed in force started (from a known plan that did not balance
  // by speed); none while the plan in force does not, after a reshard, or when its start
  // is unknown (before a first push or Seed).
  std::optional<absl::Duration> balancing_since_;
  bool ended_by_blip_ = false;  // the plan in force ended balancing in a blip
  // A blip was counted since the flaps last decayed to none, balancing last outlasted the
  // window or units last moved: starts are waited out (StartWait).
  bool blipped_ = false;
  // How long the longest of those blips balanced (from its start to the calm that ended
  // it); read only while blipped_.
  absl::Duration longest_blip_ = absl::ZeroDuration();
  absl::Duration last_blip_at_ = absl::ZeroDuration();  // when the last blip was counted
  bool probe_in_force_ = false;                         // the plan in force was pushed deliberately
  absl::Duration quiet_since_ = absl::ZeroDuration();   // the last change, or decay
  int32_t level_ = 0;
};

}  // namespace ballast::coordinator

#endif  // BALLAST_COORDINATOR_PLANNER_PLAN_FLAPS_H_
