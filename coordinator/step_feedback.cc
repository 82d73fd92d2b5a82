#include "coordinator/step_feedback.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ballast::coordinator {

absl::Status ValidateStepFeedbackOptions(const StepFeedbackOptions& o) {
  if (!(o.gain > 0 && o.gain <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("step feedback gain ", o.gain, " out of range (0, 1]"));
  }
  if (!(o.deadband >= 0 && o.deadband < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("step feedback deadband ", o.deadband, " out of range [0, 1)"));
  }
  if (!(o.max_factor >= 1 && std::isfinite(o.max_factor))) {
    return absl::InvalidArgumentError(
        absl::StrCat("step feedback max_factor ", o.max_factor, " must be finite and >= 1"));
  }
  if (o.settle_rounds < 1 || o.backoff_rounds < 0) {
    return absl::InvalidArgumentError(absl::StrCat("step feedback settle_rounds ", o.settle_rounds,
                                                   " must be >= 1 and ", "backoff_rounds ",
                                                   o.backoff_rounds, " >= 0"));
  }
  return absl::OkStatus();
}

std::vector<double> StepFeedback::Update(const GroupRef& ref, const Round& round,
                                         std::vector<std::string>& lines) {
  const size_t size = round.compute_seconds.size();
  absl::MutexLock lock(&mu_);
  GroupState& g = groups_[ref.key];
  if (g.incarnation != ref.incarnation || g.factors.size() != size) {
    g = GroupState{.incarnation = ref.incarnation, .factors = std::vector<double>(size, 1.0)};
  }
  auto describe = [&](const char* verdict) {
    std::string factors;
    for (size_t r = 0; r < size; ++r) {
      if (g.factors[r] != 1.0) absl::StrAppendFormat(&factors, " rank %d x%.3f", r, g.factors[r]);
    }
    lines.push_back(absl::StrCat("step feedback: ", verdict,
                                 factors.empty() ? "; no correction" : ";", factors));
  };
  if (round.plan_version != g.plan_version) {
    g.plan_version = round.plan_version;
    g.rounds_under_plan = 0;
  }
  if (++g.rounds_under_plan <= options_.settle_rounds || !(round.step_seconds > 0) ||
      round.collective_seconds.size() != size || size < 2) {
    describe("waiting for steps under the plan in force");
    return g.factors;
  }
  const double step = round.step_seconds;
  if (g.pending) {
    g.pending = false;
    if (step > g.step_before * (1 + options_.deadband)) {
      g.factors = g.before;
      g.backoff_left = options_.backoff_rounds;
      describe(absl::StrFormat("the step rose from %.4f s to %.4f s after the last correction: "
                               "undone, none for %d rounds",
                               g.step_before, step, options_.backoff_rounds)
                   .c_str());
      return g.factors;
    }
    describe(absl::StrFormat("the step went from %.4f s to %.4f s after the last correction: kept",
                             g.step_before, step)
                 .c_str());
  }
  if (g.backoff_left > 0) {
    --g.backoff_left;
    describe("backing off");
    return g.factors;
  }
  double latest = -1;
  size_t late = 0;
  bool all_measured = true;
  for (size_t r = 0; r < size; ++r) all_measured &= round.collective_seconds[r] >= 0;
  if (!all_measured) {
    describe("a rank has no collectives measured");
    return g.factors;
  }
  const double most_waiting =
      *std::max_element(round.collective_seconds.begin(), round.collective_seconds.end());
  for (size_t r = 0; r < size; ++r) {
    const double lateness = most_waiting - round.collective_seconds[r];
    if (lateness > latest) {
      latest = lateness;
      late = r;
    }
  }
  if (latest <= options_.deadband * step) {
    describe(absl::StrFormat("the latest rank (%d) is %.4f s late at the collectives, within "
                             "%.0f%% of the %.4f s step: balanced",
                             late, latest, 100 * options_.deadband, step)
                 .c_str());
    return g.factors;
  }
  g.before = g.factors;
  g.step_before = step;
  g.pending = true;
  const double compute = std::max(round.compute_seconds[late], 1e-9);
  g.factors[late] =
      std::min(options_.max_factor, g.factors[late] * (1 + options_.gain * latest / compute));
  const double least = *std::min_element(g.factors.begin(), g.factors.end());
  for (double& f : g.factors) f /= least;
  describe(absl::StrFormat("rank %d is %.4f s late at the collectives (the others wait for it) "
                           "over %.4f s of its compute: its speed corrected",
                           late, latest, round.compute_seconds[late])
               .c_str());
  return g.factors;
}

void StepFeedback::Forget(const GroupKey& key) {
  absl::MutexLock lock(&mu_);
  groups_.erase(key);
}

}  // namespace ballast::coordinator
