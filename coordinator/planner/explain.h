// Text for operators: numbers and plans as the planner's explanations print them.
// Internal to the planner (ExplainDecision in planner.h is the interface).
#ifndef BALLAST_COORDINATOR_PLANNER_EXPLAIN_H_
#define BALLAST_COORDINATOR_PLANNER_EXPLAIN_H_

#include <cstdint>
#include <string>

#include "ballast/plan.h"

namespace ballast::coordinator::planner_internal {

// Six significant digits: "0.00125".
std::string Num(double v);

// "prune 7:32; offload 7->0:4 7->1:4; reshard to 68,68,34", or "all local".
std::string DescribePlan(const BlockPlan& plan, int32_t ranks);

}  // namespace ballast::coordinator::planner_internal

#endif  // BALLAST_COORDINATOR_PLANNER_EXPLAIN_H_
