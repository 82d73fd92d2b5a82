// The planner: for one TP block of one group, decides how many of each rank's units to
// prune, how many to offload and to whom, and whether to reshard, from the ranks' measured
// seconds per unit and the job's policy. A pure library: no I/O, no threads, no clock.
//
// The model (design brief §2 and §5). Rank r owns n_r of the block's N units and computes
// one in c_r seconds, after f_r seconds of its share of the block that no plan moves (the
// block's fixed compute, its collectives' own cost: an affine cost per rank, f_r + c_r per
// unit). An offloaded unit
// costs each of its two ranks tau seconds a step (weights out once, weight gradients back
// once per micro-batch). A plan prunes z_r of r's units, offloads y_r of them and has r
// compute x_r units of others, so r computes u_r = n_r - z_r - y_r + x_r units and
//
//   load_r = f_r + c_r * u_r + tau * (y_r + x_r),   T = max_r load_r,
//   objective = T + accuracy_weight_seconds * (sum_r z_r) / N.
//
// The planner minimises the objective exactly, at unit granularity, subject to the
// policy's prune budgets (z_r <= floor(f_rank * n_r), sum z <= floor(f_group * N)), the
// mode's techniques (resize: prune only; migrate: offload and reshard only; auto: all),
// the cordons (a cordoned rank computes nothing) and the ranks that take no offloads
// (x_r 0: PlannerRank::takes_no_offloads, lifted under a cordon). When a rank is chronic
// or cordoned it also prices a reshard to the water-filled ownership (halfway there from
// a split already uneven, no cordon: ownership.h's HalfwayCounts), chosen when it beats
// the best plan on the current ownership by the hysteresis (the job's, even inside a
// dwell) and (no cordon) by the straggler threshold t / (1 + t), or, the first reshard
// of a chronic straggler in place of offloads, when cheaper at all; and it keeps the
// current plan unless the new one is better by the policy's hysteresis (on a split a
// straggler's reshard left uneven, also by t / (1 + t): the estimates there come from
// the load the move set). A calm group (no straggler) runs all-local; one calm for a
// while on an uneven split (its straggler recovered) reshards back to the even split,
// chosen when no worse than the best plan on the uneven split by t / (1 + t), hysteresis
// or not.
// ExplainDecision says why, from the decision and the same input and policy: rendered
// when someone asks (`ballastctl explain`), not with every decision, since most are never
// read and the text cost from a tenth (the benchmark's stress case) to a third (one
// straggler) of the planning.
//
// A block whose units divide (a mixture of experts) with its loads given
// (PlannerInput::unit_work) is planned by those loads instead: replicas that split hot
// experts' tokens, priced on the same terms, and experts moved for good once a skew
// lasts (expert_plan.h).
//
// This header is the planner's interface; its types (PlannerInput, BlockDecision, ...) are
// in vocabulary.h, which the layers below include instead of this. The search reuses
// buffers from one decision to the next in a PlannerWorkspace its caller owns.
//
//   PlannerWorkspace workspace;  // one per planning thread, kept across decisions
//   PlannerInput in;
//   in.block = BlockId(1);
//   in.owner_of_unit = EvenOwnership(/*num_units=*/256, /*size=*/4);
//   in.ranks = {{.seconds_per_unit = 1e-3, .owned_units = 64},
//               {.seconds_per_unit = 1e-3, .owned_units = 64},
//               {.seconds_per_unit = 1e-3, .owned_units = 64},
//               {.seconds_per_unit = 2e-3, .owned_units = 64, .chronic = true}};
//   in.transfer_seconds_per_unit = 1e-4;
//   BALLAST_ASSIGN_OR_RETURN(BlockDecision d,
//                            PlanBlock(in, policy, current_or_null, &workspace));
//   plan.blocks.push_back(d.plan);   // push; ExplainDecision(in, policy, d) says why
#ifndef BALLAST_COORDINATOR_PLANNER_PLANNER_H_
#define BALLAST_COORDINATOR_PLANNER_PLANNER_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ballast/plan.h"
#include "coordinator/planner/explain.h"  // ExplainDecision
#include "coordinator/planner/vocabulary.h"
#include "coordinator/policy.h"

namespace ballast::coordinator {

namespace planner_internal {
class TransferSolver;
}  // namespace planner_internal

// The scratch the planner's search reuses from one decision to the next: its buffers (the
// transfer solver's knapsack items and hulls above all) keep their capacity, where a new
// one allocated them all again (45 of a decision's 109 allocations on the benchmark's
// random case). Owned by whoever plans: one per thread that plans (it is not thread
// safe), kept across the blocks of a group (DecideGroup) or a benchmark's loop. A
// decision never depends on what the workspace held before: each use starts over on
// the block's problem.
class PlannerWorkspace {
 public:
  PlannerWorkspace();
  ~PlannerWorkspace();
  PlannerWorkspace(PlannerWorkspace&&) noexcept;
  PlannerWorkspace& operator=(PlannerWorkspace&&) noexcept;
  PlannerWorkspace(const PlannerWorkspace&) = delete;
  PlannerWorkspace& operator=(const PlannerWorkspace&) = delete;

  // For the planner's layers (search.h), which reset them on each problem: one for the
  // current ownership, one for a reshard's, which candidates.cc may search in between
  // the current ownership's techniques and its joint plan.
  planner_internal::TransferSolver& solver() { return *solver_; }
  planner_internal::TransferSolver& reshard_solver() { return *reshard_solver_; }

 private:
  std::unique_ptr<planner_internal::TransferSolver> solver_, reshard_solver_;
};

// Decides one block: prices the candidate list (candidates.h: all-local, the mode's
// techniques, a reshard, the plan in force) and picks among them. `current` is the plan in
// force for this block (nullptr: none, so no hysteresis; an empty BlockPlan means
// all-local is in force). Errors: INVALID_ARGUMENT naming the field
// ("ranks[2].seconds_per_unit nan must be finite and > 0", "policy: hysteresis 2 out of
// range [0, 1]"); FAILED_PRECONDITION when the mode cannot honour the cordons within the
// budgets (resize mode, cordoned units over budget).
absl::StatusOr<BlockDecision> PlanBlock(const PlannerInput& input, const JobPolicy& policy,
                                        const BlockPlan* current, PlannerWorkspace* workspace);
// The same inside a dwell (group_planner.h: DecideGroup): `policy` carries the dwell's
// raised hysteresis, which holds off changes on the current ownership, and a reshard is
// held off only by `reshard_hysteresis`, the job's own (in [0, 1]; candidates.cc's
// EvaluateReshard says why).
absl::StatusOr<BlockDecision> PlanBlock(const PlannerInput& input, const JobPolicy& policy,
                                        const BlockPlan* current, double reshard_hysteresis,
                                        PlannerWorkspace* workspace);
// The same with a workspace of its own, allocated for this call: for one-off decisions
// (tests); a caller that plans block after block passes its workspace.
absl::StatusOr<BlockDecision> PlanBlock(const PlannerInput& input, const JobPolicy& policy,
                                        const BlockPlan* current);

// The exact optimum for policy.mode on the current ownership: no reshard, no hysteresis
// (modes off and observe are treated as auto). What PlanBlock builds on; tests compare it
// with brute force.
absl::StatusOr<PlanCandidate> BestPlan(const PlannerInput& input, const JobPolicy& policy);

// Prices `plan` under `input` and `policy`: INVALID_ARGUMENT if the input is, or if the
// plan is malformed (ballast::ValidatePlan's verdict, the workers' own, with its
// message), FAILED_PRECONDITION if it breaks a budget, the mode's techniques or a cordon.
absl::StatusOr<PlanCost> EvaluatePlan(const PlannerInput& input, const JobPolicy& policy,
                                      const BlockPlan& plan);

}  // namespace ballast::coordinator

#endif  // BALLAST_COORDINATOR_PLANNER_PLANNER_H_
