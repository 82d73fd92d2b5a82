// The planner's interface (planner.h): inputs validated, the candidate list priced and the
// block's decision taken. The layers below it, each in its own file:
//   vocabulary.h       the types every layer shares, and the input's rules;
//   candidates.h       the list of candidates, each priced and judged by its own rule;
//   plan_cost.h        a given plan checked (ballast::ValidatePlan) and priced;
//   problem.h          the model in the solver's terms and the one load formula;
//   search.h           the exact optimum per mode on one ownership (a walk over step times);
//   transfer_solver.h  at one step time: coverage, the fewest prunes, the least max load;
//   knapsack.h         the exact knapsack for those prunes, with its LP bounds;
//   ownership.h        water-filled and halfway counts, unit moves for a reshard;
//   expert_plan.h      a block whose units divide, planned by its loads (replicas, moves);
//   explain.cc         the text operators read.
#include "coordinator/planner/planner.h"

#include <algorithm>
#include <memory>
#include <numeric>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "coordinator/planner/candidates.h"
#include "coordinator/planner/expert_plan.h"
#include "coordinator/planner/plan_cost.h"
#include "coordinator/planner/problem.h"
#include "coordinator/planner/search.h"
#include "coordinator/planner/transfer_solver.h"

namespace ballast::coordinator {
namespace {

using planner_internal::BlockState;
using planner_internal::CandidateEntry;
using planner_internal::CandidateList;
using planner_internal::Evaluated;
using planner_internal::MakeBlockState;
using planner_internal::MakeCandidate;
using planner_internal::MakeProblem;
using planner_internal::ModePlans;
using planner_internal::ModeTechnique;
using planner_internal::OwnedCounts;
using planner_internal::PlanningMode;
using planner_internal::Problem;
using planner_internal::SolveMode;
using planner_internal::TransferSolver;
using planner_internal::Verdict;
using planner_internal::WaterLevel;

absl::Status ValidateInputs(const PlannerInput& input, const JobPolicy& policy) {
  BALLAST_RETURN_IF_ERROR(ValidatePlannerInput(input));
  if (absl::Status s = ValidatePolicy(policy); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("policy: ", s.message()));
  }
  return absl::OkStatus();
}

void Choose(const PlanCandidate& candidate, BlockDecision* d) {
  d->plan = candidate.plan;
  d->predicted_step_seconds = candidate.cost.step_seconds;
  d->rank_seconds = candidate.cost.rank_seconds;
  d->objective = candidate.cost.objective;
  d->chosen = candidate.kind;
}

}  // namespace

PlannerWorkspace::PlannerWorkspace()
    : solver_(std::make_unique<TransferSolver>()),
      reshard_solver_(std::make_unique<TransferSolver>()) {}
PlannerWorkspace::~PlannerWorkspace() = default;
PlannerWorkspace::PlannerWorkspace(PlannerWorkspace&&) noexcept = default;
PlannerWorkspace& PlannerWorkspace::operator=(PlannerWorkspace&&) noexcept = default;

absl::StatusOr<PlanCost> EvaluatePlan(const PlannerInput& input, const JobPolicy& policy,
                                      const BlockPlan& plan) {
  BALLAST_RETURN_IF_ERROR(ValidateInputs(input, policy));
  return planner_internal::PricePlan(input, policy, plan);
}

absl::StatusOr<PlanCandidate> BestPlan(const PlannerInput& input, const JobPolicy& policy) {
  BALLAST_RETURN_IF_ERROR(ValidateInputs(input, policy));
  const BalanceMode mode = PlanningMode(policy.mode);
  const std::vector<int32_t> owned = OwnedCounts(input);
  const Problem problem = MakeProblem(input, owned, policy, mode);
  PlannerWorkspace workspace;
  const ModePlans plans = SolveMode(problem, mode, &workspace.solver());
  PlanCandidate cand = MakeCandidate(ModeTechnique(mode), input.block, problem, plans.best(mode));
  if (!cand.feasible) {
    return absl::FailedPreconditionError(
        absl::StrCat("mode ", BalanceModeName(policy.mode), ": ", cand.note));
  }
  return cand;
}

absl::StatusOr<BlockDecision> PlanBlock(const PlannerInput& input, const JobPolicy& policy,
                                        const BlockPlan* current) {
  PlannerWorkspace workspace;
  return PlanBlock(input, policy, current, &workspace);
}

absl::StatusOr<BlockDecision> PlanBlock(const PlannerInput& input, const JobPolicy& policy,
                                        const BlockPlan* current, PlannerWorkspace* workspace) {
  return PlanBlock(input, policy, current, policy.hysteresis, workspace);
}

absl::StatusOr<BlockDecision> PlanBlock(const PlannerInput& input, const JobPolicy& policy,
                                        const BlockPlan* current, double reshard_hysteresis,
                                        PlannerWorkspace* workspace) {
  BALLAST_RETURN_IF_ERROR(ValidateInputs(input, policy));
  if (!(reshard_hysteresis >= 0 && reshard_hysteresis <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("reshard_hysteresis ", reshard_hysteresis, " out of range [0, 1]"));
  }
  if (PlansByLoads(input, policy)) return planner_internal::PlanExperts(input, policy, current);
  if (!input.unit_work.empty()) {
    // Loads given but planned by counts (a cordon, the resize mode): a unit is then the
    // mean unit's work, so that the step predicted is in seconds.
    PlannerInput by_count = input;
    by_count.unit_work.clear();
    const double mean = std::accumulate(input.unit_work.begin(), input.unit_work.end(), 0.0) /
                        static_cast<double>(input.unit_work.size());
    for (PlannerRank& r : by_count.ranks) r.seconds_per_unit *= std::max(mean, 1.0);
    return PlanBlock(by_count, policy, current, reshard_hysteresis, workspace);
  }
  const std::span<const CandidateEntry> list = CandidateList();
  BlockDecision d;
  // Before the search: the list's room (about 1 KB, a decision's one large allocation)
  // asked for after the search freed its temporaries makes malloc consolidate them, and
  // every later small allocation slower (5% more instructions on the benchmark's
  // straggler_2x migrate case).
  d.candidates.reserve(list.size());
  const BlockState block = MakeBlockState(input, policy, current, reshard_hysteresis,
                                          &workspace->solver(), &workspace->reshard_solver());
  d.ideal_step_seconds = WaterLevel(block, 0);
  d.all_local_step_seconds = block.all_local_step_seconds;
  d.calm = block.calm;
  // Each entry in turn, against the recommendation so far; the candidates stay in the
  // list's order, as explanations print them.
  int recommended = -1, pushed = -1;
  for (const CandidateEntry& entry : list) {
    const PlanCandidate* so_far = recommended < 0 ? nullptr : &d.candidates[recommended];
    if (!entry.applies(block, so_far)) continue;
    BALLAST_ASSIGN_OR_RETURN(Evaluated e, entry.evaluate(block, so_far));
    d.candidates.push_back(std::move(e.candidate));
    const int at = static_cast<int>(d.candidates.size()) - 1;
    if (e.verdict == Verdict::kRecommended) recommended = at;
    if (e.verdict == Verdict::kPushed) pushed = at;
  }
  // Every planning mode has a technique, so something is recommended.
  d.recommended = d.candidates[recommended];
  Choose(d.candidates[pushed >= 0 ? pushed : recommended], &d);
  d.kept_current = d.chosen == CandidateKind::kCurrent;
  d.evens_split = block.balances && block.uneven_calm && d.chosen == CandidateKind::kReshard;
  return d;
}

}  // namespace ballast::coordinator
