#include "coordinator/fixed_costs.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ballast::coordinator {

absl::StatusOr<FixedCostsMode> ParseFixedCostsMode(absl::string_view text) {
  if (absl::EqualsIgnoreCase(text, "auto")) return FixedCostsMode::kAuto;
  if (absl::EqualsIgnoreCase(text, "off")) return FixedCostsMode::kOff;
  if (absl::EqualsIgnoreCase(text, "on")) return FixedCostsMode::kOn;
  // What the flag took when it was a bool (true, false, 1, 0, yes, no, ...).
  if (bool on = false; absl::SimpleAtob(text, &on)) {
    return on ? FixedCostsMode::kOn : FixedCostsMode::kOff;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("fixed costs mode '", text, "' is not one of off, auto, on"));
}

absl::StatusOr<ThrottledPrice> ParseThrottledPrice(absl::string_view text) {
  if (absl::EqualsIgnoreCase(text, "timers")) return ThrottledPrice::kTimers;
  if (absl::EqualsIgnoreCase(text, "step")) return ThrottledPrice::kStep;
  if (absl::EqualsIgnoreCase(text, "floor")) return ThrottledPrice::kFloor;
  return absl::InvalidArgumentError(
      absl::StrCat("throttled price '", text, "' is not one of timers, step, floor"));
}

absl::StatusOr<FixedCosts> EstimateFixedCosts(const std::vector<double>& collective_seconds,
                                              const std::vector<double>& slowdowns,
                                              const ThrottledPriced& throttled) {
  if (collective_seconds.size() != slowdowns.size()) {
    return absl::InvalidArgumentError(absl::StrCat("collective_seconds has ",
                                                   collective_seconds.size(),
                                                   " ranks but slowdowns has ", slowdowns.size()));
  }
  const size_t p = collective_seconds.size();
  if (!throttled.ranks.empty() && throttled.ranks.size() != p) {
    return absl::InvalidArgumentError(absl::StrCat("throttled ranks has ", throttled.ranks.size(),
                                                   " ranks but collective_seconds has ", p));
  }
  const std::vector<double>& floors = throttled.straggling_floors;
  if (!floors.empty() && floors.size() != p) {
    return absl::InvalidArgumentError(absl::StrCat("straggling floors has ", floors.size(),
                                                   " ranks but collective_seconds has ", p));
  }
  if (!std::isfinite(throttled.calm_collective_seconds)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "calm collective seconds ", throttled.calm_collective_seconds, " must be finite"));
  }
  for (size_t r = 0; r < p; ++r) {
    if (!std::isfinite(collective_seconds[r]) || !std::isfinite(slowdowns[r])) {
      return absl::InvalidArgumentError(absl::StrCat("rank ", r, ": collective seconds ",
                                                     collective_seconds[r], ", slowdown ",
                                                     slowdowns[r], " must be finite"));
    }
    if (!floors.empty() && !(std::isfinite(floors[r]) && floors[r] >= 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", r, ": straggling floor ", floors[r], " must be finite and >= 0"));
    }
  }
  auto measured = [&](size_t r) { return collective_seconds[r] > 0 && slowdowns[r] > 0; };
  auto priced = [&](size_t r) { return !throttled.ranks.empty() && throttled.ranks[r]; };
  const bool any_priced =
      throttled.calm_collective_seconds > 0 &&
      std::find(throttled.ranks.begin(), throttled.ranks.end(), true) != throttled.ranks.end();
  // The collective seconds per unit of slowdown of the rank that waits least; where a rank
  // is priced as throttled, the calm cost (its slowdown was measured against it).
  double base = std::numeric_limits<double>::infinity();
  if (any_priced) {
    base = throttled.calm_collective_seconds;
  } else {
    for (size_t r = 0; r < p; ++r) {
      if (measured(r)) base = std::min(base, collective_seconds[r] / slowdowns[r]);
    }
  }
  FixedCosts out;
  out.excess.assign(p, 0);
  std::vector<double> fixed(p, 0);
  double least = std::numeric_limits<double>::infinity();
  for (size_t r = 0; r < p; ++r) {
    if (!measured(r)) continue;
    if (!any_priced || !priced(r)) {
      fixed[r] = std::min(collective_seconds[r], slowdowns[r] * base);
    } else if (!floors.empty() && floors[r] > 0) {
      fixed[r] = floors[r];  // floor
    } else {
      fixed[r] = slowdowns[r] * base;  // step
    }
    least = std::min(least, fixed[r]);
  }
  if (!std::isfinite(least)) return out;  // no rank measured
  out.measured = true;
  out.common = least;
  for (size_t r = 0; r < p; ++r) {
    if (measured(r)) out.excess[r] = std::max(0.0, fixed[r] - least);
  }
  return out;
}

std::string DescribeFixedCosts(const FixedCosts& costs) {
  if (!costs.measured) return "fixed costs: no collective time measured yet";
  std::string out = absl::StrFormat(
      "fixed seconds a step beyond %.4g s of collectives (balanced with the units):", costs.common);
  for (size_t r = 0; r < costs.excess.size(); ++r) {
    absl::StrAppend(&out, absl::StrFormat(" %d +%.4g", r, costs.excess[r]));
  }
  return out;
}

}  // namespace ballast::coordinator
