// A given plan for one block, checked and priced: its validity is the workers' own
// (ballast::ValidatePlan, the one validator of a plan's shape), and on top of it the
// planner's rules (the mode's techniques, the prune budgets, the cordons) and its cost
// under the model. Internal to the planner: EvaluatePlan (planner.h) and the plan in force
// (candidates.cc) are priced here.
#ifndef BALLAST_COORDINATOR_PLANNER_PLAN_COST_H_
#define BALLAST_COORDINATOR_PLANNER_PLAN_COST_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ballast/plan.h"
#include "coordinator/planner/vocabulary.h"
#include "coordinator/policy.h"

namespace ballast::coordinator::planner_internal {

// The cost of `plan` under `input` and `policy`, which must be valid (ValidatePlannerInput,
// ValidatePolicy: planning checked them where it began). INVALID_ARGUMENT if the plan is
// malformed for the block: ballast::ValidatePlan's verdict, what the workers would
// answer, message included ("plan v1 block 3: offloads[1].helper 9 out of range [0, 4)";
// the version is a placeholder, a block's plan has none). FAILED_PRECONDITION if it
// breaks the mode's techniques, a budget or a cordon.
absl::StatusOr<PlanCost> PricePlan(const PlannerInput& input, const JobPolicy& policy,
                                   const BlockPlan& plan);

}  // namespace ballast::coordinator::planner_internal

#endif  // BALLAST_COORDINATOR_PLANNER_PLAN_COST_H_
