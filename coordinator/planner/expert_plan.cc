#include "coordinator/planner/expert_plan.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/planner/expert_balance.h"
#include "coordinator/planner/problem.h"

namespace ballast::coordinator {

bool PlansByLoads(const PlannerInput& input, const JobPolicy& policy) {
  if (input.unit_work.empty() || policy.mode == BalanceMode::kResize) return false;
  int32_t most_owned = 0;
  for (const PlannerRank& r : input.ranks) {
    if (r.cordoned || r.chronic) return false;
    most_owned = std::max(most_owned, r.owned_units);
  }
  // Even: no rank owns more than its share rounded up. An uneven split (after a hold, or a
  // reshard for a cordon or a chronic straggler) is the count planner's to keep or to
  // undo once calm has lasted; replicas alone would work around it every step for good.
  const size_t ranks = input.ranks.size();
  return most_owned <= static_cast<int32_t>((input.owner_of_unit.size() + ranks - 1) / ranks);
}

namespace planner_internal {
namespace {

ExpertLoads LoadsOf(const PlannerInput& input) {
  ExpertLoads loads;
  loads.work = input.unit_work;
  loads.owner_of_unit = input.owner_of_unit;
  for (const PlannerRank& r : input.ranks) loads.speed.push_back(1.0 / r.seconds_per_unit);
  loads.replica_cost = input.transfer_seconds_per_unit;
  return loads;
}

// `plan`'s replicas priced as BalanceExperts plans them, plus each rank's fixed seconds.
PlanCost Price(const PlannerInput& input, const ExpertLoads& loads, const BlockPlan& plan) {
  PlanCost cost;
  cost.rank_seconds = RankTimes(loads, plan.replicas);
  for (size_t r = 0; r < input.ranks.size(); ++r) {
    cost.rank_seconds[r] += input.ranks[r].fixed_seconds;
  }
  cost.step_seconds = *std::max_element(cost.rank_seconds.begin(), cost.rank_seconds.end());
  cost.objective = cost.step_seconds;
  cost.offloaded_units = static_cast<int32_t>(plan.replicas.size());
  return cost;
}

// Every rank ends together with no transfers: the level T with sum over ranks of
// max(0, T - f_r) * speed_r equal to the total work (and at least the largest f_r).
double IdealStep(const PlannerInput& input, const ExpertLoads& loads) {
  const double work = std::accumulate(loads.work.begin(), loads.work.end(), 0.0);
  std::vector<size_t> order(input.ranks.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return input.ranks[a].fixed_seconds < input.ranks[b].fixed_seconds;
  });
  double speed = 0, weighted = 0, level = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    speed += loads.speed[order[i]];
    weighted += loads.speed[order[i]] * input.ranks[order[i]].fixed_seconds;
    level = (work + weighted) / speed;
    const bool last = i + 1 == order.size();
    if (last || level <= input.ranks[order[i + 1]].fixed_seconds) break;
  }
  return level;
}

// Why the plan in force cannot be priced on these loads (empty: it can). It is replaced,
// whatever the hysteresis, when it does more than replicate, or its replicas no longer fit
// the ownership (an expert resharded to its helper, say).
std::string Unfit(const PlannerInput& input, const BlockPlan& plan) {
  if (!plan.offloads.empty() || !plan.owner_of_unit.empty() ||
      std::any_of(plan.pruned_units.begin(), plan.pruned_units.end(),
                  [](int32_t n) { return n > 0; })) {
    return "prunes, offloads or reshards: replaced by a plan of replicas";
  }
  const BlockShape shape{.block = input.block,
                         .num_units = static_cast<int32_t>(input.owner_of_unit.size()),
                         .owner_of_unit = input.owner_of_unit,
                         .units_divide = true};
  absl::Status s = ValidateBlockPlan(plan, shape, static_cast<int32_t>(input.ranks.size()));
  return s.ok() ? "" : std::string(s.message());
}

}  // namespace

std::vector<double> RankWork(const PlannerInput& input, const BlockPlan& plan) {
  std::vector<double> work(input.ranks.size(), 0.0);
  for (size_t u = 0; u < input.unit_work.size(); ++u) {
    work[input.owner_of_unit[u].value()] += input.unit_work[u];
  }
  for (const Replica& r : plan.replicas) {
    const double moved = input.unit_work[r.unit] * r.share;
    work[input.owner_of_unit[r.unit].value()] -= moved;
    work[r.helper.value()] += moved;
  }
  return work;
}

absl::StatusOr<BlockDecision> PlanExperts(const PlannerInput& input, const JobPolicy& policy,
                                          const BlockPlan* current) {
  const ExpertLoads loads = LoadsOf(input);
  BlockDecision d;
  PlanCandidate all_local{.kind = CandidateKind::kAllLocal, .feasible = true};
  all_local.plan.block = input.block;
  all_local.cost = Price(input, loads, all_local.plan);
  d.all_local_step_seconds = all_local.cost.step_seconds;
  d.ideal_step_seconds = IdealStep(input, loads);
  d.candidates.push_back(all_local);

  PlanCandidate replicas{.kind = CandidateKind::kReplicas, .feasible = true};
  replicas.plan.block = input.block;
  absl::StatusOr<std::vector<Replica>> balanced = BalanceExperts(loads);
  if (!balanced.ok()) return balanced.status();  // the input was validated: a bug
  replicas.plan.replicas = *std::move(balanced);
  replicas.cost = Price(input, loads, replicas.plan);
  if (replicas.plan.replicas.empty()) {
    replicas.note = "balanced within the tolerance, or no split pays its transfer";
  }
  // Loads within the straggler threshold of the balanced ideal are balanced: a learned
  // router's loads wander by that much from step to step, and re-splitting for it moved
  // weights for nothing (the GPT-MoE changed plans every other report, and ran slower).
  // Replicas in force end only within half of it: loads hovering at the threshold would
  // otherwise start and end them on alternate rounds.
  const bool splitting = current != nullptr && !current->replicas.empty();
  const double band = splitting ? policy.straggler_threshold / 2 : policy.straggler_threshold;
  d.calm = all_local.cost.step_seconds <= (1 + band) * d.ideal_step_seconds;
  if (d.calm) {
    replicas.note = absl::StrCat(replicas.note.empty() ? "" : absl::StrCat(replicas.note, "; "),
                                 "not pushed: all-local is within the straggler threshold of the "
                                 "ideal");
  }
  d.candidates.push_back(replicas);
  // All-local when no replica pays: the same plan, and the simpler name.
  d.recommended = replicas.cost.step_seconds < all_local.cost.step_seconds ? replicas : all_local;
  int pushed = d.recommended.kind == CandidateKind::kReplicas && !d.calm ? 1 : 0;

  // Balanced loads end a plan at once, hysteresis or not (as a calm group's do).
  if (current != nullptr && !d.calm) {
    PlanCandidate cur{.kind = CandidateKind::kCurrent};
    cur.plan = *current;
    cur.plan.block = input.block;
    cur.note = Unfit(input, cur.plan);
    cur.feasible = cur.note.empty();
    if (cur.feasible) cur.cost = Price(input, loads, cur.plan);
    d.candidates.push_back(cur);
    // The loads drift every step: re-split only when that is better by the hysteresis,
    // or every planning round would move slices back and forth for noise.
    if (cur.feasible && cur.plan.replicas != d.recommended.plan.replicas &&
        !(d.recommended.cost.objective < (1 - policy.hysteresis) * cur.cost.objective)) {
      pushed = static_cast<int>(d.candidates.size()) - 1;
    }
  }
  const PlanCandidate& chosen = Balances(policy.mode) ? d.candidates[pushed] : all_local;
  d.plan = chosen.plan;
  d.predicted_step_seconds = chosen.cost.step_seconds;
  d.objective = chosen.cost.objective;
  d.chosen = chosen.kind;
  d.kept_current = d.chosen == CandidateKind::kCurrent;
  return d;
}

}  // namespace planner_internal
}  // namespace ballast::coordinator
