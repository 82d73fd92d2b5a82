#include "coordinator/straggler_kind.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/duration_text.h"

namespace ballast::coordinator {

absl::Status ValidateStragglerKindOptions(const StragglerKindOptions& o) {
  if (o.min_steps < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("straggler kind min_steps ", o.min_steps, " must be >= 1"));
  }
  if (!(o.min_ratio > 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("straggler kind min_ratio ", o.min_ratio, " must be > 1"));
  }
  if (o.calm_fresh <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "straggler kind calm_fresh ", absl::FormatDuration(o.calm_fresh), " must be > 0"));
  }
  return absl::OkStatus();
}

bool StragglerKind::Measurable(const Round& round, absl::Duration since, absl::Duration now) const {
  return !round.cordon && !round.offloads && round.plan_version == round.published_version &&
         round.step_seconds > 0 && round.collective_seconds > 0 &&
         now - since >= options_.min_steps * absl::Seconds(round.step_seconds);
}

bool StragglerKind::Relieved(const GroupState& g, const Round& round, int32_t rank) {
  const auto r = static_cast<size_t>(rank);
  return rank >= 0 && r < round.units.size() && r < g.calm_units.size() &&
         round.units[r] < g.calm_units[r];
}

StragglerKind::Kind StragglerKind::Update(const GroupRef& ref, const Round& round,
                                          std::vector<std::string>& lines) {
  const absl::Duration now = clock_->Monotonic();
  absl::MutexLock lock(&mu_);
  GroupState& g = groups_[ref.key];
  if (g.incarnation != ref.incarnation) g = GroupState{.incarnation = ref.incarnation};
  return round.straggler < 0 ? Calm(g, round, now, lines) : Straggling(g, round, now, lines);
}

StragglerKind::Kind StragglerKind::Calm(GroupState& g, const Round& round, absl::Duration now,
                                        std::vector<std::string>& lines) {
  if (!g.calm_since.has_value()) g.calm_since = now;
  // A straggler back from a calm spell as long as a floor's window is measured afresh; a
  // shorter one keeps its run: the timers see a quota's straggler near the threshold
  // (1.1-1.25x on the small GPT under 2x), they flicker calm, and a run restarted at each
  // flicker never lasted min_steps steps, so its kind was never measured.
  if (round.step_seconds <= 0 ||
      now - *g.calm_since >= options_.min_steps * absl::Seconds(round.step_seconds)) {
    g.target = -1;
  }
  if (!g.judged.empty()) {
    const bool relieved = std::any_of(g.judged.begin(), g.judged.end(),
                                      [&](const auto& j) { return Relieved(g, round, j.first); });
    if (relieved) {
      g.absent_since.reset();
    } else if (!g.absent_since.has_value()) {
      g.absent_since = now;
    }
    if (g.absent_since.has_value() && now - *g.absent_since >= kAbsentFor) {
      g.judged.clear();
      g.absent_since.reset();
    }
  }
  if (g.judged.empty() && Measurable(round, *g.calm_since, now)) {
    // A calm round's floor min_ratio times a fresh calm floor or more is a straggler's the
    // timers call calm (a quota's, whose timers see a fraction of it), not a new calm.
    const bool fresh = g.calm_floor > 0 && now - g.calm_floor_at <= options_.calm_fresh;
    if (fresh && round.collective_seconds >= options_.min_ratio * g.calm_floor) {
      lines.push_back(absl::StrFormat(
          "straggler kind: collectives %.4f s a step at least in a round judged calm, %.2fx "
          "the calm %.4f s: not taken as calm (a straggler the compute timers do not see)",
          round.collective_seconds, round.collective_seconds / g.calm_floor, g.calm_floor));
    } else {
      g.calm_floor = round.collective_seconds;
      g.calm_step = round.step_seconds;
      g.calm_floor_at = now;
      g.calm_units = round.units;
    }
  }
  lines.push_back(g.calm_floor > 0
                      ? absl::StrFormat("straggler kind: none straggles; collectives %.4f s a "
                                        "step at least when calm (measured %s ago)",
                                        g.calm_floor, WholeSeconds(now - g.calm_floor_at))
                      : "straggler kind: none straggles; calm collectives not measured yet");
  // A verdict stands through calm rounds: a throttled rank relieved of units can look
  // calm, and the planner must go on pricing what relieved it.
  Kind kind = Kind::kUnknown;
  for (const auto& [rank, verdict] : g.judged) {
    lines.push_back(absl::StrCat("straggler kind (rank ", rank, ", calm now): ", verdict.why));
    if (kind != Kind::kWhole) kind = verdict.kind;
  }
  return kind;
}

StragglerKind::Kind StragglerKind::Straggling(GroupState& g, const Round& round, absl::Duration now,
                                              std::vector<std::string>& lines) {
  g.calm_since.reset();
  g.absent_since.reset();
  if (round.straggler != g.target) {
    // Its steps from before (calm, or another rank's) are not this straggler's.
    g.target = round.straggler;
    g.target_since = now;
  }
  const std::string who = absl::StrCat("straggler kind (rank ", g.target, "): ");
  if (const auto it = g.judged.find(g.target); it != g.judged.end()) {
    lines.push_back(absl::StrCat(who, it->second.why));
    return it->second.kind;
  }
  const bool fresh = g.calm_floor > 0 && now - g.calm_floor_at <= options_.calm_fresh;
  if (!fresh) {
    lines.push_back(absl::StrCat(who, "unknown: no calm collectives measured within ",
                                 absl::FormatDuration(options_.calm_fresh),
                                 " to compare with (a straggler since the "
                                 "job started, or a calm spell too short to measure)"));
    return Kind::kUnknown;
  }
  if (Relieved(g, round, g.target)) {
    lines.push_back(absl::StrCat(
        who, "not measured yet: it computes ", round.units[g.target],
        " units under the plan in force, fewer than the ", g.calm_units[g.target],
        " it computed when calm (fewer units relieve a throttled rank's collectives too)"));
    return Kind::kUnknown;
  }
  if (!Measurable(round, g.target_since, now)) {
    lines.push_back(absl::StrCat(who,
                                 "not measured yet: its collectives are judged under a plan "
                                 "without offloads that ran ",
                                 options_.min_steps, " steps while it straggled"));
    return Kind::kUnknown;
  }
  const double ratio = round.collective_seconds / g.calm_floor;
  const bool whole = ratio >= options_.min_ratio;
  Verdict& verdict = g.judged[g.target];
  verdict.kind = whole ? Kind::kWhole : Kind::kCompute;
  verdict.measured_at = now;
  verdict.why = absl::StrFormat(
      "%s: collectives %.4f s a step at least against %.4f s calm (%.2fx, %s %.2fx; judged "
      "once, for as long as it straggles)",
      whole ? "slow in its collectives too (a CPU quota or a co-tenant)"
            : "slow in its compute alone (a slower device)",
      round.collective_seconds, g.calm_floor, ratio, whole ? ">=" : "<", options_.min_ratio);
  // Under the split it ran calm the group's step is the straggler's (see "Step slowdown").
  const double step_ratio = g.calm_step > 0 ? round.step_seconds / g.calm_step : 0;
  if (whole && !round.units.empty() && round.units == g.calm_units && step_ratio > 1) {
    verdict.step_slowdown = step_ratio;
    absl::StrAppendFormat(&verdict.why,
                          "; the group's step %.4f s against %.4f s calm on the same split: "
                          "slowed %.2fx in all it does",
                          round.step_seconds, g.calm_step, step_ratio);
  }
  lines.push_back(absl::StrCat(who, verdict.why));
  return verdict.kind;
}

const StragglerKind::Verdict* StragglerKind::StandingVerdict(const GroupRef& ref,
                                                             int32_t rank) const {
  const auto g = groups_.find(ref.key);
  if (g == groups_.end() || g->second.incarnation != ref.incarnation) return nullptr;
  const auto it = g->second.judged.find(rank);
  return it == g->second.judged.end() ? nullptr : &it->second;
}

std::optional<absl::Duration> StragglerKind::MeasuredAt(const GroupRef& ref, int32_t rank) const {
  absl::MutexLock lock(&mu_);
  const Verdict* verdict = StandingVerdict(ref, rank);
  if (verdict == nullptr) return std::nullopt;
  return verdict->measured_at;
}

double StragglerKind::StepSlowdown(const GroupRef& ref, int32_t rank) const {
  absl::MutexLock lock(&mu_);
  const Verdict* verdict = StandingVerdict(ref, rank);
  return verdict != nullptr && verdict->kind == Kind::kWhole ? verdict->step_slowdown : 0;
}

void StragglerKind::Forget(const GroupKey& key) {
  absl::MutexLock lock(&mu_);
  groups_.erase(key);
}

}  // namespace ballast::coordinator
