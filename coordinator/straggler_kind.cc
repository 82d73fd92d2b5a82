#include "coordinator/straggler_kind.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/duration_text.h"
#include "common/median.h"
#include "coordinator/arrival_spread.h"
#include "coordinator/rank_speeds.h"

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

namespace {

// Whether a window of min_steps steps of `step` s ending `now` would not overlap the last
// one taken at `last_at` (none taken: `first`).
bool WindowDue(bool first, absl::Duration last_at, absl::Duration now, double step,
               int32_t min_steps) {
  return first || now - last_at >= min_steps * absl::Seconds(step);
}

// Appends `value`, keeping the newest `keep`.
void PushNewest(std::deque<double>& values, double value, int keep) {
  values.push_back(value);
  if (values.size() > static_cast<size_t>(keep)) values.pop_front();
}

}  // namespace

bool StragglerKind::StepWindows::Due(absl::Duration now, double step, int32_t min_steps) const {
  return WindowDue(seconds.empty(), last_at, now, step, min_steps);
}

void StragglerKind::StepWindows::Add(double step, double floor, absl::Duration now) {
  PushNewest(seconds, step, kStepWindows);
  PushNewest(floors, floor, kStepWindows);
  last_at = now;
}

bool StragglerKind::NearerCalm(double floor, double calm, double straggling) {
  return floor * floor < calm * straggling;
}

double StragglerKind::MedianOf(const std::deque<double>& values) {
  if (values.empty()) return 0;
  double copy[std::max({kStepWindows, kSpreadFits, kRelievedWindows})];
  std::copy(values.begin(), values.end(), copy);
  return MedianInPlace(copy, static_cast<int>(values.size()));
}

double StragglerKind::StepWindows::Median() const { return MedianOf(seconds); }
double StragglerKind::StepWindows::MedianFloor() const { return MedianOf(floors); }

bool StragglerKind::FloorMeasured(const Round& round) {
  return !round.cordon && !round.offloads && round.plan_version == round.published_version &&
         round.step_seconds > 0 && round.collective_seconds > 0;
}

std::string StragglerKind::FloorMissing(const GroupState& g, const Round& round,
                                        absl::Duration now) const {
  if (round.cordon) return "a rank cordoned";
  if (round.offloads) return "the plan in force offloads";
  if (round.plan_version != round.published_version) {
    return "the workers not yet on the newest plan";
  }
  if (!FloorMeasured(round)) {
    return absl::StrCat("the plan in force not yet run ", options_.min_steps,
                        " steps by every rank");
  }
  // The floor is a median over min_steps steps: until the straggle has lasted that long,
  // some of them are from before it, and on the calm split they read calm whether or not
  // its contention is on (at the quota onsets' first rounds they did, and the rank, priced
  // by its timers, was resharded a unit or two short: 60,30 where 63,27 was best).
  if (round.straggler < 0 || !g.straggling_since.has_value()) return "";
  const absl::Duration since = std::max(*g.straggling_since, g.target_since);
  if (LastedAWindow(round, since, now)) return "";
  if (const auto it = g.judged.find(round.straggler);
      it != g.judged.end() && DriftNotContention(it->second, round)) {
    return "";  // not its contention back: the floor tells (see "Contention gone")
  }
  return absl::StrCat("rank ", round.straggler, "'s straggle began ",
                      absl::FormatDuration(absl::Trunc(now - since, absl::Milliseconds(10))),
                      " ago, within the ", options_.min_steps,
                      " steps the floor is a median of (some of them from before it)");
}

bool StragglerKind::DriftNotContention(const Verdict& verdict, const Round& round) {
  const double typical = MedianOf(verdict.timer_slowdowns);
  const double t = round.straggler_threshold;
  return round.straggler_slowdown > 0 && typical >= (1 + t) * (1 + t) * (1 + t) &&
         MilderStraggle(round.straggler_slowdown, typical, t);
}

bool StragglerKind::Measurable(const Round& round, absl::Duration since, absl::Duration now) const {
  return FloorMeasured(round) && LastedAWindow(round, since, now);
}

bool StragglerKind::OnCalmSplit(const GroupState& g, const Round& round) {
  return !round.units.empty() && round.units == g.calm_units;
}

bool StragglerKind::LastedAWindow(const Round& round, absl::Duration since,
                                  absl::Duration now) const {
  return round.step_seconds <= 0 ||
         now - since >= options_.min_steps * absl::Seconds(round.step_seconds);
}

bool StragglerKind::FreshCalmFloor(const GroupState& g, absl::Duration now) const {
  return g.calm_floor > 0 && now - g.calm_floor_at <= options_.calm_fresh;
}

std::string StragglerKind::RecheckLater(GroupState& g) {
  g.recheck_after = std::min(2 * g.recheck_after, kRecheckMax);
  return absl::StrCat("the next recheck after a calm spell of ",
                      absl::FormatDuration(g.recheck_after), " while relieved");
}

bool StragglerKind::ThrottledLater(const GroupState& g, const Round& round, absl::Duration now,
                                   const Verdict& verdict) const {
  // Given back by a recheck, it was throttled, and is compared with the calm floor it
  // was (as a kWhole verdict back from one needs no fresh floor either).
  const bool fresh = g.calm_floor > 0 && (FreshCalmFloor(g, now) || verdict.back_from_recheck);
  // Its own collectives are the floor: it arrives last, as a throttled rank does on the
  // calm split (another rank's throttle raises the floor too, and that one is the least).
  const auto t = static_cast<size_t>(g.target);
  const std::vector<double>& own = round.rank_collective_seconds;
  const bool last =
      g.target >= 0 && t < own.size() && own[t] > 0 && own[t] <= round.collective_seconds;
  // A window after the one that judged it, all of it this straggle's.
  return verdict.kind == Kind::kCompute && fresh && OnCalmSplit(g, round) && last &&
         Measurable(round, std::max(verdict.measured_at, g.target_since), now) &&
         round.collective_seconds >= kThrottledLaterRatio * g.calm_floor;
}

bool StragglerKind::Relieved(const GroupState& g, const std::vector<int32_t>& units, int32_t rank) {
  const auto r = static_cast<size_t>(rank);
  return rank >= 0 && r < units.size() && r < g.calm_units.size() && units[r] < g.calm_units[r];
}

StragglerKind::Kind StragglerKind::Update(const GroupRef& ref, const Round& round,
                                          std::vector<std::string>& lines) {
  const absl::Duration now = clock_->Monotonic();
  absl::MutexLock lock(&mu_);
  GroupState& g = groups_[ref.key];
  if (g.incarnation != ref.incarnation) g = GroupState{.incarnation = ref.incarnation};
  ExpireSuspended(g, now);
  const Kind kind =
      round.straggler < 0 ? Calm(g, round, now, lines) : Straggling(g, round, now, lines);
  FitSpreads(g, round, now, lines);
  SampleRelieved(g, round, now, lines);
  NoteStillLast(g, round);
  g.floor_missing = FloorMissing(g, round, now);
  g.floor_units = round.units;
  g.floor_on_calm_split =
      g.floor_missing.empty() && OnCalmSplit(g, round) ? round.collective_seconds : 0;
  return kind;
}

StragglerKind::Kind StragglerKind::Calm(GroupState& g, const Round& round, absl::Duration now,
                                        std::vector<std::string>& lines) {
  if (!g.calm_since.has_value()) g.calm_since = now;
  g.straggling_since.reset();
  // A straggler back from a calm spell as long as a floor's window is measured afresh; a
  // shorter one keeps its run: the timers see a quota's straggler near the threshold
  // (1.1-1.25x on the small GPT under 2x), they flicker calm, and a run restarted at each
  // flicker never lasted min_steps steps, so its kind was never measured.
  if (LastedAWindow(round, *g.calm_since, now)) g.target = -1;
  if (!g.judged.empty()) {
    if (AnyRelieved(g, round, g.judged)) {
      Recheck(g, round, now, lines);
    } else {
      g.relieved_calm_since.reset();
    }
    AgeVerdicts(g, round, /*straggler=*/-1, now);
  }
  g.units_going_back = !g.suspended.empty() && now - g.rechecked_at < kRecheckAfter &&
                       AnyRelieved(g, round, g.suspended);
  if (Measurable(round, *g.calm_since, now)) {
    if (const double throttled = ThrottledFloor(g); throttled > 0) {
      SampleCalmStep(g, round, throttled, now);
    } else if (g.judged.empty()) {
      // A calm round's floor min_ratio times a fresh calm floor or more is a straggler's the
      // timers call calm (a quota's, whose timers see a fraction of it), not a new calm.
      if (FreshCalmFloor(g, now) && round.collective_seconds >= options_.min_ratio * g.calm_floor) {
        lines.push_back(absl::StrFormat(
            "straggler kind: collectives %.4f s a step at least in a round judged calm, %.2fx "
            "the calm %.4f s: not taken as calm (a straggler the compute timers do not see)",
            round.collective_seconds, round.collective_seconds / g.calm_floor, g.calm_floor));
      } else if (AnyRelieved(g, round, g.suspended)) {
        // The split a recheck found relieved: its last rank waits for nobody, and a floor
        // from it would call the next slower device throttled.
        lines.push_back(
            "straggler kind: calm collectives not measured on the split a recheck found "
            "relieved; measured again once its units are back");
      } else {
        g.calm_floor = round.collective_seconds;
        g.calm_floor_at = now;
        if (round.units != g.calm_units) g.calm_steps = {};
        g.calm_units = round.units;
        if (!round.units.empty() && g.calm_steps.Due(now, round.step_seconds, options_.min_steps)) {
          g.calm_steps.Add(round.step_seconds, round.collective_seconds, now);
        }
      }
    }
  }
  lines.push_back(g.calm_floor > 0
                      ? absl::StrFormat("straggler kind: none straggles; collectives %.4f s a "
                                        "step at least when calm (measured %s ago)",
                                        g.calm_floor, WholeSeconds(now - g.calm_floor_at))
                      : "straggler kind: none straggles; calm collectives not measured yet");
  // A verdict stands through calm rounds (until a recheck): a throttled rank relieved of
  // units can look calm, and the planner must go on pricing what relieved it.
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
  AgeVerdicts(g, round, round.straggler, now);
  // A relieved straggler's calm spell outlasts straggling blips shorter than a floor's
  // window (any rank's: the timers flag one for a round or two every few seconds here).
  if (!g.straggling_since.has_value()) g.straggling_since = now;
  const bool lasted = LastedAWindow(round, *g.straggling_since, now);
  if (lasted) g.relieved_calm_since.reset();
  g.units_going_back = false;
  if (round.straggler != g.target) {
    // Its steps from before (calm, or another rank's) are not this straggler's.
    g.target = round.straggler;
    g.target_since = now;
  }
  const std::string who = absl::StrCat("straggler kind (rank ", g.target, "): ");
  // Throttled still after a recheck (see "recheck"): its verdict comes back, whatever its
  // units (no fresh calm floor is needed), and the next recheck waits longer.
  if (const auto it = g.suspended.find(g.target); it != g.suspended.end()) {
    // Its own straggle, not the group's run of them (another rank may have begun it).
    if (!LastedAWindow(round, std::max(*g.straggling_since, g.target_since), now)) {
      lines.push_back(absl::StrCat(who, "straggling again ", WholeSeconds(now - g.rechecked_at),
                                   " after a recheck ended its verdict: back once that lasts ",
                                   options_.min_steps, " steps"));
      return Kind::kUnknown;
    }
    Verdict back = std::move(it->second);
    g.suspended.erase(it);
    if (back.turned_from.has_value()) {
      // A slower device straggles again whether or not it is throttled still: it is one
      // again, and the calm split it runs now tells whether it is throttled too (then the
      // next recheck waits longer).
      back = Verdict{.kind = Kind::kCompute,
                     .why = absl::StrCat(back.turned_from->why, "; a slower device again ",
                                         WholeSeconds(now - g.rechecked_at),
                                         " after a recheck ended its verdict of throttled"),
                     .measured_at = now,
                     .back_from_recheck = true};
    } else {
      absl::StrAppend(&back.why, "; throttled still ", WholeSeconds(now - g.rechecked_at),
                      " after a recheck ended its verdict: back, ", RecheckLater(g));
    }
    back.absent_since.reset();  // it straggles now
    g.judged[g.target] = std::move(back);
  }
  if (const auto it = g.judged.find(g.target); it != g.judged.end()) {
    Verdict& verdict = it->second;
    if (ThrottledLater(g, round, now, verdict)) {
      const double ratio = round.collective_seconds / g.calm_floor;
      std::string again;
      if (verdict.back_from_recheck) {  // throttled still after a recheck
        again = absl::StrCat("; throttled still after a recheck: ", RecheckLater(g));
      }
      Verdict::Earlier earlier{.why = verdict.why, .measured_at = verdict.measured_at};
      verdict = Verdict{
          .kind = Kind::kWhole,
          .why = absl::StrFormat(
              "slow in its collectives too (a CPU quota or a co-tenant): collectives %.4f s a "
              "step at least on the calm split against %.4f s calm (%.2fx, >= %.2fx), "
              "throttled %s after it was judged %s%s",
              round.collective_seconds, g.calm_floor, ratio, kThrottledLaterRatio,
              WholeSeconds(now - earlier.measured_at), earlier.why, again),
          .measured_at = now,
          .turned_from = std::move(earlier)};
    }
    SampleStep(g, round, now, verdict);
    lines.push_back(absl::StrCat(who, verdict.why, StepText(g, verdict)));
    return verdict.kind;
  }
  if (!FreshCalmFloor(g, now)) {
    lines.push_back(absl::StrCat(who, "unknown: no calm collectives measured within ",
                                 absl::FormatDuration(options_.calm_fresh),
                                 " to compare with (a straggler since the "
                                 "job started, or a calm spell too short to measure)"));
    return Kind::kUnknown;
  }
  if (Relieved(g, round.units, g.target)) {
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
  SampleStep(g, round, now, verdict);
  lines.push_back(absl::StrCat(who, verdict.why, StepText(g, verdict)));
  return verdict.kind;
}

void StragglerKind::Recheck(GroupState& g, const Round& round, absl::Duration now,
                            std::vector<std::string>& lines) {
  // Relieved and throttled whole: a slower device's stands.
  const std::vector<int32_t> ranks = RelievedThrottledOf(g, round.units, round.owned);
  if (ranks.empty()) {
    g.relieved_calm_since.reset();
    return;
  }
  if (!g.relieved_calm_since.has_value()) g.relieved_calm_since = now;
  const absl::Duration calm_for = now - *g.relieved_calm_since;
  if (calm_for < g.recheck_after) {
    lines.push_back(absl::StrCat(
        "straggler kind: rank ", absl::StrJoin(ranks, ", "), " relieved of units and calm for ",
        WholeSeconds(calm_for), ": its verdict ends once that lasts ",
        absl::FormatDuration(g.recheck_after), ", to see whether its contention is over"));
    return;
  }
  lines.push_back(
      absl::StrCat("straggler kind: rank ", absl::StrJoin(ranks, ", "),
                   " relieved of units and calm for ", WholeSeconds(calm_for),
                   ": its verdict ends, to see whether its contention is over (its units go back; "
                   "straggling again within ",
                   absl::FormatDuration(kRecheckFailedWithin), ", it gets its verdict back)"));
  g.suspended.clear();
  for (int32_t rank : ranks) {
    g.suspended[rank] = std::move(g.judged[rank]);
    g.judged.erase(rank);
  }
  g.rechecked_at = now;
  g.relieved_calm_since.reset();
}

void StragglerKind::AgeVerdicts(GroupState& g, const Round& round, int32_t straggler,
                                absl::Duration now) {
  for (auto it = g.judged.begin(); it != g.judged.end();) {
    Verdict& verdict = it->second;
    if (it->first == straggler || RelievedNow(g, round, it->first)) {
      verdict.absent_since.reset();
    } else if (!verdict.absent_since.has_value()) {
      verdict.absent_since = now;
    }
    if (verdict.absent_since.has_value() && now - *verdict.absent_since >= kAbsentFor) {
      it = g.judged.erase(it);
    } else {
      ++it;
    }
  }
}

void StragglerKind::ExpireSuspended(GroupState& g, absl::Duration now) {
  if (g.suspended.empty() || now - g.rechecked_at <= kRecheckFailedWithin) return;
  // None straggled since its recheck: its contention was over.
  g.suspended.clear();
  g.recheck_after = kRecheckAfter;
}

bool StragglerKind::RelievedNow(const GroupState& g, const std::vector<int32_t>& units,
                                const std::vector<int32_t>& owned, int32_t rank) {
  return Relieved(g, units, rank) || Relieved(g, owned, rank);
}

bool StragglerKind::AnyRelieved(const GroupState& g, const Round& round,
                                const std::map<int32_t, Verdict>& verdicts) {
  return std::any_of(verdicts.begin(), verdicts.end(),
                     [&](const auto& v) { return RelievedNow(g, round, v.first); });
}

double StragglerKind::ThrottledFloor(const GroupState& g) {
  double least = 0;
  for (const auto& [rank, verdict] : g.judged) {
    const double floor = StragglingFloorOf(verdict);
    if (floor > 0 && (least == 0 || floor < least)) least = floor;
  }
  return least;
}

void StragglerKind::SampleCalmStep(GroupState& g, const Round& round, double throttled_floor,
                                   absl::Duration now) const {
  if (!OnCalmSplit(g, round) || !g.calm_steps.Due(now, round.step_seconds, options_.min_steps)) {
    return;
  }
  const double calm = CalmCollectivesOf(g);
  // Nearer the calm floor than the throttled rank's, by ratio (see "Step slowdown").
  if (NearerCalm(round.collective_seconds, calm, throttled_floor)) {
    g.calm_steps.Add(round.step_seconds, round.collective_seconds, now);
  }
}

void StragglerKind::SampleStep(const GroupState& g, const Round& round, absl::Duration now,
                               Verdict& verdict) const {
  // Under the split it ran calm the group's step is the straggler's (see "Step slowdown").
  if (verdict.kind != Kind::kWhole || !OnCalmSplit(g, round) ||
      !Measurable(round, g.target_since, now) ||
      !verdict.steps.Due(now, round.step_seconds, options_.min_steps)) {
    return;
  }
  // Not a window without its contention (see "Contention gone"): its floor and step would
  // bring the price down toward calm, and the contention, back, would be priced at that.
  const double straggling = StragglingFloorOf(verdict);
  if (straggling > 0 && NearerCalm(round.collective_seconds, CalmCollectivesOf(g), straggling)) {
    return;
  }
  verdict.steps.Add(round.step_seconds, round.collective_seconds, now);
  if (round.straggler_slowdown > 0) {
    PushNewest(verdict.timer_slowdowns, round.straggler_slowdown, kStepWindows);
  }
}

void StragglerKind::FitSpreads(GroupState& g, const Round& round, absl::Duration now,
                               std::vector<std::string>& lines) const {
  const std::vector<double>& measured = round.rank_collective_seconds;
  const double calm = CalmCollectivesOf(g);
  // On the calm split its floor was measured: its waits beyond it are that median's noise.
  if (!WaitsMeasured(g, round)) return;
  const auto throttled = [&g](size_t r) {
    const auto it = g.judged.find(static_cast<int32_t>(r));
    return it != g.judged.end() && it->second.kind == Kind::kWhole;
  };
  for (auto& [rank, verdict] : g.judged) {
    const double floor = StragglingFloorOf(verdict);
    const auto t = static_cast<size_t>(rank);
    if (floor <= 0 || t >= measured.size() || !(measured[t] > 0)) continue;
    if (!WindowDue(verdict.spreads.empty(), verdict.spread_at, now, round.step_seconds,
                   options_.min_steps)) {
      continue;  // the same window as the last fit
    }
    // The others' least: the latest of them, which waits for the throttled rank alone.
    double others = 0;
    for (size_t r = 0; r < measured.size(); ++r) {
      if (r == t || throttled(r) || !(measured[r] > 0)) continue;
      others = others > 0 ? std::min(others, measured[r]) : measured[r];
    }
    if (others <= 0) continue;
    const std::optional<double> fit = FitArrivalSpread(others - calm, measured[t] - floor);
    if (!fit.has_value()) continue;
    PushNewest(verdict.spreads, *fit, kSpreadFits);
    verdict.spread_at = now;
    lines.push_back(absl::StrFormat(
        "arrival spread (rank %d): %.4f s fitted to this plan's waits (the others %.4f s a "
        "step beyond the %.4f s their collectives cost calm, it %.4f s beyond its straggling "
        "floor %.4f s); %.4f s, the median of %d fits, is its spread",
        rank, *fit, others - calm, calm, measured[t] - floor, floor, MedianOf(verdict.spreads),
        verdict.spreads.size()));
  }
}

bool StragglerKind::WaitsMeasured(const GroupState& g, const Round& round) {
  return !round.rank_collective_seconds.empty() && CalmCollectivesOf(g) > 0 && !round.cordon &&
         !round.offloads && round.plan_version == round.published_version &&
         round.step_seconds > 0 && !round.units.empty() && round.units != g.calm_units;
}

void StragglerKind::SampleRelieved(GroupState& g, const Round& round, absl::Duration now,
                                   std::vector<std::string>& lines) const {
  if (!WaitsMeasured(g, round)) return;
  const std::vector<double>& measured = round.rank_collective_seconds;
  for (auto& [rank, verdict] : g.judged) {
    if (!RelievedContended(g, round, rank, verdict)) continue;
    const double floor = StragglingFloorOf(verdict);
    const auto t = static_cast<size_t>(rank);
    if (!WindowDue(verdict.relieved_ratios.empty(), verdict.relieved_at, now, round.step_seconds,
                   options_.min_steps)) {
      continue;  // the same window as the last one
    }
    PushNewest(verdict.relieved_ratios, measured[t] / floor, kRelievedWindows);
    verdict.relieved_at = now;
    lines.push_back(absl::StrFormat(
        "relieved (rank %d): its collectives %.4f s a step at %d units, %.3fx the %.4f s they "
        "cost it straggling on the calm split; %.3fx, the median of %d windows, prices them "
        "while it is relieved (at most 1x)",
        rank, measured[t], round.units[t], measured[t] / floor, floor,
        MedianOf(verdict.relieved_ratios), verdict.relieved_ratios.size()));
  }
}

bool StragglerKind::RelievedContended(const GroupState& g, const Round& round, int32_t rank,
                                      const Verdict& verdict) {
  const std::vector<double>& measured = round.rank_collective_seconds;
  const double floor = StragglingFloorOf(verdict);
  const auto t = static_cast<size_t>(rank);
  // Not a window without its contention: priced at it, the contention, back, would be
  // priced at calm (see "Contention gone").
  return floor > 0 && t < measured.size() && measured[t] > 0 && Relieved(g, round.units, rank) &&
         !NearerCalm(measured[t], CalmCollectivesOf(g), floor);
}

void StragglerKind::NoteStillLast(GroupState& g, const Round& round) const {
  g.still_last.clear();
  if (!WaitsMeasured(g, round)) return;
  const std::vector<double>& measured = round.rank_collective_seconds;
  for (const auto& [rank, verdict] : g.judged) {
    if (!RelievedContended(g, round, rank, verdict)) continue;
    const auto t = static_cast<size_t>(rank);
    // The others wait for it: each attached one (0 is a rank not attached) at least
    // min_ratio times its own, as a floor's straggler is told from the calm one.
    double others = 0;
    for (size_t r = 0; r < measured.size(); ++r) {
      if (r == t || measured[r] <= 0) continue;
      others = others == 0 ? measured[r] : std::min(others, measured[r]);
    }
    if (others >= options_.min_ratio * measured[t]) g.still_last[rank] = {measured[t], others};
  }
}

double StragglerKind::Slowdown(const GroupState& g, const Verdict& verdict) {
  const double calm = g.calm_steps.Median();
  const double ratio = calm > 0 ? verdict.steps.Median() / calm : 0;
  return ratio > 1 ? ratio : 0;
}

std::string StragglerKind::StepText(const GroupState& g, const Verdict& verdict) const {
  const double calm = g.calm_steps.Median();
  if (verdict.steps.seconds.empty() || calm <= 0) return "";
  const double step = verdict.steps.Median();
  return absl::StrFormat(
      "; the group's step %.4f s against %.4f s calm on the same split (medians of %d and %d "
      "windows of %d steps): %s",
      step, calm, verdict.steps.seconds.size(), g.calm_steps.seconds.size(), options_.min_steps,
      step > calm ? absl::StrFormat("slowed %.2fx in all it does", step / calm) : "no slower");
}

void StragglerKind::Forget(const GroupKey& key) {
  absl::MutexLock lock(&mu_);
  groups_.erase(key);
}

}  // namespace ballast::coordinator
