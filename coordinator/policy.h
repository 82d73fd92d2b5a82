// A job's balancing policy: what the coordinator may do to the job's TP groups, and how
// eagerly. Operators set it through the admin API (ballastctl policy set); it persists in
// the policy store.
//
//   JobPolicy policy;
//   policy.mode = BalanceMode::kMigrate;
//   policy.max_pruned_fraction_rank = 0.0;
//   if (absl::Status s = ValidatePolicy(policy); !s.ok()) return s;  // names the field
#ifndef BALLAST_COORDINATOR_POLICY_H_
#define BALLAST_COORDINATOR_POLICY_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "ballast/plan.h"

namespace ballast::coordinator {

// Off and observe both leave a group all-local: a plan a balancing mode left in force is
// ended once (pushed all-local), and nothing else is pushed.
enum class BalanceMode {
  kOff,      // no measurement-driven plans, no prediction
  kObserve,  // measure, explain and predict what the others would do
  kResize,   // ZERO-resizing only (pruning)
  kMigrate,  // migration (offload) and resharding only: exact
  kAuto,     // the planner weighs pruning, offloading and resharding
};

absl::string_view BalanceModeName(BalanceMode mode);
// Whether the mode pushes balancing plans (resize, migrate, auto); off and observe push
// all-local.
inline bool Balances(BalanceMode mode) {
  return mode != BalanceMode::kOff && mode != BalanceMode::kObserve;
}
absl::StatusOr<BalanceMode> ParseBalanceMode(absl::string_view name);

struct JobPolicy {
  BalanceMode mode = BalanceMode::kAuto;
  // Pruning budget: at most this fraction of a rank's units, and of a group's units.
  double max_pruned_fraction_rank = 0.5;
  double max_pruned_fraction_group = 0.25;
  // What pruned units contribute, and which units go first (worker-side policies, carried
  // to the workers by every plan).
  Imputation imputation = Imputation::kMean;
  Priority priority = Priority::kChange;
  // The accuracy price of pruning, in seconds of step time per unit fraction of the
  // group pruned: the planner minimises step_time + accuracy_weight * pruned / total.
  double accuracy_weight_seconds = 1.0;
  // A rank straggles when its seconds per unit exceed the group's median by this fraction.
  double straggler_threshold = 0.10;
  // A new plan replaces the current one only if it improves the objective by this fraction.
  double hysteresis = 0.05;
  // How long a straggler must persist before the planner reshards (a chronic straggler)
  // rather than offloading or pruning step by step; and how long a group must then be
  // calm before its uneven split goes back to even.
  absl::Duration reshard_after = absl::Seconds(60);
  // How often workers report timings.
  absl::Duration report_period = absl::Seconds(1);
  // Mixture-of-experts blocks: each expert takes at most this factor times its even
  // share of a Forward's tokens (T * top_k / experts), the rest dropped (BlockPlan::
  // capacity_factor, the resize analog for experts: faster, not exact). 0: no cap, the
  // default; carried by every plan for blocks whose units divide once their loads are known.
  double expert_capacity_factor = 0;
  friend bool operator==(const JobPolicy&, const JobPolicy&) = default;
};

// OK, or INVALID_ARGUMENT naming the first bad field (e.g. "max_pruned_fraction_rank 1.5
// out of range [0, 1]").
absl::Status ValidatePolicy(const JobPolicy& policy);

// A group an operator holds at a fixed plan (`ballastctl hold`; the plan is
// coordinator/planner/held_plan.h's HeldBlockPlan): `rank` keeps (1 - reshard_fraction) of
// the units the even split gives it, rounded to the nearest unit, the rest resharded to
// the other ranks; of what it keeps, its helpers compute offload_fraction, rounded the same
// way. Both spread over the ranks that are not cordoned, as evenly as whole units allow
// (the lower ranks take the remainder). Relative to the even split, not to what the group
// runs, so that a hold is the same plan whatever came before it.
struct GroupHold {
  int32_t rank = 0;
  double offload_fraction = 0;
  double reshard_fraction = 0;
  friend bool operator==(const GroupHold&, const GroupHold&) = default;
};

// INVALID_ARGUMENT naming the field: a fraction outside [0, 1] or not finite, a negative
// rank, and, when the group's size is known, the rank outside [0, group_size) or a group
// of fewer than 2 ranks (nobody to hand units to).
absl::Status ValidateHold(const GroupHold& hold, std::optional<int32_t> group_size);

// "rank 1: offload 25%, reshard 0%".
std::string DescribeHold(const GroupHold& hold);

}  // namespace ballast::coordinator

#endif  // BALLAST_COORDINATOR_POLICY_H_
