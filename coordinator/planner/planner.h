// The planner: for one TP block of one group, decides how many of each rank's units to
// prune, how many to offload and to whom, and whether to reshard, from the ranks' measured
// seconds per unit and the job's policy. A pure library: no I/O, no threads, no clock.
//
// The model (design brief §2 and §5). Rank r owns n_r of the block's N units and computes
// one in c_r seconds, after f_r seconds of its share of the block that no plan moves (its
// collectives' own cost: an affine cost per rank, f_r + c_r per unit). An offloaded unit
// costs each of its two ranks tau seconds a step (weights out once, weight gradients back
// once per micro-batch). A plan prunes z_r of r's units, offloads y_r of them and has r
// compute x_r units of others, so r computes u_r = n_r - z_r - y_r + x_r units and
//
//   load_r = f_r + c_r * u_r + tau * (y_r + x_r),   T = max_r load_r,
//   objective = T + accuracy_weight_seconds * (sum_r z_r) / N.
//
// The planner minimises the objective exactly, at unit granularity, subject to the policy's
// prune budgets (z_r <= floor(f_rank * n_r), sum z <= floor(f_group * N)), the mode's
// techniques (resize: prune only; migrate: offload and reshard only; auto: all) and the
// cordons (a cordoned rank computes nothing). When a rank is chronic or cordoned it also
// prices a reshard to the water-filled ownership (halfway there from a split already
// uneven, no cordon: ownership.h's HalfwayCounts), chosen when it beats the best plan on
// the current ownership by the hysteresis and (no cordon) by the straggler threshold
// t / (1 + t); and it keeps the current plan unless the new one is better by the policy's
// hysteresis. A calm group (no straggler) runs all-local; one calm for a while on an
// uneven split (its straggler recovered) reshards back to the even split, chosen when no
// worse than the best plan on the uneven split by t / (1 + t), hysteresis or not.
// ExplainDecision says why, from the decision and the same input and policy: rendered
// when someone asks (`ballastctl explain`), not with every decision, since most are never
// read and the text cost from a tenth (the benchmark's stress case) to a third (one
// straggler) of the planning.
//
//   PlannerInput in;
//   in.block = BlockId(1);
//   in.owner_of_unit = EvenOwnership(/*num_units=*/256, /*size=*/4);
//   in.ranks = {{.seconds_per_unit = 1e-3, .owned_units = 64},
//               {.seconds_per_unit = 1e-3, .owned_units = 64},
//               {.seconds_per_unit = 1e-3, .owned_units = 64},
//               {.seconds_per_unit = 2e-3, .owned_units = 64, .chronic = true}};
//   in.transfer_seconds_per_unit = 1e-4;
//   BALLAST_ASSIGN_OR_RETURN(BlockDecision d, PlanBlock(in, policy, current_or_null));
//   plan.blocks.push_back(d.plan);   // push; ExplainDecision(in, policy, d) says why
#ifndef BALLAST_COORDINATOR_PLANNER_PLANNER_H_
#define BALLAST_COORDINATOR_PLANNER_PLANNER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ballast/plan.h"
#include "ballast/types.h"
#include "coordinator/policy.h"

namespace ballast::coordinator {

struct PlannerRank {
  // Measured compute seconds per unit of this block (the speed model's smoothed value).
  double seconds_per_unit = 0;
  // Seconds of the block's step on this rank that no plan moves, whatever it computes:
  // the coordinator's estimate of the rank's collectives without waits (fixed_costs.h;
  // given only with its --fixed_costs).
  // A rank slower here than its peers is balanced by giving it fewer units. 0: none
  // known, the model of compute alone.
  double fixed_seconds = 0;
  // Units the rank owns now; must match owner_of_unit.
  int32_t owned_units = 0;
  // Must compute nothing (an operator cordoned its device).
  bool cordoned = false;
  // A persistent straggler (the coordinator's pooled verdict has said so for the policy's
  // reshard_after): resharding is worth pricing.
  bool chronic = false;
};

struct PlannerInput {
  BlockId block;
  // Current owner of every unit (size N).
  std::vector<RankId> owner_of_unit;
  std::vector<PlannerRank> ranks;
  // Seconds one offloaded unit costs each of its owner and helper per step.
  double transfer_seconds_per_unit = 0;
  // No rank of the group straggles (the speed model's verdict pooled over the group's
  // blocks, rank_speeds.h): with no rank cordoned and the block's ownership even (no rank
  // owning more than 1 + straggler_threshold times its share), the plan is all-local,
  // however the per-block estimates differ, since differences below the straggler
  // threshold are noise to balancing. False: the estimates decide alone.
  bool calm = false;
  // Calm for a while (the coordinator: for the policy's reshard_after, as long as a
  // straggler must straggle to be resharded for): only then does an uneven split of calm
  // ranks go back to even by a reshard (BlockDecision::evens_split); before, it is
  // balanced on the split it has.
  bool calm_lasted = false;
};

// What a plan costs under the model.
struct PlanCost {
  double step_seconds = 0;  // T
  double objective = 0;     // T + w * pruned / N
  int32_t pruned_units = 0;
  int32_t offloaded_units = 0;
  int32_t moved_units = 0;           // units that change owner (reshard)
  std::vector<double> rank_seconds;  // load_r
};

enum class CandidateKind {
  kAllLocal,  // every unit computed by its owner
  kResize,    // best plan that only prunes
  kMigrate,   // best plan that only offloads
  kAuto,      // best plan that prunes and offloads
  kReshard,   // the water-filled ownership (or halfway) plus its best plan
  kCurrent,   // the plan in force, priced under the new inputs
};
absl::string_view CandidateKindName(CandidateKind kind);

struct PlanCandidate {
  CandidateKind kind = CandidateKind::kAllLocal;
  bool feasible = false;
  std::string note;  // why it is infeasible, or a remark
  BlockPlan plan;
  PlanCost cost;
};

struct BlockDecision {
  // The plan to push (all-local in modes off and observe). Its counts refer to
  // plan.owner_of_unit when that is set (a reshard), else to the current ownership.
  BlockPlan plan;
  double predicted_step_seconds = 0;  // of `plan`
  double objective = 0;               // of `plan`
  // Perfect balance, no transfer cost: the T with sum over non-cordoned ranks of
  // (T - f_r) / c_r = N (N / sum 1 / c_r with no fixed costs), and at least max_r f_r.
  double ideal_step_seconds = 0;
  // max_r f_r + c_r * n_r: everyone computes what it owns.
  double all_local_step_seconds = 0;
  // The current plan was kept: the best new plan did not beat it by the hysteresis.
  bool kept_current = false;
  // All-local because the group is calm (PlannerInput::calm, the ownership even, no
  // cordon).
  bool calm = false;
  // The plan is a reshard back to the even split: the group has been calm for a while but
  // its ownership is not even (a straggler it was resharded for has recovered). Never
  // set in modes off and observe, which push all-local.
  bool evens_split = false;
  CandidateKind chosen = CandidateKind::kAllLocal;
  // The best plan the mode's techniques allow (modes off and observe: what auto would do),
  // before hysteresis against the current plan.
  PlanCandidate recommended;
  // Everything priced: all-local, then per mode resize / migrate / auto, reshard, current.
  std::vector<PlanCandidate> candidates;
};

// Decides one block. `current` is the plan in force for this block (nullptr: none, so no
// hysteresis; an empty BlockPlan means all-local is in force). Errors:
// INVALID_ARGUMENT naming the field ("ranks[2].seconds_per_unit nan must be finite and
// > 0", "policy: hysteresis 2 out of range [0, 1]"); FAILED_PRECONDITION when the mode
// cannot honour the cordons within the budgets (resize mode, cordoned units over budget).
absl::StatusOr<BlockDecision> PlanBlock(const PlannerInput& input, const JobPolicy& policy,
                                        const BlockPlan* current);

// The exact optimum for policy.mode on the current ownership: no reshard, no hysteresis
// (modes off and observe are treated as auto). What PlanBlock builds on; tests compare it
// with brute force.
absl::StatusOr<PlanCandidate> BestPlan(const PlannerInput& input, const JobPolicy& policy);

// Prices `plan` under `input` and `policy`: INVALID_ARGUMENT if it is malformed,
// FAILED_PRECONDITION if it breaks a budget, the mode's techniques or a cordon.
absl::StatusOr<PlanCost> EvaluatePlan(const PlannerInput& input, const JobPolicy& policy,
                                      const BlockPlan& plan);

// floor(fraction * units), with a 1e-9 nudge so that 0.3 * 10 is 3, not 2.
int64_t PruneBudget(double fraction, int64_t units);

absl::Status ValidatePlannerInput(const PlannerInput& input);

// Inputs, candidates, the chosen plan and its predicted step time, as text for operators.
// `input` and `policy` must be those PlanBlock decided `decision` with.
std::string ExplainDecision(const PlannerInput& input, const JobPolicy& policy,
                            const BlockDecision& decision);

}  // namespace ballast::coordinator

#endif  // BALLAST_COORDINATOR_PLANNER_PLANNER_H_
