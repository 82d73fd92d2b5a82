// StepFeedback: a closed loop on the step a plan gets, beside the straggler judgment.
//
// The planner balances what the compute timers say. A rank can be later than its timers
// show: a CPU quota throttles it inside its collectives, a co-tenant delays its launches,
// and the others then wait for it at every all-reduce. The rank the others wait for waits
// least itself, so per-step totals the reports already carry show it without a shared
// clock: rank r is late by  lateness_r = max_j collective_j - collective_r  seconds a step
// (collective seconds: each rank's median time in its collectives, waiting included).
//
// Each planning round, once the plan in force has run `settle_rounds` rounds:
//   - the last correction is judged first: if the measured step rose beyond the deadband
//     since it was made, it is undone and the loop backs off for `backoff_rounds`;
//     otherwise it is kept (the step improved, or held);
//   - then, if the latest rank is late by more than `deadband` of the step, its factor
//     grows by gain x lateness / its compute (the share of its time the timers miss), up
//     to max_factor; factors are relative (the least is 1).
// The planner multiplies each rank's seconds per unit by its factor: the compute-speed
// estimates stay the prior, the feedback corrects them. Rounds without a measured step or
// collectives change nothing.
//
//   StepFeedback feedback(options);
//   std::vector<double> factor = feedback.Update(ref, round, lines);  // per rank, >= 1
//
// Thread-safe. Keyed by the group's incarnation, like the judge.
#ifndef BALLAST_COORDINATOR_STEP_FEEDBACK_H_
#define BALLAST_COORDINATOR_STEP_FEEDBACK_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/group_registry.h"

namespace ballast::coordinator {

struct StepFeedbackOptions {
  double gain = 0.5;            // of the lateness corrected in one round, in (0, 1]
  double deadband = 0.05;       // lateness, and a step's rise, below this share of it is noise
  double max_factor = 4.0;      // >= 1
  int32_t settle_rounds = 2;    // rounds a new plan runs before its step is judged, >= 1
  int32_t backoff_rounds = 10;  // rounds without a correction after one was undone, >= 0
};

// INVALID_ARGUMENT naming the field.
absl::Status ValidateStepFeedbackOptions(const StepFeedbackOptions& options);

class StepFeedback {
 public:
  // What one planning round saw of a group, per rank in [0, size).
  struct Round {
    std::vector<double> compute_seconds;     // block compute a step (latest report)
    std::vector<double> collective_seconds;  // median collective seconds a step; < 0: none
    double step_seconds = 0;                 // the measured step; <= 0: none yet
    int64_t plan_version = 0;                // the plan the workers run
  };

  explicit StepFeedback(const StepFeedbackOptions& options) : options_(options) {}

  // Judges the round and returns every rank's factor (sized like the round's vectors),
  // appending what it did and why to `lines`.
  std::vector<double> Update(const GroupRef& ref, const Round& round,
                             std::vector<std::string>& lines) ABSL_LOCKS_EXCLUDED(mu_);
  void Forget(const GroupKey& key) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct GroupState {
    uint64_t incarnation = 0;
    std::vector<double> factors;
    int64_t plan_version = -1;
    int32_t rounds_under_plan = 0;
    // The last correction, until judged: the factors before it and the step it was made at.
    bool pending = false;
    std::vector<double> before;
    double step_before = 0;
    int32_t backoff_left = 0;
  };

  const StepFeedbackOptions options_;
  absl::Mutex mu_;
  std::map<GroupKey, GroupState> groups_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ballast::coordinator

#endif  // BALLAST_COORDINATOR_STEP_FEEDBACK_H_
