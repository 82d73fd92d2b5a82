#include "coordinator/planner/ownership.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ballast::coordinator {

absl::StatusOr<std::vector<int32_t>> WaterFillCounts(const std::vector<PlannerRank>& ranks,
                                                     int32_t num_units) {
  if (num_units < 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_units ", num_units, " must be >= 0"));
  }
  double inverse_sum = 0;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const double c = ranks[r].seconds_per_unit;
    if (!std::isfinite(c) || c <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("ranks[", r, "].seconds_per_unit ", c, " must be finite and > 0"));
    }
    if (!ranks[r].cordoned) inverse_sum += 1 / c;
  }
  if (inverse_sum == 0) {
    return absl::InvalidArgumentError("ranks: all ranks are cordoned; nobody can own units");
  }
  // The greedy hands out the N cheapest "levels" c_r * j (j-th unit of rank r), ties to
  // the lower rank. Every level strictly below the fractional water level is among them,
  // so take those at once and hand out the few remaining units one by one.
  const double level = static_cast<double>(num_units) / inverse_sum * (1 - 1e-9);
  std::vector<int32_t> counts(ranks.size(), 0);
  int64_t assigned = 0;
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (ranks[r].cordoned) continue;
    const double c = ranks[r].seconds_per_unit;
    int64_t j = static_cast<int64_t>(std::min(level / c, static_cast<double>(num_units)));
    while (j > 0 && !(c * static_cast<double>(j) < level)) --j;
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
      const double next = ranks[r].seconds_per_unit * static_cast<double>(counts[r] + 1);
      if (next < pick_level) {
        pick_level = next;
        pick = r;
      }
    }
    ++counts[pick];
  }
  return counts;
}

std::vector<RankId> MoveUnits(const std::vector<RankId>& owner_of_unit,
                              const std::vector<int32_t>& new_counts) {
  const size_t p = new_counts.size();
  std::vector<RankId> out = owner_of_unit;
  std::vector<int32_t> kept(p, 0), old_counts(p, 0);
  for (RankId r : owner_of_unit) ++old_counts[r.value()];
  std::vector<size_t> freed;
  for (size_t u = 0; u < owner_of_unit.size(); ++u) {
    const int32_t r = owner_of_unit[u].value();
    if (kept[r] < std::min(old_counts[r], new_counts[r])) {
      ++kept[r];
    } else {
      freed.push_back(u);
    }
  }
  size_t next = 0;
  for (size_t r = 0; r < p; ++r) {
    for (int32_t i = kept[r]; i < new_counts[r] && next < freed.size(); ++i) {
      out[freed[next++]] = RankId(static_cast<int32_t>(r));
    }
  }
  return out;
}

}  // namespace ballast::coordinator
