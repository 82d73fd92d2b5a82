#include "coordinator/step_feedback.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ballast::coordinator {
namespace {

// The most the backoff doubles: backoff x 2^3.
constexpr int32_t kMaxBackoffDoublings = 3;
// A straggler judged calm for less than this keeps its state: a quota straggler relieved
// of units can look calm for seconds while still contended (straggler_judge.h), and
// forgetting it would re-probe from scratch each time it came back.
constexpr absl::Duration kAbsentFor = absl::Seconds(30);

}  // namespace

absl::Status ValidateStepFeedbackOptions(const StepFeedbackOptions& o) {
  if (!(o.probe > 0 && o.probe <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("step feedback probe ", o.probe, " out of range (0, 1]"));
  }
  if (!(o.min_gain >= 0 && o.min_gain < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("step feedback min_gain ", o.min_gain, " out of range [0, 1)"));
  }
  if (!(o.drift > 0 && o.drift < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("step feedback drift ", o.drift, " out of range (0, 1)"));
  }
  if (!(o.max_factor >= 1 && std::isfinite(o.max_factor))) {
    return absl::InvalidArgumentError(
        absl::StrCat("step feedback max_factor ", o.max_factor, " must be finite and >= 1"));
  }
  if (o.min_steps < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("step feedback min_steps ", o.min_steps, " must be >= 1"));
  }
  if (o.probe_timeout <= absl::ZeroDuration() || o.backoff < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("step feedback probe_timeout ", absl::FormatDuration(o.probe_timeout),
                     " must be > 0 and backoff ", absl::FormatDuration(o.backoff), " >= 0"));
  }
  return absl::OkStatus();
}

void StepFeedback::StartProbe(GroupState& g, bool up, int64_t from_version, absl::Duration now) {
  g.phase = Phase::kProbe;
  g.up = up;
  g.before = g.factor;
  g.factor = up ? std::min(options_.max_factor, g.factor * (1 + options_.probe))
                : std::max(1.0, g.factor / (1 + options_.probe));
  g.probe_from = from_version;
  g.probe_set_at = now;
}

void StepFeedback::Settle(GroupState& g, absl::Duration now) {
  g.phase = Phase::kSettled;
  if (g.gained_this_climb) g.settles = 0;
  g.next_probe = now + options_.backoff * (int64_t{1} << std::min(g.settles, kMaxBackoffDoublings));
  if (!g.gained_this_climb) ++g.settles;
}

StepFeedback::Correction StepFeedback::Update(const GroupRef& ref, const Round& round,
                                              std::vector<std::string>& lines) {
  absl::MutexLock lock(&mu_);
  GroupState& g = groups_[ref.key];
  if (g.incarnation != ref.incarnation) g = GroupState{.incarnation = ref.incarnation};
  std::vector<double> returned = std::move(g.returned);
  if (returned.size() != static_cast<size_t>(std::max(round.size, 0))) {
    returned.assign(std::max(round.size, 0), 1.0);  // a new group runs uncorrected
  }
  const Phase phase = g.phase;
  const size_t first_line = lines.size();
  g.undo = false;
  Correction c{.factors = Judge(g, round, lines)};
  c.undo = g.undo;
  c.moved = returned != c.factors;
  // Every round says one line; more (a drift, a straggler gone) are news too.
  c.news = c.moved || g.phase != phase || lines.size() > first_line + 1;
  g.returned = c.factors;
  return c;
}

std::vector<double> StepFeedback::Judge(GroupState& g, const Round& round,
                                        std::vector<std::string>& lines) {
  const size_t size = static_cast<size_t>(std::max(round.size, 0));
  std::vector<double> factors(size, 1.0);
  const absl::Duration now = clock_->Monotonic();
  if (round.straggler < 0 && g.target >= 0) {
    // Calm by the timers: no correction (the planner runs all-local), but the state is
    // kept for the straggler's return, a while.
    if (!g.absent_since.has_value()) g.absent_since = now;
    if (now - *g.absent_since < kAbsentFor) {
      lines.push_back(absl::StrCat("step feedback: no straggler this round; rank ", g.target,
                                   "'s correction is kept for its return"));
      return factors;
    }
  }
  if (round.straggler != g.target) {
    if (g.target >= 0 && g.factor != 1) {
      lines.push_back(absl::StrCat("step feedback: rank ", g.target,
                                   " is no longer judged the straggler: its correction ends"));
    }
    // The backoff stays: a target that comes and goes must not buy a probe each time.
    g = GroupState{.incarnation = g.incarnation,
                   .target = round.straggler,
                   .settles = g.settles,
                   .next_probe = g.next_probe};
  } else if (g.absent_since.has_value()) {
    g.absent_since.reset();
    // Back after a calm spell: the plans meanwhile were not a probe's.
    if (g.phase == Phase::kProbe) g.factor = g.before;
    g.phase = Phase::kMeasure;
  }
  if (g.target < 0 || static_cast<size_t>(g.target) >= size) {
    lines.push_back("step feedback: no straggler, nothing to correct");
    return factors;
  }
  const int32_t t = g.target;
  auto say = [&](const std::string& what) {
    lines.push_back(
        absl::StrFormat("step feedback: rank %d's seconds per unit x%.3f; %s", t, g.factor, what));
    factors[t] = g.factor;
    return factors;
  };
  const bool measured = round.step_seconds > 0;
  const double step = round.step_seconds;
  const int64_t version = round.plan_version;

  // A plan newer than any when the probe was set is the planner's answer to it.
  const int64_t newest = std::max(version, round.published_version);
  if (g.phase == Phase::kProbe) {
    if (round.published_version <= g.probe_from) {
      if (round.held) {  // an operator's hold came first: the probe is moot
        g.factor = g.before;
        g.phase = Phase::kMeasure;
        return say("the plan is held: the probe is dropped");
      }
      if (now - g.probe_set_at < options_.probe_timeout) {
        return say("probing: waiting for the planner's plan");
      }
      // The planner did not act on the probe: the job's hysteresis may hold a small one.
      if (g.up && g.factor < options_.max_factor) {
        g.factor = std::min(options_.max_factor, g.factor * (1 + options_.probe));
        g.probe_set_at = now;
        return say("the planner kept its plan: probing further");
      }
      g.factor = g.before;
      Settle(g, now);
      return say("the planner kept its plan: the probe is dropped");
    }
    if (version <= g.probe_from) return say("probing: waiting for the workers to run its plan");
    if (!measured) return say("probing: waiting for steps under the new plan");
    if (step < g.base_step * (1 - options_.min_gain)) {
      const std::string why =
          absl::StrFormat("the probe's plan ran %.4f s against %.4f s: kept", step, g.base_step);
      g.gained_this_climb = true;
      g.base_step = step;
      g.base_version = version;
      const bool at_bound = g.up ? g.factor >= options_.max_factor : g.factor <= 1;
      if (at_bound) {
        Settle(g, now);
        return say(absl::StrCat(why, "; settled"));
      }
      if (round.held) {  // probe on, the same way, once it may
        g.phase = Phase::kSettled;
        g.next_probe = now;
        g.resume = true;
        return say(absl::StrCat(why, "; the next probe waits for the hold"));
      }
      StartProbe(g, g.up, newest, now);
      return say(absl::StrCat(why, "; probing on"));
    }
    // Slower by as much as a kept probe must gain: the plan before it goes back too.
    // Planned with the factor before the probe, that plan is the one the planner would
    // pick again, but against the probe's plan in force it predicts too little gain to
    // beat the hysteresis, and a failed probe's plan ran on (the e2e quota run: 0.1667 s a
    // step against 0.1411 s, for the rest of the run).
    // (Probing down, the down probe's plan goes out the same way, without hysteresis.)
    // Said once, for this round: a round that then plans nothing (a block with no
    // estimate at all) leaves the probe's plan to the planner.
    g.undo = step >= g.base_step * (1 + options_.min_gain);
    const std::string why = absl::StrFormat(
        "the probe's plan ran %.4f s against %.4f s, not %.0f%% faster: the factor goes back%s",
        step, g.base_step, 100 * options_.min_gain,
        g.undo ? ", and no hysteresis keeps the probe's plan" : "");
    g.factor = g.before;
    // A climb that gained nothing tries the other way once, if there is one.
    if (g.up && !g.gained_this_climb && g.factor > 1 && !round.held) {
      StartProbe(g, /*up=*/false, newest, now);
      return say(absl::StrCat(why, "; probing down"));
    }
    Settle(g, now);
    return say(absl::StrCat(why, "; settled"));
  }

  if (g.phase == Phase::kMeasure) {
    if (!measured) return say("waiting for steps under the plan in force");
    g.base_step = step;
    g.base_version = version;
    g.phase = Phase::kSettled;  // next_probe: now at first, else as the last settle set it
  } else if (version != g.base_version) {
    // The planner changed the plan by itself (new estimates): measure it afresh.
    if (!measured) {
      g.phase = Phase::kMeasure;
      return say("waiting for steps under the plan in force");
    }
    g.base_step = step;
    g.base_version = version;
  } else if (measured && std::abs(step - g.base_step) > options_.drift * g.base_step) {
    lines.push_back(absl::StrFormat(
        "step feedback: the step moved from %.4f s to %.4f s under the same plan: probing "
        "again",
        g.base_step, step));
    g.base_step = step;
    g.settles = 0;
    g.next_probe = now;
  }
  if (round.held) return say("the plan is held: no probe until the hold ends");
  if (now < g.next_probe) {
    return say(absl::StrCat("settled at a step of ", absl::StrFormat("%.4f", g.base_step),
                            " s; next probe in ", absl::FormatDuration(g.next_probe - now)));
  }
  // A new climb goes up, or down from the bound; a climb a hold paused goes on its way.
  const bool up = g.resume ? g.up : g.factor < options_.max_factor;
  if (!g.resume) g.gained_this_climb = false;
  g.resume = false;
  if (!up && g.factor <= 1) {  // max_factor 1: nothing to probe
    Settle(g, now);
    return say("max_factor is 1: nothing to probe");
  }
  StartProbe(g, up, newest, now);
  return say(absl::StrFormat("probing: the step is %.4f s under the plan in force", g.base_step));
}

void StepFeedback::Forget(const GroupKey& key) {
  absl::MutexLock lock(&mu_);
  groups_.erase(key);
}

}  // namespace ballast::coordinator
