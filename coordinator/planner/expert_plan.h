// Planning a block whose units divide (a mixture of experts) by its loads: the experts'
// predicted tokens (PlannerInput::unit_work) rather than their count. Routing sends uneven
// token counts to the experts, so an expert is not a fixed amount of work and the count
// planner (search.h) would price a hot expert like a cold one. Here the candidates are
// all-local (the experts where they are), the replicas that balance the loads
// (BalanceExperts, in expert_balance.h: slices of hot experts' tokens computed by ranks
// with time to spare, each paying the transfer of its expert's weights and gradients), a
// reshard once the imbalance persists (BalanceOwnership's few moves of whole experts, plus
// the replicas that still pay on the new ownership) and the plan in force priced on the
// new loads, kept unless the new plan is better by the hysteresis. A slow rank is balanced
// the same way: its seconds per token price its experts.
//
// Replicas are paid every step; a reshard once, so it answers a skew that lasts: it is
// priced when the loads have been unbalanced on the ownership for reshard_after
// (PlannerInput::skew_lasted, judged by the coordinator; a slow rank's skew counts, as
// the loads are weighed by the ranks' speeds), and chosen when better than the best plan
// on the ownership the experts have, its moves paid over reshard_horizon_steps. The way
// back is the same rule: an ownership the loads have left (uniform again, or a straggler
// recovered) is as unbalanced as any, and is resharded once that lasts.
//
// Called by PlanBlock (planner.h) for the inputs PlansByLoads accepts; the others go to
// the count planner, which gives, prunes or reshards whole experts: a cordon (replicas
// cannot empty a rank) and the resize mode (it only prunes).
#ifndef BALLAST_COORDINATOR_PLANNER_EXPERT_PLAN_H_
#define BALLAST_COORDINATOR_PLANNER_EXPERT_PLAN_H_

#include <vector>

#include "absl/status/statusor.h"
#include "ballast/plan.h"
#include "coordinator/planner/vocabulary.h"
#include "coordinator/policy.h"

namespace ballast::coordinator {

// Whether `input` is planned by its loads: unit_work is given, no rank is cordoned, and
// the mode moves work (not resize).
bool PlansByLoads(const PlannerInput& input, const JobPolicy& policy);

// The band within which all-local counts as balanced: the straggler threshold, or half
// of it while `current` (the plan in force; nullptr: none) has replicas. A learned
// router's loads wander by the threshold from step to step, and re-splitting for that
// moved weights for nothing (the GPT-MoE changed plans every other report, and ran
// slower); replicas end only within half of it, or loads hovering at the threshold would
// start and end them on alternate rounds.
double BalancedBand(const JobPolicy& policy, const BlockPlan* current);

// How far all-local is from balanced on `input`'s loads, speeds and ownership, in the
// band the plan in force `current` (nullptr: none) sets (BalancedBand). PlanExperts pushes
// all-local when it is balanced; the coordinator's judge counts how long it has not been
// (PlannerInput::skew_lasted) and waits out a marginal skew (PlannerInput::skew_waits), on
// the same figures, so that the two agree on what balanced means.
struct LoadsSkew {
  // All-local's predicted step over the balanced ideal (every rank ending together with
  // nothing transferred); 1 when the ideal is 0.
  double ratio = 1;
  double band = 0;           // BalancedBand(policy, current)
  bool balanced = true;      // all-local within the band of the ideal
  bool replicating = false;  // `current` has replicas
};
// INVALID_ARGUMENT, as PlanBlock's, for input it would refuse or without loads.
absl::StatusOr<LoadsSkew> SkewOfLoads(const PlannerInput& input, const JobPolicy& policy,
                                      const BlockPlan* current);

namespace planner_internal {

// The decision for an input PlansByLoads accepts, validated by the caller (PlanBlock).
// `current` as PlanBlock's (nullptr: none, so no hysteresis).
absl::StatusOr<BlockDecision> PlanExperts(const PlannerInput& input, const JobPolicy& policy,
                                          const BlockPlan* current);

// Each rank's predicted work under `plan`'s ownership (when it reshards) and replicas, in
// unit_work's units (tokens): where the loads' tokens go. What explanations print.
std::vector<double> RankWork(const PlannerInput& input, const BlockPlan& plan);

}  // namespace planner_internal
}  // namespace ballast::coordinator

#endif  // BALLAST_COORDINATOR_PLANNER_EXPERT_PLAN_H_
