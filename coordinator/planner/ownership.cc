#include "coordinator/planner/ownership.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ballast::coordinator {

std::vector<int32_t> WaterFillCounts(const std::vector<PlannerRank>& ranks, int32_t num_units) {
  // The greedy hands out the N cheapest "levels" f_r + c_r * j (j-th unit of rank r), ties
  // to the lower rank. Every level strictly below the fractional water level is among
  // them, so take those at once and hand out the few remaining units one by one. The
  // level L solves sum over the ranks below it of (L - f_r) / c_r = N; a rank whose fixed
  // cost is at or above the level of the others gets no unit below it, so it is left out
  // and the level solved again (it only falls).
  std::vector<char> below(ranks.size(), 0);
  for (size_t r = 0; r < ranks.size(); ++r) below[r] = ranks[r].cordoned ? 0 : 1;
  double level = 0;
  for (bool changed = true; changed;) {
    double inverse_sum = 0, fixed_units = 0;
    for (size_t r = 0; r < ranks.size(); ++r) {
      if (!below[r]) continue;
      inverse_sum += 1 / ranks[r].seconds_per_unit;
      fixed_units += ranks[r].fixed_seconds / ranks[r].seconds_per_unit;
    }
    level = inverse_sum > 0
                ? (static_cast<double>(num_units) + fixed_units) / inverse_sum * (1 - 1e-9)
                : 0;
    changed = false;
    for (size_t r = 0; r < ranks.size(); ++r) {
      if (below[r] && ranks[r].fixed_seconds >= level) {
        below[r] = 0;
        changed = true;
      }
    }
  }
  std::vector<int32_t> counts(ranks.size(), 0);
  int64_t assigned = 0;
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (!below[r]) continue;
    const double c = ranks[r].seconds_per_unit, f = ranks[r].fixed_seconds;
    int64_t j = static_cast<int64_t>(std::min((level - f) / c, static_cast<double>(num_units)));
    while (j > 0 && !(f + c * static_cast<double>(j) < level)) --j;
    counts[r] = static_cast<int32_t>(j);
    assigned += j;
  }
  if (assigned > num_units) {  // cannot happen; fall back to the plain greedy
    std::fill(counts.begin(), counts.end(), 0);
    assigned = 0;
  }
  for (; assigned < num_units; ++assigned) {
    size_t pick = ranks.size();
    double pick_level = std::numeric_limits<double>::infinity();
    for (size_t r = 0; r < ranks.size(); ++r) {
      if (ranks[r].cordoned) continue;
      const double next =
          ranks[r].fixed_seconds + ranks[r].seconds_per_unit * static_cast<double>(counts[r] + 1);
      if (next < pick_level) {
        pick_level = next;
        pick = r;
      }
    }
    if (pick == ranks.size()) break;  // every rank cordoned: the caller skipped the check
    ++counts[pick];
  }
  return counts;
}

std::vector<int32_t> HalfwayCounts(const std::vector<int32_t>& from,
                                   const std::vector<int32_t>& to) {
  int64_t from_total = 0, to_total = 0;
  for (int32_t c : from) from_total += c;
  for (int32_t c : to) to_total += c;
  if (from.size() != to.size() || from_total != to_total) return from;
  std::vector<int32_t> out(from.size());
  // With sum(to) == sum(from), sum(out) - sum(from) = -(sum of the odd remainders) / 2.
  int32_t odd_sum = 0;
  for (size_t r = 0; r < from.size(); ++r) {
    const int32_t move = to[r] - from[r];
    out[r] = from[r] + move / 2;  // towards from: C++ division truncates towards zero
    odd_sum += move % 2;          // -1, 0 or 1
  }
  const int32_t sign = odd_sum > 0 ? 1 : -1;
  for (size_t r = 0; r < from.size() && odd_sum != 0; ++r) {
    if ((to[r] - from[r]) % 2 != sign) continue;
    out[r] += sign;
    odd_sum -= 2 * sign;
  }
  return out;
}

std::vector<RankId> MoveUnits(const std::vector<RankId>& owner_of_unit,
                              const std::vector<int32_t>& new_counts) {
  // One pass over the units after counting them (the planner prices a reshard on every
  // round of a chronic straggler's group, and a block has hundreds of units): a unit past
  // its owner's min(old, new) goes at once to the lowest rank still short, which is where
  // the freed list, filled in unit order and handed out in rank order, would send it.
  const int32_t p = static_cast<int32_t>(new_counts.size());
  std::vector<int32_t> keep(p, 0);
  for (RankId r : owner_of_unit) ++keep[r.value()];
  std::vector<int32_t> short_by(p, 0);
  for (int32_t r = 0; r < p; ++r) {
    keep[r] = std::min(keep[r], new_counts[r]);
    short_by[r] = new_counts[r] - keep[r];
  }
  std::vector<RankId> out = owner_of_unit;
  int32_t to = 0;  // the lowest rank still short
  while (to < p && short_by[to] == 0) ++to;
  for (RankId& owner : out) {
    int32_t& kept = keep[owner.value()];
    if (kept > 0) {
      --kept;
      continue;
    }
    if (to == p) continue;  // counts that do not add up: the rest stay with their owner
    owner = RankId(to);
    if (--short_by[to] == 0) {
      while (to < p && short_by[to] == 0) ++to;
    }
  }
  return out;
}

}  // namespace ballast::coordinator
