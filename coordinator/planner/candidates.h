// The plans PlanBlock chooses among, as one list: all-local, the mode's techniques on the
// current ownership (resize, migrate, auto), a reshard, and the plan in force. Every entry
// has the same interface: whether the block prices it at all, and the candidate it prices
// with its verdict. PlanBlock walks the list in order and keeps the verdicts; the order
// is also the one explanations list the candidates in. Internal to the planner.
//
// The verdicts, and the rule each entry applies (planner.h states the policy):
//   all-local  pushed when the block does not balance (modes off and observe, a calm
//              group on an even split); listed otherwise, infeasible with a cordoned owner;
//   resize, migrate, auto
//              each recommended in turn: MakeBlockState solves the mode's techniques
//              (search.h: SolveTechniques, then SolveJoint) and each is the best of those
//              before it, so the last the mode allows is the mode's best (the mode's own
//              being infeasible is an error); auto's search only as far as a reshard
//              priced first lets it matter (then the auto candidate is the best seen);
//   reshard    recommended when it beats the recommendation by the margin (hysteresis,
//              straggler threshold, or estimate noise on the way back to an even split;
//              none for a chronic straggler's first reshard in place of offloads);
//   current    pushed (kept) unless the recommendation beats it by the hysteresis (and,
//              on a split a straggler's reshard left uneven, by the noise too; not at all
//              when it offloads and a straggler's first reshard is recommended).
// The decision pushes the entry pushed, if any, else the recommendation.
#ifndef BALLAST_COORDINATOR_PLANNER_CANDIDATES_H_
#define BALLAST_COORDINATOR_PLANNER_CANDIDATES_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "ballast/plan.h"
#include "coordinator/planner/problem.h"
#include "coordinator/planner/search.h"
#include "coordinator/planner/vocabulary.h"
#include "coordinator/policy.h"

namespace ballast::coordinator::planner_internal {

// One block's planning as every entry sees it, built once per decision (MakeBlockState)
// from an input and policy already validated.
struct BlockState {
  const PlannerInput* input = nullptr;
  const JobPolicy* policy = nullptr;
  const BlockPlan* current = nullptr;        // the plan in force, or none
  TransferSolver* reshard_solver = nullptr;  // the caller's workspace's, for a reshard's search
  BalanceMode mode = BalanceMode::kAuto;     // the planning mode (PlanningMode)
  // Offloads refused in effect (OffloadsRefused) in a mode that transfers: the
  // techniques solved for, on the current ownership and a reshard's, are resize's (the
  // problem's prune budget is still the mode's, none in migrate), and a plan in force
  // that offloads is no candidate.
  bool offloads_refused = false;
  BalanceMode techniques = BalanceMode::kAuto;  // the mode's, or resize where refused
  std::vector<int32_t> owned;                   // n_r
  Problem problem;                              // on the current ownership
  ModePlans plans;                              // the mode's techniques on it, solved together
  // H = sum of 1 / c_r and F = sum of f_r / c_r over the ranks not cordoned, and the
  // largest fixed cost: no plan's step is below it, whatever it moves.
  double inverse_sum = 0, fixed_units = 0, most_fixed = 0;
  double all_local_step_seconds = 0;
  bool any_cordoned = false;
  bool cordoned_owner = false;  // a cordoned rank owns units
  // A rank is chronic or cordoned: persistent imbalance, worth a reshard's price.
  bool reshard_worth_pricing = false;
  // No rank owns more than its share by more than the straggler threshold (or one unit).
  bool even = false;
  // Even, and no rank owns less than its share by more than the threshold (or one unit)
  // either: no straggler's reshard has left this split uneven (in a large group, taking
  // a straggler's units raises no other rank past its share by much).
  bool near_share = false;
  // Calm for a while on a split that is not even: the reshard aims back at the even split.
  bool uneven_calm = false;
  // The straggler threshold t as a margin on the objective, t / (1 + t).
  double noise = 0;
  // All-local because the group is calm (BlockDecision::calm).
  bool calm = false;
  // A plan other than all-local may be pushed: the mode balances and the group is not calm.
  bool balances = false;
  // What a reshard must beat the other plans by, besides the noise: the job's hysteresis,
  // also while a dwell raises policy->hysteresis (PlanBlock's reshard_hysteresis).
  double reshard_hysteresis = 0;
  // The reshard, when priced before the joint search on the current ownership
  // (candidates.cc: PriceReshardFirst), and whether its search was cut off (then it
  // cannot win). `reshard` is taken by its one reader, EvaluateReshard, which sees the
  // state const.
  bool reshard_first = false;
  mutable PlanCandidate reshard;
  bool reshard_cut_off = false;
  // The joint search on the current ownership looked only below this (kInf: everywhere),
  // and current_cut_off: it found no plan there, so the reshard wins and `plans.joint` is
  // the best plan seen, not necessarily the best.
  double current_cutoff = kInf;
  bool current_cut_off = false;
};

// `input` and `policy` must be valid (ValidatePlannerInput, ValidatePolicy). Solves the
// mode's techniques on the current ownership with `solver` and, where it prices a
// reshard first (candidates.cc: PriceReshardFirst), the reshard's with `reshard_solver`.
BlockState MakeBlockState(const PlannerInput& input, const JobPolicy& policy,
                          const BlockPlan* current, double reshard_hysteresis,
                          TransferSolver* solver, TransferSolver* reshard_solver);

// The water level with `pruned` units pruned: every rank computing at its own speed,
// nothing transferred, all finishing together, (N - pruned + F) / H; or, when that is
// below some rank's fixed cost, that cost (then the level is wrong, but the step cannot
// be lower). With no fixed costs, N / H exactly.
double WaterLevel(const BlockState& block, double pruned);

enum class Verdict {
  kListed,       // priced and listed, not chosen
  kRecommended,  // the best plan so far the mode's techniques allow
  kPushed,       // pushed whatever is recommended (all-local not balancing, a kept plan)
};

struct Evaluated {
  PlanCandidate candidate;
  Verdict verdict = Verdict::kListed;
};

// One entry of the list. `recommended` is the recommendation so far (nullptr until the
// first technique); both functions may read it.
struct CandidateEntry {
  CandidateKind kind;
  // Whether the block prices this candidate at all (the mode, a reshard's triggers, a
  // plan in force).
  bool (*applies)(const BlockState& block, const PlanCandidate* recommended);
  // The candidate, priced, and its verdict; an error ends the decision.
  absl::StatusOr<Evaluated> (*evaluate)(const BlockState& block, const PlanCandidate* recommended);
};

// The technique that is the mode's best: resize, migrate, or auto for a planning mode
// auto.
CandidateKind ModeTechnique(BalanceMode mode);

// The list, in order: all-local, resize, migrate, auto, reshard, current.
std::span<const CandidateEntry> CandidateList();

// A solution in counts as a candidate: its plan (offloads paired owner to helper, lowest
// ranks first) and its cost on `problem`.
PlanCandidate MakeCandidate(CandidateKind kind, BlockId block, const Problem& problem,
                            const Solution& s);

}  // namespace ballast::coordinator::planner_internal

#endif  // BALLAST_COORDINATOR_PLANNER_CANDIDATES_H_
