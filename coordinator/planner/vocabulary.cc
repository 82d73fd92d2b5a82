#include "coordinator/planner/vocabulary.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace ballast::coordinator {

absl::string_view CandidateKindName(CandidateKind kind) {
  switch (kind) {
    case CandidateKind::kAllLocal:
      return "all-local";
    case CandidateKind::kResize:
      return "resize";
    case CandidateKind::kMigrate:
      return "migrate";
    case CandidateKind::kAuto:
      return "auto";
    case CandidateKind::kReshard:
      return "reshard";
    case CandidateKind::kCurrent:
      return "current";
    case CandidateKind::kReplicas:
      return "replicas";
  }
  return "unknown";
}

int64_t PruneBudget(double fraction, int64_t units) {
  return static_cast<int64_t>(std::floor(fraction * static_cast<double>(units) + 1e-9));
}

absl::Status ValidatePlannerRanks(const std::vector<PlannerRank>& ranks) {
  const size_t p = ranks.size();
  if (p == 0) return absl::InvalidArgumentError("ranks is empty");
  bool any_active = false;
  for (size_t r = 0; r < p; ++r) {
    const PlannerRank& rank = ranks[r];
    if (!std::isfinite(rank.seconds_per_unit) || rank.seconds_per_unit <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ranks[", r, "].seconds_per_unit ", rank.seconds_per_unit, " must be finite and > 0"));
    }
    if (!std::isfinite(rank.fixed_seconds) || rank.fixed_seconds < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ranks[", r, "].fixed_seconds ", rank.fixed_seconds, " must be finite and >= 0"));
    }
    if (rank.owned_units < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("ranks[", r, "].owned_units ", rank.owned_units, " must be >= 0"));
    }
    any_active = any_active || !rank.cordoned;
  }
  if (!any_active) {
    return absl::InvalidArgumentError(
        absl::StrCat("ranks: all ", p, " ranks are cordoned; at least one must compute"));
  }
  return absl::OkStatus();
}

bool OffloadsRefused(const PlannerInput& input) {
  return input.offloads_refused && std::none_of(input.ranks.begin(), input.ranks.end(),
                                                [](const PlannerRank& r) { return r.cordoned; });
}

bool TakesOffloads(const PlannerInput& input, size_t r) {
  return !input.ranks[r].takes_no_offloads ||
         std::any_of(input.ranks.begin(), input.ranks.end(),
                     [](const PlannerRank& rank) { return rank.cordoned; });
}

absl::Status ValidatePlannerInput(const PlannerInput& input) {
  if (absl::Status s = ValidatePlannerRanks(input.ranks); !s.ok()) return s;
  const size_t p = input.ranks.size();
  const double tau = input.transfer_seconds_per_unit;
  if (!std::isfinite(tau) || tau < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("transfer_seconds_per_unit ", tau, " must be finite and >= 0"));
  }
  for (const auto& [name, value] :
       {std::pair<const char*, double>{"move_seconds_per_unit", input.move_seconds_per_unit},
        {"reshard_horizon_steps", input.reshard_horizon_steps}}) {
    if (!std::isfinite(value) || value < 0) {
      return absl::InvalidArgumentError(absl::StrCat(name, " ", value, " must be finite and >= 0"));
    }
  }
  std::vector<int64_t> counted(p, 0);
  for (size_t u = 0; u < input.owner_of_unit.size(); ++u) {
    const int32_t owner = input.owner_of_unit[u].value();
    if (owner < 0 || static_cast<size_t>(owner) >= p) {
      return absl::InvalidArgumentError(
          absl::StrCat("owner_of_unit[", u, "] = ", owner, " out of range [0, ", p, ")"));
    }
    ++counted[owner];
  }
  if (!input.unit_work.empty() && input.unit_work.size() != input.owner_of_unit.size()) {
    return absl::InvalidArgumentError(absl::StrCat("unit_work has ", input.unit_work.size(),
                                                   " values for ", input.owner_of_unit.size(),
                                                   " units"));
  }
  for (size_t u = 0; u < input.unit_work.size(); ++u) {
    if (!std::isfinite(input.unit_work[u]) || input.unit_work[u] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("unit_work[", u, "] ", input.unit_work[u], " must be finite and >= 0"));
    }
  }
  for (size_t r = 0; r < p; ++r) {
    if (counted[r] != input.ranks[r].owned_units) {
      return absl::InvalidArgumentError(
          absl::StrCat("ranks[", r, "].owned_units ", input.ranks[r].owned_units,
                       " but owner_of_unit gives rank ", r, " ", counted[r], " units"));
    }
  }
  return absl::OkStatus();
}

}  // namespace ballast::coordinator
