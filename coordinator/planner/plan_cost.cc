#include "coordinator/planner/plan_cost.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/planner/problem.h"

namespace ballast::coordinator::planner_internal {

absl::StatusOr<PlanCost> PricePlan(const PlannerInput& input, const JobPolicy& policy,
                                   const BlockPlan& plan) {
  // Before the validator, whose reason ("replicas need a block whose units divide") would
  // be wrong for an expert block planned by counts for a while.
  if (!plan.replicas.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("block ", plan.block.value(),
                     ": replicas are priced only on the experts' loads (expert_plan.h); "
                     "planned by whole units here (a cordon, the resize mode, or no loads "
                     "reported)"));
  }
  const BlockShape shape{plan.block, static_cast<int32_t>(input.owner_of_unit.size()),
                         input.owner_of_unit};
  if (absl::Status s = ValidateBlockPlan(plan, shape, static_cast<int32_t>(input.ranks.size()));
      !s.ok()) {
    return s;
  }
  // From here the plan is well formed: ranks in range, no rank pruning and offloading more
  // than it owns, every offload a distinct pair of distinct ranks.
  const int32_t p = static_cast<int32_t>(input.ranks.size());
  const size_t total = input.owner_of_unit.size();
  PlanCost cost;
  std::vector<int64_t> owned(p, 0);
  if (plan.owner_of_unit.empty()) {
    for (int32_t r = 0; r < p; ++r) owned[r] = input.ranks[r].owned_units;
  } else {
    for (size_t u = 0; u < total; ++u) {
      ++owned[plan.owner_of_unit[u].value()];
      if (plan.owner_of_unit[u] != input.owner_of_unit[u]) ++cost.moved_units;
    }
  }
  std::vector<int64_t> z(p, 0), y(p, 0), x(p, 0);
  if (!plan.pruned_units.empty())
    std::copy(plan.pruned_units.begin(), plan.pruned_units.end(), z.begin());
  for (const Offload& o : plan.offloads) {
    y[o.owner.value()] += o.units;
    x[o.helper.value()] += o.units;
  }
  const BalanceMode mode = PlanningMode(policy.mode);
  if (!TransfersAllowed(mode) && (!plan.offloads.empty() || !plan.owner_of_unit.empty())) {
    return absl::FailedPreconditionError("mode resize: the plan offloads or reshards");
  }
  const int64_t group_cap =
      PrunesAllowed(mode) ? PruneBudget(policy.max_pruned_fraction_group, total) : 0;
  int64_t pruned = 0;
  for (int32_t r = 0; r < p; ++r) {
    const int64_t cap =
        PrunesAllowed(mode) ? PruneBudget(policy.max_pruned_fraction_rank, owned[r]) : 0;
    if (z[r] > cap) {
      return absl::FailedPreconditionError(
          absl::StrCat("plan.pruned_units[", r, "] = ", z[r], " exceeds the budget ", cap,
                       " (mode ", BalanceModeName(policy.mode), ", max_pruned_fraction_rank ",
                       policy.max_pruned_fraction_rank, " of ", owned[r], " units)"));
    }
    pruned += z[r];
  }
  if (pruned > group_cap) {
    return absl::FailedPreconditionError(
        absl::StrCat("plan prunes ", pruned, " units, over the group budget ", group_cap,
                     " (max_pruned_fraction_group ", policy.max_pruned_fraction_group, ")"));
  }
  const double tau = input.transfer_seconds_per_unit;
  cost.rank_seconds.resize(p);
  for (int32_t r = 0; r < p; ++r) {
    const int64_t u = owned[r] - z[r] - y[r] + x[r];
    if (input.ranks[r].cordoned && (u != 0 || x[r] != 0)) {
      return absl::FailedPreconditionError(
          absl::StrCat("rank ", r, " is cordoned but the plan has it compute ", u, " units"));
    }
    cost.rank_seconds[r] =
        Load(input.ranks[r].fixed_seconds, input.ranks[r].seconds_per_unit, tau, u, y[r] + x[r]);
    cost.step_seconds = std::max(cost.step_seconds, cost.rank_seconds[r]);
    cost.offloaded_units += static_cast<int32_t>(y[r]);
  }
  cost.pruned_units = static_cast<int32_t>(pruned);
  const double lambda =
      total > 0 ? policy.accuracy_weight_seconds / static_cast<double>(total) : 0.0;
  cost.objective = cost.step_seconds + lambda * static_cast<double>(pruned);
  return cost;
}

}  // namespace ballast::coordinator::planner_internal
