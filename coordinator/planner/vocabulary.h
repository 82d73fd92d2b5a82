// The planner's vocabulary: what a block's planning takes in (PlannerInput), what a plan
// costs under the model (PlanCost), the candidates it prices and the decision it returns,
// with the rules on the input that every layer trusts once PlanBlock has checked them.
// The bottom of the planner library: every file of planner/ may include it, and it
// includes none of them. The model and the API are in planner.h.
#ifndef BALLAST_COORDINATOR_PLANNER_VOCABULARY_H_
#define BALLAST_COORDINATOR_PLANNER_VOCABULARY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "ballast/plan.h"
#include "ballast/types.h"

namespace ballast::coordinator {

struct PlannerRank {
  // Measured compute seconds per unit of this block: what one unit more or less costs
  // (the coordinator's pooled price, rank_speeds.h).
  double seconds_per_unit = 0;
  // Seconds of the block's step on this rank that no plan moves, whatever it computes:
  // the coordinator gives the block compute's fixed part where a fit over unit counts
  // finds one (unit_count_fit.h), plus, with its --fixed_costs, its estimate of the rank's
  // collectives without waits beyond the least (fixed_costs.h).
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
  // Computes no other rank's units: no plan offloads onto it (it may still offload its
  // own, and a reshard may still give it units). The coordinator asks this of a rank
  // throttled whole while it is relieved of units (DecisionLoop::TakesNoOffloads): its
  // timers call it fast, but work offloaded onto it runs throttled. Ignored where a rank
  // is cordoned (its units may need every helper: TakesOffloads) and for a block planned
  // by its loads, as offloads_refused is.
  bool takes_no_offloads = false;
};

struct PlannerInput {
  BlockId block;
  // Current owner of every unit (size N).
  std::vector<RankId> owner_of_unit;
  std::vector<PlannerRank> ranks;
  // Seconds one offloaded unit costs each of its owner and helper per step.
  double transfer_seconds_per_unit = 0;
  // A block whose units divide (BlockShape::units_divide: a mixture of experts) with its
  // loads measured: the work predicted for each unit next step, in the units the ranks'
  // seconds_per_unit count (tokens: a rank computes a token of any expert in
  // seconds_per_unit). Such a block is planned by its loads, with replicas (expert_plan.h).
  // Empty: every unit is one unit of work (planned by counts).
  std::vector<double> unit_work;
  // With unit_work: the loads have been unbalanced on this ownership (expert_plan.h's
  // SkewOfLoads, in BalancedBand's band) for the policy's reshard_after
  // without a break (the coordinator's StragglerJudge), so moving experts for good is
  // worth pricing, as for a chronic straggler.
  bool skew_lasted = false;
  // With unit_work: the loads are unbalanced, but marginally so (all-local within
  // 1 + kMarginalFactor x the straggler threshold of the ideal, rank_speeds.h), on a
  // block running all-local, and that has not lasted marginal_straggler_for (the
  // coordinator's StragglerJudge): all-local is kept, as for a marginal straggler. A
  // learned router's loads cross the threshold for a second or two at a time, and
  // replicas started for such a spell ended a few steps later.
  bool skew_waits = false;
  // Seconds one unit's move costs, once, sent by its old owner to its new one with the
  // state that moves with it; and the steps a reshard's saving is counted over against
  // its moves: the steps in reshard_after (the coordinator: reshard_after over the
  // group's step), as long as a skew must have lasted to be resharded, and taken to
  // last as long again. The loads' planner (expert_plan.h) adds the moves' seconds over
  // that horizon to a reshard's objective, and prices no reshard without a horizon.
  double move_seconds_per_unit = 0;
  double reshard_horizon_steps = 0;
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
  // No plan offloads units, the plan in force included: the measured step showed the
  // straggler's offloads no faster than the best plan without them (the coordinator's
  // OffloadCheck). Prunes and reshards stay as the mode allows. Ignored where a rank is
  // cordoned (only transfers empty its device) and for a block planned by its loads. (One
  // rank's refusal is PlannerRank::takes_no_offloads.)
  bool offloads_refused = false;
};

// Whether a block's offloads are refused in effect: asked (offloads_refused), and no
// rank cordoned (only transfers empty a cordoned device).
bool OffloadsRefused(const PlannerInput& input);

// Whether rank r takes offloads in effect: not asked otherwise (takes_no_offloads), or some
// rank is cordoned (only transfers empty a cordoned device, and it may need every helper).
bool TakesOffloads(const PlannerInput& input, size_t r);

// What a plan costs under the model.
struct PlanCost {
  double step_seconds = 0;  // T
  double objective = 0;     // T + w * pruned / N
  int32_t pruned_units = 0;
  int32_t offloaded_units = 0;
  int32_t moved_units = 0;           // units that change owner (reshard)
  std::vector<double> rank_seconds;  // load_r
};

// Whether a new plan's cost beats the plan in force's by the hysteresis (a fraction of
// its objective): the one rule by which a plan in force is kept, for whole units and for
// experts' loads alike. Flapping between near-equal plans costs transfers for nothing.
inline bool BeatsByHysteresis(const PlanCost& candidate, const PlanCost& current,
                              double hysteresis) {
  return candidate.objective < (1 - hysteresis) * current.objective;
}

enum class CandidateKind {
  kAllLocal,  // every unit computed by its owner
  kResize,    // best plan that only prunes
  kMigrate,   // best plan that only offloads
  kAuto,      // best plan that prunes and offloads
  kReshard,   // a new ownership (water-filled or halfway; experts: BalanceOwnership's)
              // plus its best plan
  kCurrent,   // the plan in force, priced under the new inputs
  kReplicas,  // units split by load between their owner and helpers (expert_plan.h)
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
  std::vector<double> rank_seconds;   // of `plan`: each rank's load (PlanCost::rank_seconds)
  // Perfect balance, no transfer cost: the T with sum over non-cordoned ranks of
  // (T - f_r) / c_r = N (N / sum 1 / c_r with no fixed costs), and at least max_r f_r.
  double ideal_step_seconds = 0;
  // max_r f_r + c_r * n_r: everyone computes what it owns.
  double all_local_step_seconds = 0;
  // The current plan was kept: the best new plan did not beat it by the hysteresis, or
  // (kept_for_group) the group's changes together did not gain enough (DecideGroup).
  bool kept_current = false;
  bool kept_for_group = false;
  // All-local because the group is calm (PlannerInput::calm, the ownership even, no
  // cordon); for a block planned by its loads (expert_plan.h), because all-local ends
  // within the straggler threshold of the balanced ideal, or its marginal skew is being
  // waited out (PlannerInput::skew_waits).
  bool calm = false;
  // The plan is a reshard back to the even split: the group has been calm for a while but
  // its ownership is not even (a straggler it was resharded for has recovered). Never
  // set in modes off and observe, which push all-local.
  bool evens_split = false;
  CandidateKind chosen = CandidateKind::kAllLocal;
  // The best plan the mode's techniques allow (modes off and observe: what auto would do),
  // before hysteresis against the current plan.
  PlanCandidate recommended;
  // Everything priced, in the candidate list's order (candidates.h): all-local, then per
  // mode resize / migrate / auto, reshard, current. A search proves only what the decision
  // needs: a reshard that cannot win, or an auto plan that a reshard beats whatever it
  // is, is the best plan its search saw, and its note says so.
  std::vector<PlanCandidate> candidates;
};

// floor(fraction * units), with a 1e-9 nudge so that 0.3 * 10 is 3, not 2.
int64_t PruneBudget(double fraction, int64_t units);

// The ranks as the planner's layers trust them: at least one, every seconds_per_unit finite
// and > 0, every fixed_seconds finite and >= 0, owned_units >= 0, and at least one rank not
// cordoned. INVALID_ARGUMENT naming the field ("ranks[2].seconds_per_unit nan must be
// finite and > 0").
absl::Status ValidatePlannerRanks(const std::vector<PlannerRank>& ranks);

// The ranks (ValidatePlannerRanks), the transfer cost, owner_of_unit against the ranks'
// owned_units, and unit_work (empty, or one finite value >= 0 per unit). Checked once, where
// planning starts (PlanBlock, BestPlan, EvaluatePlan); the layers below trust it.
absl::Status ValidatePlannerInput(const PlannerInput& input);

}  // namespace ballast::coordinator

#endif  // BALLAST_COORDINATOR_PLANNER_VOCABULARY_H_
