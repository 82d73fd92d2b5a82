// StepFeedback: a closed loop on the step a plan gets, beside the straggler judgment.
//
// Why. The planner balances what the compute timers say, and a straggler can cost more
// than its timers show. A rank under a CPU quota is throttled wherever it runs: in its
// collectives, in packing the weights it offloads, in its optimizer; the timers see the
// part that lands in block compute. Under the e2e benchmark's 2x quota, auto left the
// straggler 33 of 90 units, where static plans leaving it 30 or 18 ran 5% and 10%
// faster (docs/benchmarks.md, 2026-11-29). No model of the compute prices that; the
// measured step does. With this loop on, the same job's steps were 5-12% shorter in one
// hour's runs; under a slower device, which the timers see whole, its probes made them
// 6-8% longer. In a later hour's 1,000-step runs it was no better than auto alone under
// the quota (a probe judged against a window the VM slowed by 18% is kept by noise),
// though once it held the quota oracle's step for 270 steps (2026-11-29 (b)). So it is an
// operator's choice.
//
// Why not the collectives' skew. The first version corrected the rank the others waited
// for, as told by per-step collective totals (the rank that waits least is the late one).
// Under a quota the straggler spends *more* time in its collectives than its peer (it is
// throttled inside them), so the sign was wrong as often as right; the correction only
// grew, and it ratcheted the two ranks against each other: 155 plan changes in 1,000
// steps, 12% slower than without it. So this loop judges by the step alone, and only ever
// corrects the rank the compute timers already judge the straggler (the prior): its
// target does not move with the plans it causes, and a calm group is left alone.
//
// How. Extremum seeking, one factor on the straggler's seconds per unit:
//   - measure: the group's step under the plan the workers run, once every rank has run
//     `min_steps` steps under it (GroupRegistry keeps those samples per plan);
//   - probe: raise the factor by `probe` (the planner then moves more off the straggler);
//     a factor the planner does not act on within `probe_timeout` grows again, up to
//     `max_factor`, as the job's hysteresis may hold a small one;
//   - judge: the step under the new plan is kept if it beat the one before by `min_gain`
//     (a share; 16-step medians under a quota move 2.5% from window to window), and the
//     loop probes on; otherwise the factor goes back and the loop settles. The planner
//     may keep a plan that measured less than min_gain slower than the one before; one
//     slower by min_gain or more goes back too (Correction::undo). A climb that gained
//     nothing also tries one step down;
//   - settle: no probe for `backoff`, doubled at each settle without a gain (at most 8x);
//     a step that drifts by more than `drift` from the settled one re-arms it at once
//     (the straggler changed).
//   - reset: the prior's straggler changes, or the group turns calm: the factor is 1
//     again. No probe while the plan is held (a flap hold, an operator's hold): the hold
//     would swallow it. A chronic straggler is probed too: the factor prices its reshard
//     as it prices its offloads (a reshard is priced over reshard_after, so a probe
//     moves units only where that pays).
// Each probe costs a plan change, and so does a failed one's way back; the backoff bounds
// how often a settled group pays them (measured: 8.7 changes per 1,000 steps with it on
// against 4.6 without, in 650-step runs).
//
//   StepFeedback feedback(&clock, options);
//   StepFeedback::Correction c = feedback.Update(ref, round, lines);  // c.factors[r] >= 1
//
// Thread-safe. Keyed by the group's incarnation, like the judge.
#ifndef BALLAST_COORDINATOR_STEP_FEEDBACK_H_
#define BALLAST_COORDINATOR_STEP_FEEDBACK_H_

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

struct StepFeedbackOptions {
  double probe = 0.25;      // a probe raises the factor by this share, in (0, 1]
  double min_gain = 0.04;   // a probe is kept if the step fell by this share, in [0, 1)
  double drift = 0.15;      // a settled step moving by this share re-arms probes, (0, 1)
  double max_factor = 4.0;  // >= 1
  int32_t min_steps = 16;   // steps every rank runs under a plan before it is judged, >= 1
  absl::Duration probe_timeout = absl::Seconds(5);  // > 0
  absl::Duration backoff = absl::Minutes(2);        // >= 0
};

// INVALID_ARGUMENT naming the field.
absl::Status ValidateStepFeedbackOptions(const StepFeedbackOptions& options);

class StepFeedback {
 public:
  // What one planning round saw of a group.
  struct Round {
    int32_t size = 0;
    // The rank the compute timers judge the group's straggler (the slowest, the group
    // not calm); -1: none.
    int32_t straggler = -1;
    bool held = false;              // the group's plan is held (a flap hold, an operator's hold)
    int64_t plan_version = 0;       // the plan the workers run
    int64_t published_version = 0;  // the newest plan pushed (the workers may not run it yet)
    // The group's step under the plan the workers run: its slowest rank's median over the
    // last 16 steps it ran under it; <= 0 until every rank has run min_steps under it.
    double step_seconds = 0;
  };

  // `clock` must outlive this.
  StepFeedback(Clock* clock, const StepFeedbackOptions& options)
      : clock_(clock), options_(options) {}

  struct Correction {
    // Every rank's factor on its seconds per unit (`round.size` of them, 1 but for the
    // straggler's).
    std::vector<double> factors;
    // They differ from the last round's: a plan change this round is a probe's, or its
    // way back (chosen to be measured, so no flap: plan_flaps.h).
    bool moved = false;
    // They moved, or the loop changed what it does (a probe judged, a settle): worth a
    // line in the log.
    bool news = false;
    // A probe failed with its plan measured slower than the plan before it by min_gain or
    // more: this round's plan must not keep the probe's by hysteresis (GroupPlannerInput::
    // in_force_measured_worse). (The ownership a probe's reshard moved stays: the way back
    // prices no reshard of its own.)
    bool undo = false;
  };
  // Judges the round, appending what it did and why to `lines`.
  Correction Update(const GroupRef& ref, const Round& round, std::vector<std::string>& lines)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Forget(const GroupKey& key) ABSL_LOCKS_EXCLUDED(mu_);
  const StepFeedbackOptions& options() const { return options_; }

 private:
  enum class Phase {
    kMeasure,  // waiting for the step under the plan in force
    kProbe,    // a probe's factor is set; waiting for its plan and that plan's step
    kSettled,  // no probe before next_probe
  };
  struct GroupState {
    uint64_t incarnation = 0;
    int32_t target = -1;
    double factor = 1;
    Phase phase = Phase::kMeasure;
    // The step the next probe is judged against, and the plan it was measured under.
    double base_step = 0;
    int64_t base_version = 0;
    // The probe in flight: the factor before it, its direction, the newest plan when it
    // was set (a plan published after it is the probe's) and when.
    double before = 1;
    bool up = true;
    int64_t probe_from = 0;
    absl::Duration probe_set_at;
    bool gained_this_climb = false;
    bool resume = false;  // a climb kept under a hold: the next probe goes on its way
    bool undo = false;    // this round's Correction::undo
    std::optional<absl::Duration> absent_since;  // the target judged calm since
    int32_t settles = 0;  // settles in a row without a gain (the backoff doubles)
    absl::Duration next_probe;
    std::vector<double> returned;  // the factors of the last round
  };
  std::vector<double> Judge(GroupState& g, const Round& round, std::vector<std::string>& lines)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // A probe: the factor moved by `options_.probe` up or down, `from_version` the newest
  // plan then.
  void StartProbe(GroupState& g, bool up, int64_t from_version, absl::Duration now);
  // No probe for the backoff (doubled per settle without a gain).
  void Settle(GroupState& g, absl::Duration now);

  Clock* const clock_;
  const StepFeedbackOptions options_;
  absl::Mutex mu_;
  std::map<GroupKey, GroupState> groups_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ballast::coordinator

#endif  // BALLAST_COORDINATOR_STEP_FEEDBACK_H_
