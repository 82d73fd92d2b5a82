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

absl::StatusOr<FixedCosts> EstimateFixedCosts(const std::vector<double>& collective_seconds,
                                              const std::vector<double>& slowdowns,
                                              const StepPriced& step) {
  if (collective_seconds.size() != slowdowns.size()) {
    return absl::InvalidArgumentError(absl::StrCat("collective_seconds has ",
                                                   collective_seconds.size(),
                                                   " ranks but slowdowns has ", slowdowns.size()));
  }
  const size_t p = collective_seconds.size();
  if (!step.ranks.empty() && step.ranks.size() != p) {
    return absl::InvalidArgumentError(absl::StrCat("step-priced ranks has ", step.ranks.size(),
                                                   " ranks but collective_seconds has ", p));
  }
  if (!std::isfinite(step.calm_collective_seconds)) {
    return absl::InvalidArgumentError(
        absl::StrCat("calm collective seconds ", step.calm_collective_seconds, " must be finite"));
  }
  for (size_t r = 0; r < p; ++r) {
    if (!std::isfinite(collective_seconds[r]) || !std::isfinite(slowdowns[r])) {
      return absl::InvalidArgumentError(absl::StrCat("rank ", r, ": collective seconds ",
                                                     collective_seconds[r], ", slowdown ",
                                                     slowdowns[r], " must be finite"));
    }
  }
  auto measured = [&](size_t r) { return collective_seconds[r] > 0 && slowdowns[r] > 0; };
  auto priced = [&](size_t r) { return !step.ranks.empty() && step.ranks[r]; };
  const bool by_step = step.calm_collective_seconds > 0 &&
                       std::find(step.ranks.begin(), step.ranks.end(), true) != step.ranks.end();
  // The collective seconds per unit of slowdown of the rank that waits least; where a rank
  // is priced by its step, the calm cost its slowdown was measured against.
  double base = std::numeric_limits<double>::infinity();
  if (by_step) {
    base = step.calm_collective_seconds;
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
    fixed[r] = by_step && priced(r) ? slowdowns[r] * base
                                    : std::min(collective_seconds[r], slowdowns[r] * base);
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
