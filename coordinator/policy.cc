#include "coordinator/policy.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/text.h"

namespace ballast::coordinator {

absl::string_view BalanceModeName(BalanceMode mode) {
  switch (mode) {
    case BalanceMode::kOff:
      return "off";
    case BalanceMode::kObserve:
      return "observe";
    case BalanceMode::kResize:
      return "resize";
    case BalanceMode::kMigrate:
      return "migrate";
    case BalanceMode::kAuto:
      return "auto";
  }
  return "unknown";
}

absl::StatusOr<BalanceMode> ParseBalanceMode(absl::string_view name) {
  for (BalanceMode m : {BalanceMode::kOff, BalanceMode::kObserve, BalanceMode::kResize,
                        BalanceMode::kMigrate, BalanceMode::kAuto}) {
    if (name == BalanceModeName(m)) return m;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "mode ", Excerpt(name), " unknown; expected off, observe, resize, migrate or auto"));
}

namespace {

absl::Status CheckFraction(absl::string_view field, double value) {
  if (!std::isfinite(value) || value < 0 || value > 1) {
    return absl::InvalidArgumentError(absl::StrCat(field, " ", value, " out of range [0, 1]"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidatePolicy(const JobPolicy& p) {
  if (BalanceModeName(p.mode) == "unknown") {
    return absl::InvalidArgumentError(absl::StrCat("mode ", static_cast<int>(p.mode), " unknown"));
  }
  if (ImputationName(p.imputation) == "unknown") {
    return absl::InvalidArgumentError(
        absl::StrCat("imputation ", static_cast<int>(p.imputation), " unknown"));
  }
  if (PriorityName(p.priority) == "unknown") {
    return absl::InvalidArgumentError(
        absl::StrCat("priority ", static_cast<int>(p.priority), " unknown"));
  }
  for (auto [field, value] : {std::pair<absl::string_view, double>{"max_pruned_fraction_rank",
                                                                   p.max_pruned_fraction_rank},
                              {"max_pruned_fraction_group", p.max_pruned_fraction_group},
                              {"hysteresis", p.hysteresis}}) {
    if (absl::Status s = CheckFraction(field, value); !s.ok()) return s;
  }
  if (!std::isfinite(p.accuracy_weight_seconds) || p.accuracy_weight_seconds < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "accuracy_weight_seconds ", p.accuracy_weight_seconds, " must be finite and >= 0"));
  }
  // Past 1000 x the even share a cap drops nothing on any real router: a typo, not a policy.
  if (!std::isfinite(p.expert_capacity_factor) || p.expert_capacity_factor < 0 ||
      p.expert_capacity_factor > 1000) {
    return absl::InvalidArgumentError(absl::StrCat("expert_capacity_factor ",
                                                   p.expert_capacity_factor,
                                                   " out of range [0, 1000] (0: no cap)"));
  }
  if (!std::isfinite(p.straggler_threshold) || p.straggler_threshold < 0 ||
      p.straggler_threshold > 10) {
    return absl::InvalidArgumentError(
        absl::StrCat("straggler_threshold ", p.straggler_threshold, " out of range [0, 10]"));
  }
  // A week bounds "reshard only after a long while" far beyond any job's need, and keeps
  // the arithmetic on it (now + reshard_after) away from overflow.
  if (p.reshard_after < absl::ZeroDuration() || p.reshard_after > absl::Hours(24 * 7)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reshard_after ", absl::FormatDuration(p.reshard_after), " out of range [0, 168h]"));
  }
  if (p.report_period < absl::Milliseconds(10) || p.report_period > absl::Minutes(10)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "report_period ", absl::FormatDuration(p.report_period), " out of range [10ms, 10m]"));
  }
  return absl::OkStatus();
}

absl::Status ValidateHold(const GroupHold& hold, std::optional<int32_t> group_size) {
  if (group_size.has_value() && *group_size < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("hold: the group has ", *group_size, " rank; a hold needs at least 2"));
  }
  if (hold.rank < 0 || (group_size.has_value() && hold.rank >= *group_size)) {
    return absl::InvalidArgumentError(
        group_size.has_value()
            ? absl::StrCat("hold: rank ", hold.rank, " out of range [0, ", *group_size, ")")
            : absl::StrCat("hold: rank ", hold.rank, " must be >= 0"));
  }
  // The policy's fraction rule, its message prefixed as a hold's.
  if (absl::Status s = CheckFraction("hold: offload_fraction", hold.offload_fraction); !s.ok()) {
    return s;
  }
  return CheckFraction("hold: reshard_fraction", hold.reshard_fraction);
}

std::string DescribeHold(const GroupHold& hold) {
  return absl::StrFormat("rank %d: offload %g%%, reshard %g%%", hold.rank,
                         100 * hold.offload_fraction, 100 * hold.reshard_fraction);
}

}  // namespace ballast::coordinator
