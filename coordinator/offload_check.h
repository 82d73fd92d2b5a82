// OffloadCheck: whether a straggler's offloads make the step shorter than no offloads
// do, measured, not modelled; offloads that do not are refused.
//
// Why. The planner prices an offloaded unit at its bytes over the link, on its owner and
// its helper. Under a CPU quota the straggler is throttled in everything it does, its
// offload transfers too, and those land in the collectives, which no plan is priced by.
// In the GPT's interleaved run under a 2x quota (docs/benchmarks.md, 2026-12-02 (night))
// auto offloaded one unit in four of the straggler's blocks and its steps took 0.433-0.544 s
// against plain tensor parallelism's 0.395-0.417 s: Ballast made the job slower. The
// prediction of that plan was right once the plan ran (it reads the collectives measured
// under it), so the model learns nothing from being wrong beforehand. The measured step
// knows: this check compares the step under the planner's offloading plan with the step
// under its best plan without offloads, and keeps the faster.
//
// How, per group, for the rank the compute timers judge the straggler (the target):
//   - watch: the planner pushes a plan that offloads, and the workers run it;
//   - measure: the group's step under it, once every rank has run `min_steps` steps;
//   - compare: with a plan without offloads on the same ownership measured in the last
//     kBaselineFresh, every step of its median under this straggler (a group that ran
//     all-local a while before balancing, plain tensor parallelism held by an operator,
//     the refused plan before a recheck), against that: no probe;
//   - probe: else offloads refused, the planner's plan without them goes out (the
//     offloading one not kept by hysteresis: Verdict::undo), and its step is measured the
//     same way;
//   - judge: the offloads are allowed again if their step beat the one without by
//     `min_gain` (and the plan without them goes without hysteresis, too), else refused;
//     either verdict stands for `recheck_after`, then the next offloading plan is checked
//     again (the straggler may have changed). A probe not judged within `probe_timeout`
//     (the planner kept its plan, or plans kept changing before 16 steps ran) is dropped:
//     offloads allowed until the recheck;
//   - a refusal against a plan on another split (the probe's best plan without offloads
//     resharded a chronic straggler) says the reshard beat the offloads, not that they
//     lose to no offloads on their own split. It holds for the straggler it judged on
//     the reshard's split, and for any straggler once chronic (a reshard can answer it);
//     elsewhere (the units given back, another split, another straggler on the
//     reshard's split: a straggle the reshard did not relieve) offloads are allowed
//     until it is chronic (RefusalHolds). In the interleaved benchmark's device onsets,
//     such a refusal held on the even split for its 5 min, and 5 of 12 onsets ran plain
//     tensor parallelism until the reshard 18-20 steps in, where the others offloaded
//     from step 4-6; and where a blip of rank 0 at the calm segment's start had it
//     resharded, rank 1's onset on that split ran with no plan for its 60 steps
//     (docs/benchmarks.md, 2026-12-06 (e); now its reshard is not spaced from the move
//     made for rank 0: StragglerJudge::KindMeasuredChronic, 2026-12-06 (h)). What it does
//     not do: a reshard restarts the judge's count to chronic, so on a split the
//     planner resharded to that is not the probe's (another fingerprint), the refusal lapses until the straggler is chronic
//     again (reshard_after), and offloads on top of that reshard go unmeasured (for a
//     throttled rank DecisionLoop::RefusesOffloads refuses them anyway; a slower device
//     has no such refusal); two stragglers taking turns as the slowest on the probe's
//     split switch the refusal at each turn (the judged one's holds, the other's not); and
//     a split is told by every block's ownership, experts' too, so a probe's plan that
//     moved only experts counts as a reshard. None seen in the runs of 2026-12-06 (e),
//     whose onsets changed plans 3 times (offload, reshard, all-local on it).
// The verdict is the group's: it outlives a change of target (two stragglers that swap
// places must not buy a probe each time); none for kAbsentFor starts afresh. An
// operator's hold or a cordon measures nothing, and drops a probe (the held plan is not
// the planner's; only transfers can empty a cordoned device, and the coordinator then
// refuses nothing). Refused, the planner still prunes as the mode allows and reshards a
// chronic straggler (a reshard moves units once, not every step). Not for blocks of
// experts (their replicas are judged by their loads: expert_plan.h).
//
// It compares steps alone: a plan without offloads that prunes (mode auto, where the
// planner found the prunes worth their accuracy weight) is judged by its step too.
//
// What it costs: one probe a straggler with no step without offloads just before (and
// one each recheck_after where offloads were kept), that is two plan changes and
// min_steps steps without offloads; where offloads pay, those steps run slower by what
// the offloads gain. A chronic straggler's probe may reshard (the best plan without
// offloads), and the units stay moved whatever the verdict.
//
// Rounds must come while the group is planned: the decision loop forgets a group's
// check while its job is paused or in mode off (its steps then are no straggler's). While it
// probes, the step feedback (when on) holds: each loop must judge its own plan.
//
//   OffloadCheck check(&clock, options);
//   OffloadCheck::Verdict v = check.Update(ref, round, lines);  // v.refuse: plan without
//
// Thread-safe. Keyed by the group's incarnation, like the judge.
#ifndef BALLAST_COORDINATOR_OFFLOAD_CHECK_H_
#define BALLAST_COORDINATOR_OFFLOAD_CHECK_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "coordinator/group_registry.h"

namespace ballast::coordinator {

struct OffloadCheckOptions {
  // Steps every rank runs under a plan before its step is judged, >= 1 (the registry's
  // median covers the last 16).
  int32_t min_steps = 16;
  // Offloads are kept if their step beat the step without them by this share, in [0, 1):
  // 16-step medians under a quota move 2.5% from window to window.
  double min_gain = 0.03;
  // A probe must be judged within this, > 0 (the planner's plan without offloads pushed,
  // run and measured); else it is dropped, and offloads allowed until recheck_after.
  absl::Duration probe_timeout = absl::Minutes(1);
  // How long a verdict stands, > 0.
  absl::Duration recheck_after = absl::Minutes(5);
};

// INVALID_ARGUMENT naming the field.
absl::Status ValidateOffloadCheckOptions(const OffloadCheckOptions& options);

class OffloadCheck {
 public:
  // What one planning round saw of a group.
  struct Round {
    // The rank the compute timers judge the group's straggler (the slowest, the group
    // not calm, in any mode: plain TP under observe is a step to compare with); -1: none.
    int32_t straggler = -1;
    // The straggler is chronic for planning (straggler_judge.h): the planner may move its
    // units now, as a probe's plan without offloads may have (RefusalHolds).
    bool chronic = false;
    // An operator holds the group's plan or cordons one of its ranks: no offloads are
    // judged and a probe is dropped (a held plan without offloads is still a step to
    // compare with). (A flap hold does not stop a probe: Verdict::undo skips the
    // hysteresis.)
    bool held = false;
    int64_t plan_version = 0;       // the plan the workers run
    int64_t published_version = 0;  // the newest plan pushed
    bool offloads = false;          // the newest plan pushed offloads some unit
    uint64_t ownership = 0;         // a fingerprint of the ownership it runs on
    // The group's step under the plan the workers run, once every rank ran min_steps
    // steps under it (group_figures.h: MeasuredStep); <= 0 until then.
    double step_seconds = 0;
  };

  // `clock` must outlive this.
  OffloadCheck(Clock* clock, const OffloadCheckOptions& options)
      : clock_(clock), options_(options) {}

  struct Verdict {
    // Plan this round without offloads.
    bool refuse = false;
    // The plan pushed must not be kept by hysteresis (GroupPlannerInput::
    // in_force_measured_worse): it offloads while refused, or it is the probe's, measured
    // slower than the offloads it replaced.
    bool undo = false;
    // `refuse` differs from the last round's: a plan change this round is the check's,
    // chosen to be measured (no flap: plan_flaps.h).
    bool changed = false;
    // A probe is under way: another loop on the measured step must not change the plan
    // (step_feedback.h: held).
    bool probing = false;
  };
  // Judges the round, appending a line on what it did and why to `lines`.
  Verdict Update(const GroupRef& ref, const Round& round, std::vector<std::string>& lines)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Forget(const GroupKey& key) ABSL_LOCKS_EXCLUDED(mu_);
  const OffloadCheckOptions& options() const { return options_; }

  // A target judged calm for this long is forgotten: a quota straggler relieved of units
  // can look calm for seconds while still contended (straggler_judge.h).
  static constexpr absl::Duration kAbsentFor = absl::Seconds(30);
  // How recent a step measured without offloads must be to spare a probe.
  static constexpr absl::Duration kBaselineFresh = absl::Minutes(1);
  // The steps a measured step is the median of (the registry's window, group_registry.h).
  static constexpr int32_t kStepWindow = 16;

 private:
  enum class Phase {
    kWatch,    // waiting for an offloading plan to measure
    kMeasure,  // the offloading plan runs: waiting for its step
    kProbe,    // offloads refused: waiting for the plan without them, and its step
    kKept,     // measured faster: allowed until `until`
    kRefused,  // measured no faster: refused until `until`
  };
  struct GroupState {
    uint64_t incarnation = 0;
    int32_t target = -1;
    absl::Duration target_since;  // first judged the straggler (since the last change)
    Phase phase = Phase::kWatch;
    // The last step measured under a plan without offloads, every step of its median
    // while the target straggled, and when: what a plan that offloads is judged against
    // while fresh.
    double baseline_step = 0;
    absl::Duration baseline_at;
    uint64_t baseline_ownership = 0;
    double offload_step = 0;  // kProbe: the step of the offloading plan
    // The splits the offloads and the plan without them ran on when judged (ownership
    // fingerprints), and the target then: where a refusal holds (RefusalHolds).
    uint64_t offload_ownership = 0;
    uint64_t without_ownership = 0;
    int32_t judged_target = -1;
    int64_t probe_from = 0;  // kProbe: the newest plan when offloads were refused
    absl::Duration probe_set_at;
    absl::Duration until;  // kKept, kRefused
    std::string why;       // kKept, kRefused: the steps measured
    std::optional<absl::Duration> absent_since;
    bool refused = false;  // the last round's Verdict::refuse
    bool undo = false;     // this round's Verdict::undo, for a probe judged allowed
  };
  // This round's refusal, with its line.
  bool Judge(GroupState& g, const Round& round, std::vector<std::string>& lines)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The verdict on g.offload_step against `without` (measured `when`: "" for the probe's
  // plan, now; on the split `ownership`), with its line; whether offloads are refused.
  bool Judged(GroupState& g, double without, uint64_t ownership, const std::string& when,
              absl::Duration now, std::vector<std::string>& lines)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a standing refusal holds this round. One against a plan on another split (a
  // reshard) holds for the straggler it judged on that split, and for any straggler once
  // chronic (a reshard can answer it); not elsewhere before.
  static bool RefusalHolds(const GroupState& g, const Round& round);

  Clock* const clock_;
  const OffloadCheckOptions options_;
  absl::Mutex mu_;
  std::map<GroupKey, GroupState> groups_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ballast::coordinator

#endif  // BALLAST_COORDINATOR_OFFLOAD_CHECK_H_
