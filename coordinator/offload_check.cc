#include "coordinator/offload_check.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/duration_text.h"

namespace ballast::coordinator {

absl::Status ValidateOffloadCheckOptions(const OffloadCheckOptions& o) {
  if (o.min_steps < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("offload check min_steps ", o.min_steps, " must be >= 1"));
  }
  if (!(o.min_gain >= 0 && o.min_gain < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("offload check min_gain ", o.min_gain, " out of range [0, 1)"));
  }
  if (o.probe_timeout <= absl::ZeroDuration() || o.recheck_after <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("offload check probe_timeout ", absl::FormatDuration(o.probe_timeout),
                     " and recheck_after ", absl::FormatDuration(o.recheck_after), " must be > 0"));
  }
  return absl::OkStatus();
}

OffloadCheck::Verdict OffloadCheck::Update(const GroupRef& ref, const Round& round,
                                           std::vector<std::string>& lines) {
  absl::MutexLock lock(&mu_);
  GroupState& g = groups_[ref.key];
  if (g.incarnation != ref.incarnation) g = GroupState{.incarnation = ref.incarnation};
  g.undo = false;
  const bool refuse = Judge(g, round, lines);
  const Verdict v{.refuse = refuse,
                  .undo = (refuse && round.offloads) || g.undo,
                  .changed = refuse != g.refused,
                  .probing = g.phase == Phase::kProbe};
  g.refused = refuse;
  return v;
}

bool OffloadCheck::Judge(GroupState& g, const Round& round, std::vector<std::string>& lines) {
  const absl::Duration now = clock_->Monotonic();
  const bool standing = (g.phase == Phase::kKept || g.phase == Phase::kRefused) && now < g.until;
  if (round.straggler < 0) {
    if (g.target < 0) {
      lines.push_back("offload check: no straggler, nothing to check");
      return false;
    }
    // No straggler (the timers judge the group calm, or no rank straggling): the
    // verdict is kept for the straggler's return, a while; a measurement in flight is
    // not (the plans meanwhile are not the ones it measures).
    if (!g.absent_since.has_value()) g.absent_since = now;
    if (now - *g.absent_since < kAbsentFor) {
      if (!standing) g.phase = Phase::kWatch;
      const bool refused = standing && g.phase == Phase::kRefused;
      const bool holds = refused && RefusalHolds(g, round);
      lines.push_back(absl::StrCat("offload check: no straggler this round; rank ", g.target,
                                   "'s verdict is kept for its return",
                                   refused && !holds ? " (a refusal against a reshard, which "
                                                       "does not hold on this split)"
                                                     : ""));
      return holds;
    }
    lines.push_back(absl::StrCat("offload check: rank ", g.target, " not straggling for ",
                                 absl::FormatDuration(kAbsentFor), ": its check ends"));
    g = GroupState{.incarnation = g.incarnation, .refused = g.refused};
    return false;
  }
  // Back from a calm spell: its steps were not the straggler's, and the straggler may
  // not be as slow as before it.
  if (std::exchange(g.absent_since, std::nullopt).has_value()) {
    g.target_since = now;
    g.baseline_step = 0;
  }
  if (round.straggler != g.target) {
    // The verdict is the group's and stands; a measurement in flight, or a step measured
    // without offloads, was of the old target.
    if (g.target >= 0) {
      lines.push_back(absl::StrCat("offload check: rank ", round.straggler,
                                   " is the straggler now, not rank ", g.target,
                                   standing ? ": the verdict stands" : ""));
    }
    g.target = round.straggler;
    g.target_since = now;
    g.baseline_step = 0;
    if (!standing) g.phase = Phase::kWatch;
  }
  // The step measured under the newest plan, over steps all run while the target
  // straggled (the median's window began after it was first judged the straggler).
  const bool measured = round.step_seconds > 0 && round.plan_version == round.published_version &&
                        now - g.target_since >= kStepWindow * absl::Seconds(round.step_seconds);
  if (!round.offloads && measured) {
    g.baseline_step = round.step_seconds;
    g.baseline_at = now;
    g.baseline_ownership = round.ownership;
  }
  const int32_t t = g.target;
  auto say = [&](bool refuse, const std::string& what) {
    lines.push_back(absl::StrFormat("offload check (rank %d): %s", t, what));
    return refuse;
  };
  switch (g.phase) {
    case Phase::kKept:
    case Phase::kRefused:
      if (standing) {
        const bool refused = g.phase == Phase::kRefused;
        if (refused && !RefusalHolds(g, round)) {
          return say(false, absl::StrCat("allowed here: refused against rank ", g.judged_target,
                                         "'s reshard (", g.why,
                                         "), which holds for it on that split and for any "
                                         "straggler once chronic, not here before; checked "
                                         "again in ",
                                         WholeSeconds(g.until - now)));
        }
        return say(refused, absl::StrCat(refused ? "refused: " : "allowed: ", g.why,
                                         "; checked again in ", WholeSeconds(g.until - now)));
      }
      g.phase = Phase::kWatch;
      [[fallthrough]];
    case Phase::kWatch:
    case Phase::kMeasure:
      if (round.held) {
        g.phase = Phase::kWatch;
        return say(false, "the plan is held or a rank cordoned: no check");
      }
      if (!round.offloads) {
        g.phase = Phase::kWatch;
        return say(false, "no offloads pushed, nothing to check");
      }
      g.phase = Phase::kMeasure;
      if (!measured) {
        return say(false, absl::StrCat("waiting for ", options_.min_steps,
                                       " steps of every rank under the plan that offloads"));
      }
      g.offload_step = round.step_seconds;
      g.offload_ownership = round.ownership;
      if (g.baseline_step > 0 && now - g.baseline_at <= kBaselineFresh &&
          g.baseline_ownership == round.ownership) {
        return Judged(g, g.baseline_step, g.baseline_ownership,
                      absl::StrCat(" (measured ", WholeSeconds(now - g.baseline_at), " before)"),
                      now, lines);
      }
      g.phase = Phase::kProbe;
      g.probe_from = round.plan_version;
      g.probe_set_at = now;
      return say(true, absl::StrFormat("offloads ran %.4f s a step: probing the best plan "
                                       "without them",
                                       g.offload_step));
    case Phase::kProbe: {
      if (round.held) {
        g.phase = Phase::kWatch;
        return say(false, "the plan is held or a rank cordoned: the probe is dropped");
      }
      const bool answered = round.published_version > g.probe_from;
      if (!answered || round.plan_version <= g.probe_from || round.offloads || !measured) {
        if (now - g.probe_set_at < options_.probe_timeout) {
          return say(true, answered ? absl::StrCat("probing: waiting for ", options_.min_steps,
                                                   " steps of every rank under the plan "
                                                   "without offloads")
                                    : "probing: waiting for the planner's plan without "
                                      "offloads");
        }
        g.phase = Phase::kKept;
        g.until = now + options_.recheck_after;
        g.why = absl::StrCat("a probe not judged within ",
                             absl::FormatDuration(options_.probe_timeout), " was dropped");
        return say(false, g.why);
      }
      const bool refuse = Judged(g, round.step_seconds, round.ownership, "", now, lines);
      g.undo = !refuse;  // offloads back: the probe's plan goes without hysteresis
      return refuse;
    }
  }
  return false;
}

bool OffloadCheck::Judged(GroupState& g, double without, uint64_t ownership,
                          const std::string& when, absl::Duration now,
                          std::vector<std::string>& lines) {
  g.until = now + options_.recheck_after;
  g.without_ownership = ownership;
  g.judged_target = g.target;
  const std::string steps = absl::StrFormat(
      "offloads ran %.4f s a step against %.4f s without them", g.offload_step, without);
  const bool refuse = g.offload_step > without * (1 - options_.min_gain);
  g.phase = refuse ? Phase::kRefused : Phase::kKept;
  g.why = refuse ? absl::StrCat(steps, when, ", not ",
                                absl::StrFormat("%.0f", 100 * options_.min_gain), "% faster")
                 : absl::StrCat(steps, when);
  lines.push_back(absl::StrFormat("offload check (rank %d): %s: offloads %s", g.target, g.why,
                                  refuse ? "refused" : "allowed"));
  return refuse;
}

bool OffloadCheck::RefusalHolds(const GroupState& g, const Round& round) {
  return g.without_ownership == g.offload_ownership || round.chronic ||
         (round.ownership == g.without_ownership && g.target == g.judged_target);
}

void OffloadCheck::Forget(const GroupKey& key) {
  absl::MutexLock lock(&mu_);
  groups_.erase(key);
}

}  // namespace ballast::coordinator
