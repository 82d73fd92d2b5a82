// Held plans: a group an operator holds at a fixed plan (`ballastctl hold`), the planner
// not consulted. What a static baseline needs: the interleaved benchmark holds a group at
// fixed offload and reshard fractions of its straggler's units, cycle after cycle, and the
// best of them is the oracle that the planner's decisions are judged against. Operators
// use it to pin a plan they trust while they look into a rank. Part of the planner
// library; pure functions.
//
//   GroupHold hold{.rank = 1, .offload_fraction = 0.25, .reshard_fraction = 0};
//   BALLAST_RETURN_IF_ERROR(ValidateHold(hold, group_size));  // policy.h
//   BALLAST_ASSIGN_OR_RETURN(BlockPlan plan, HeldBlockPlan(hold, shape, cordoned, in_force));
#ifndef BALLAST_COORDINATOR_PLANNER_HELD_PLAN_H_
#define BALLAST_COORDINATOR_PLANNER_HELD_PLAN_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ballast/plan.h"
#include "coordinator/policy.h"  // GroupHold, ValidateHold

namespace ballast::coordinator {

// The block's plan under `hold`, for a block of `shape` (its current ownership is what the
// workers run) in a group of `cordoned.size()` ranks. Its owner_of_unit is set when the
// held ownership is not the even split, differs from the current one, or `in_force`
// already sets one: restated, so the plan does not change again once the workers have
// moved, nor after a coordinator restart. FAILED_PRECONDITION
// when every other rank is cordoned and the hold moves units; the hold's own errors as
// ValidateHold (policy.h).
absl::StatusOr<BlockPlan> HeldBlockPlan(const GroupHold& hold, const BlockShape& shape,
                                        const std::vector<bool>& cordoned,
                                        const BlockPlan* in_force);

}  // namespace ballast::coordinator

#endif  // BALLAST_COORDINATOR_PLANNER_HELD_PLAN_H_
