// Planning a block whose units divide (a mixture of experts) by its loads: the experts'
// predicted tokens (PlannerInput::unit_work) rather than their count. Routing sends uneven
// token counts to the experts, so an expert is not a fixed amount of work and the count
// planner (search.h) would price a hot expert like a cold one. Here the candidates are
// all-local (static placement), the replicas that balance the loads (BalanceExperts, in
// expert_balance.h: slices of hot experts' tokens computed by ranks with time to spare,
// each paying the transfer of its expert's weights and gradients) and the plan in force
// priced on the new loads, kept unless the new plan is better by the hysteresis. A slow
// rank is balanced the same way: its seconds per token price its experts.
//
// Called by PlanBlock (planner.h) for the inputs PlansByLoads accepts; the others go to
// the count planner, which gives, prunes or reshards whole experts: a cordon (replicas
// cannot empty a rank), a chronic straggler (resharded for good), an uneven split (kept
// balanced, and taken back to even once calm has lasted) and the resize mode (it only
// prunes).
#ifndef BALLAST_COORDINATOR_PLANNER_EXPERT_PLAN_H_
#define BALLAST_COORDINATOR_PLANNER_EXPERT_PLAN_H_

#include <vector>

#include "absl/status/statusor.h"
#include "ballast/plan.h"
#include "coordinator/planner/vocabulary.h"
#include "coordinator/policy.h"

namespace ballast::coordinator {

// Whether `input` is planned by its loads: unit_work is given, no rank is cordoned or
// chronic, no rank owns more than its even share rounded up, and the mode moves work (not
// resize).
bool PlansByLoads(const PlannerInput& input, const JobPolicy& policy);

namespace planner_internal {

// The decision for an input PlansByLoads accepts, validated by the caller (PlanBlock).
// `current` as PlanBlock's (nullptr: none, so no hysteresis).
absl::StatusOr<BlockDecision> PlanExperts(const PlannerInput& input, const JobPolicy& policy,
                                          const BlockPlan* current);

// Each rank's predicted work under `plan`'s replicas, in unit_work's units (tokens): where
// the loads' tokens go. What explanations print.
std::vector<double> RankWork(const PlannerInput& input, const BlockPlan& plan);

}  // namespace planner_internal
}  // namespace ballast::coordinator

#endif  // BALLAST_COORDINATOR_PLANNER_EXPERT_PLAN_H_
