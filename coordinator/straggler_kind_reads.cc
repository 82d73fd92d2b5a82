// StragglerKind's reads: what the decision loop asks of a group's verdicts once a round
// has updated them (the straggling and calm floors, the relief, whether a contention is
// gone). Apart from straggler_kind.cc, which judges the rounds, to keep each file short.

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "coordinator/straggler_kind.h"

namespace ballast::coordinator {

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
  if (verdict == nullptr || verdict->kind != Kind::kWhole) return 0;
  return Slowdown(groups_.at(ref.key), *verdict);
}

bool StragglerKind::ContentionGone(const GroupRef& ref, int32_t rank, double* floor_now,
                                   std::string* not_gone) const {
  absl::MutexLock lock(&mu_);
  const Verdict* verdict = StandingVerdict(ref, rank);
  if (verdict == nullptr) return false;
  const GroupState& g = groups_.at(ref.key);
  const double now = g.floor_on_calm_split;
  const double calm = CalmCollectivesOf(g);
  const double straggling = StragglingFloorOf(*verdict);
  std::string why;
  if (!(calm > 0) || !(straggling > 0)) {
    why = "no calm or straggling collectives measured to tell";
  } else if (!g.floor_missing.empty()) {
    why = g.floor_missing;
  } else if (g.floor_units.empty() || g.calm_units.empty()) {
    why = "the split it runs or the calm one not known";
  } else if (!(now > 0)) {
    why = absl::StrCat("computing ", absl::StrJoin(g.floor_units, ","), " units, not the ",
                       absl::StrJoin(g.calm_units, ","), " of the calm split");
  } else if (!NearerCalm(now, calm, straggling)) {
    why = absl::StrFormat(
        "on the calm split its collectives cost %.4g s a step, nearer its straggling %.4g s "
        "than the %.4g s calm",
        now, straggling, calm);
  }
  if (!why.empty()) {
    if (not_gone != nullptr) *not_gone = std::move(why);
    return false;
  }
  if (floor_now != nullptr) *floor_now = now;
  return true;
}

bool StragglerKind::RelievedOf(const GroupRef& ref, int32_t rank,
                               const std::vector<int32_t>& units) const {
  absl::MutexLock lock(&mu_);
  const auto g = groups_.find(ref.key);
  if (g == groups_.end() || g->second.incarnation != ref.incarnation) return false;
  return Relieved(g->second, units, rank);
}

bool StragglerKind::StillLast(const GroupRef& ref, int32_t rank, double* seconds,
                              double* others) const {
  absl::MutexLock lock(&mu_);
  const auto g = groups_.find(ref.key);
  if (g == groups_.end() || g->second.incarnation != ref.incarnation) return false;
  const auto it = g->second.still_last.find(rank);
  if (it == g->second.still_last.end()) return false;
  if (seconds != nullptr) *seconds = it->second.first;
  if (others != nullptr) *others = it->second.second;
  return true;
}

std::vector<int32_t> StragglerKind::RelievedThrottled(const GroupRef& ref,
                                                      const std::vector<int32_t>& units,
                                                      const std::vector<int32_t>& owned) const {
  absl::MutexLock lock(&mu_);
  const auto g = groups_.find(ref.key);
  if (g == groups_.end() || g->second.incarnation != ref.incarnation) return {};
  return RelievedThrottledOf(g->second, units, owned);
}

std::vector<int32_t> StragglerKind::RelievedThrottledOf(const GroupState& g,
                                                        const std::vector<int32_t>& units,
                                                        const std::vector<int32_t>& owned) {
  std::vector<int32_t> ranks;
  for (const auto& [rank, verdict] : g.judged) {
    if (verdict.kind == Kind::kWhole && RelievedNow(g, units, owned, rank)) ranks.push_back(rank);
  }
  return ranks;
}

bool StragglerKind::UnitsGoingBack(const GroupRef& ref) const {
  absl::MutexLock lock(&mu_);
  const auto g = groups_.find(ref.key);
  return g != groups_.end() && g->second.incarnation == ref.incarnation &&
         g->second.units_going_back;
}

double StragglerKind::CalmCollectives(const GroupRef& ref) const {
  absl::MutexLock lock(&mu_);
  const auto g = groups_.find(ref.key);
  if (g == groups_.end() || g->second.incarnation != ref.incarnation) return 0;
  return CalmCollectivesOf(g->second);
}

double StragglerKind::StragglingFloor(const GroupRef& ref, int32_t rank) const {
  absl::MutexLock lock(&mu_);
  const Verdict* verdict = StandingVerdict(ref, rank);
  return verdict == nullptr ? 0 : StragglingFloorOf(*verdict);
}

double StragglerKind::ArrivalSpread(const GroupRef& ref, int32_t rank) const {
  absl::MutexLock lock(&mu_);
  const Verdict* verdict = StandingVerdict(ref, rank);
  return verdict == nullptr || verdict->kind != Kind::kWhole ? 0 : MedianOf(verdict->spreads);
}

double StragglerKind::RelievedFloorRatio(const GroupRef& ref, int32_t rank,
                                         const std::vector<int32_t>& units, int* windows) const {
  absl::MutexLock lock(&mu_);
  if (windows != nullptr) *windows = 0;
  const Verdict* verdict = StandingVerdict(ref, rank);
  if (verdict == nullptr || verdict->kind != Kind::kWhole || verdict->relieved_ratios.empty() ||
      !Relieved(groups_.at(ref.key), units, rank)) {
    return 1;
  }
  if (windows != nullptr) *windows = static_cast<int>(verdict->relieved_ratios.size());
  return std::min(1.0, MedianOf(verdict->relieved_ratios));
}

double StragglerKind::StragglingFloorOf(const Verdict& verdict) {
  return verdict.kind == Kind::kWhole ? verdict.steps.MedianFloor() : 0;
}

double StragglerKind::CalmCollectivesOf(const GroupState& g) {
  return g.calm_steps.floors.empty() ? g.calm_floor : g.calm_steps.MedianFloor();
}

}  // namespace ballast::coordinator
