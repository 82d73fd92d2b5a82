// Text for operators: a block's decision explained (ExplainDecision, part of the
// planner's interface: planner.h includes this header), and the numbers and plans as the
// explanations print them (internal to the planner).
#ifndef BALLAST_COORDINATOR_PLANNER_EXPLAIN_H_
#define BALLAST_COORDINATOR_PLANNER_EXPLAIN_H_

#include <cstdint>
#include <string>

#include "ballast/plan.h"
#include "coordinator/planner/vocabulary.h"
#include "coordinator/policy.h"

namespace ballast::coordinator {

// Inputs, candidates, the chosen plan and its predicted step time, as text for operators.
// `input` and `policy` must be those PlanBlock decided `decision` with.
std::string ExplainDecision(const PlannerInput& input, const JobPolicy& policy,
                            const BlockDecision& decision);

namespace planner_internal {

// Six significant digits: "0.00125".
std::string Num(double v);

// "prune 7:32; offload 7->0:4 7->1:4; reshard to 68,68,34", or "all local".
std::string DescribePlan(const BlockPlan& plan, int32_t ranks);

}  // namespace planner_internal
}  // namespace ballast::coordinator

#endif  // BALLAST_COORDINATOR_PLANNER_EXPLAIN_H_
