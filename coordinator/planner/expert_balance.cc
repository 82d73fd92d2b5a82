#include "coordinator/planner/expert_balance.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace ballast::coordinator {
namespace {

absl::Status Check(const ExpertLoads& l) {
  if (l.owner_of_unit.size() != l.work.size()) {
    return absl::InvalidArgumentError(absl::StrCat("owner_of_unit has ", l.owner_of_unit.size(),
                                                   " entries, work has ", l.work.size()));
  }
  for (size_t e = 0; e < l.work.size(); ++e) {
    if (!(l.work[e] >= 0) || !std::isfinite(l.work[e])) {
      return absl::InvalidArgumentError(
          absl::StrCat("work[", e, "] = ", l.work[e], " must be finite and >= 0"));
    }
    const int32_t r = l.owner_of_unit[e].value();
    if (r < 0 || r >= static_cast<int32_t>(l.speed.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("owner_of_unit[", e, "] = ", r, " out of range [0, ", l.speed.size(), ")"));
    }
  }
  for (size_t r = 0; r < l.speed.size(); ++r) {
    if (!(l.speed[r] > 0) || !std::isfinite(l.speed[r])) {
      return absl::InvalidArgumentError(
          absl::StrCat("speed[", r, "] = ", l.speed[r], " must be finite and > 0"));
    }
  }
  if (!(l.replica_cost >= 0) || !std::isfinite(l.replica_cost)) {
    return absl::InvalidArgumentError(
        absl::StrCat("replica_cost ", l.replica_cost, " must be finite and >= 0"));
  }
  if (!(l.tolerance >= 0) || !std::isfinite(l.tolerance)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tolerance ", l.tolerance, " must be finite and >= 0"));
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<double> RankTimes(const ExpertLoads& l, const std::vector<Replica>& replicas) {
  std::vector<double> work(l.speed.size(), 0.0);
  std::vector<int> transfers(l.speed.size(), 0);
  for (size_t e = 0; e < l.work.size(); ++e) work[l.owner_of_unit[e].value()] += l.work[e];
  for (const Replica& r : replicas) {
    const int32_t owner = l.owner_of_unit[r.unit].value();
    const double moved = l.work[r.unit] * r.share;
    work[owner] -= moved;
    work[r.helper.value()] += moved;
    ++transfers[owner];
    ++transfers[r.helper.value()];
  }
  std::vector<double> time(l.speed.size());
  for (size_t r = 0; r < time.size(); ++r) {
    time[r] = std::max(0.0, work[r]) / l.speed[r] + transfers[r] * l.replica_cost;
  }
  return time;
}

absl::StatusOr<std::vector<Replica>> BalanceExperts(const ExpertLoads& l) {
  if (absl::Status s = Check(l); !s.ok()) return s;
  const int32_t ranks = static_cast<int32_t>(l.speed.size());
  std::vector<Replica> replicas;
  if (ranks < 2) return replicas;
  const double total_work = std::accumulate(l.work.begin(), l.work.end(), 0.0);
  const double total_speed = std::accumulate(l.speed.begin(), l.speed.end(), 0.0);
  if (total_work <= 0) return replicas;
  // The owner's remaining share of each unit: what a new replica can still take.
  std::vector<double> kept(l.work.size(), 1.0);
  while (static_cast<int>(replicas.size()) < l.max_replicas) {
    const std::vector<double> time = RankTimes(l, replicas);
    // The balanced time: every rank's work and transfers so far, spread by speed (the
    // transfers make it grow a little with each replica).
    double spread = 0;
    for (int32_t r = 0; r < ranks; ++r) spread += time[r] * l.speed[r];
    const double balanced = spread / total_speed;
    const int32_t slow =
        static_cast<int32_t>(std::max_element(time.begin(), time.end()) - time.begin());
    const int32_t fast =
        static_cast<int32_t>(std::min_element(time.begin(), time.end()) - time.begin());
    if (time[slow] <= balanced * (1 + l.tolerance)) break;
    // The slow rank's unit with the most work left, not already split to `fast` (a second
    // replica of a unit on the same helper would be one replica with a larger share).
    int32_t unit = -1;
    for (size_t e = 0; e < l.work.size(); ++e) {
      if (l.owner_of_unit[e].value() != slow || kept[e] <= 1e-12) continue;
      const bool on_fast = std::any_of(replicas.begin(), replicas.end(), [&](const Replica& r) {
        return r.unit == static_cast<int32_t>(e) && r.helper.value() == fast;
      });
      if (on_fast) continue;
      if (unit < 0 || l.work[e] * kept[e] > l.work[unit] * kept[unit]) unit = e;
    }
    if (unit < 0 || l.work[unit] <= 0) break;
    // Water-filling: move as much as takes the slow rank down to the balanced time or the
    // fast one up to it (with the transfer it then pays), whichever comes first, so no
    // move pushes a rank past the balanced time (equalising the pair instead would
    // overshoot, and the next move would undo part of it).
    const double s_slow = l.speed[slow], s_fast = l.speed[fast];
    double w = std::min((time[slow] - balanced) * s_slow,
                        (balanced - time[fast] - l.replica_cost) * s_fast);
    w = std::min(w, l.work[unit] * kept[unit]);
    // It pays only if the slow rank ends earlier by more than the transfer it adds.
    if (w / s_slow <= l.replica_cost || w <= 0) break;
    const double share = std::min(kept[unit], w / l.work[unit]);
    kept[unit] -= share;
    replicas.push_back({unit, RankId(fast), share});
  }
  return replicas;
}

absl::StatusOr<std::vector<RankId>> BalanceOwnership(const ExpertLoads& l) {
  if (absl::Status s = Check(l); !s.ok()) return s;
  std::vector<RankId> owner = l.owner_of_unit;
  const size_t ranks = l.speed.size();
  const double total_work = std::accumulate(l.work.begin(), l.work.end(), 0.0);
  const double total_speed = std::accumulate(l.speed.begin(), l.speed.end(), 0.0);
  if (ranks < 2 || total_work <= 0) return owner;
  const double balanced = total_work / total_speed;
  // A move must shorten the slow rank by more than the tolerance: a gain inside the noise
  // is no reason to send an expert (one hot expert alone on its rank, say, with cold ones
  // to shed a token at a time), and rounding must not count as a gain either.
  const double least_gain = std::max(l.tolerance, 1e-12) * balanced;
  std::vector<double> time(ranks, 0.0);
  for (size_t e = 0; e < l.work.size(); ++e) {
    time[owner[e].value()] += l.work[e] / l.speed[owner[e].value()];
  }
  for (size_t round = 0; round < l.work.size(); ++round) {
    const size_t slow = std::max_element(time.begin(), time.end()) - time.begin();
    if (time[slow] <= balanced * (1 + l.tolerance)) break;
    // The best single move or swap: the later of the two ranks' new times, to beat the
    // slow rank's time now. A move is tried before the swaps of the same expert, so a tie
    // moves one expert rather than two.
    double best = time[slow] - least_gain;
    int32_t moved = -1, swapped = -1, to = -1;
    for (size_t e = 0; e < l.work.size(); ++e) {
      if (owner[e].value() != static_cast<int32_t>(slow)) continue;
      const double out = time[slow] - l.work[e] / l.speed[slow];
      for (size_t r = 0; r < ranks; ++r) {
        if (r == slow) continue;
        const double in = time[r] + l.work[e] / l.speed[r];
        if (std::max(out, in) < best) {
          best = std::max(out, in);
          moved = static_cast<int32_t>(e), swapped = -1, to = static_cast<int32_t>(r);
        }
      }
      for (size_t f = 0; f < l.work.size(); ++f) {
        const size_t r = owner[f].value();
        // Taking back as much work or more cannot shorten the slow rank.
        if (r == slow || l.work[f] >= l.work[e]) continue;
        const double kept = out + l.work[f] / l.speed[slow];
        const double given = time[r] - l.work[f] / l.speed[r] + l.work[e] / l.speed[r];
        if (std::max(kept, given) < best) {
          best = std::max(kept, given);
          moved = static_cast<int32_t>(e), swapped = static_cast<int32_t>(f);
          to = static_cast<int32_t>(r);
        }
      }
    }
    if (moved < 0) break;  // no single move or swap helps: a local optimum
    time[slow] -= l.work[moved] / l.speed[slow];
    time[to] += l.work[moved] / l.speed[to];
    owner[moved] = RankId(to);
    if (swapped >= 0) {
      time[to] -= l.work[swapped] / l.speed[to];
      time[slow] += l.work[swapped] / l.speed[slow];
      owner[swapped] = RankId(static_cast<int32_t>(slow));
    }
  }
  return owner;
}

}  // namespace ballast::coordinator
