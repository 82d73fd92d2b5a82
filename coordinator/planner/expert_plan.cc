#include "coordinator/planner/expert_plan.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/planner/expert_balance.h"
#include "coordinator/planner/explain.h"
#include "coordinator/planner/problem.h"

namespace ballast::coordinator {

bool PlansByLoads(const PlannerInput& input, const JobPolicy& policy) {
  if (input.unit_work.empty() || policy.mode == BalanceMode::kResize) return false;
  return std::none_of(input.ranks.begin(), input.ranks.end(),
                      [](const PlannerRank& r) { return r.cordoned; });
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

// The loads on the ownership `plan` leaves: its reshard's, or the input's.
ExpertLoads LoadsUnder(const ExpertLoads& loads, const BlockPlan& plan) {
  ExpertLoads under = loads;
  if (!plan.owner_of_unit.empty()) under.owner_of_unit = plan.owner_of_unit;
  return under;
}

// `plan` priced as BalanceExperts plans replicas (on the ownership it leaves), plus each
// rank's fixed seconds; a reshard's objective adds its moves, paid once, spread over the
// horizon (PlannerInput::reshard_horizon_steps). Measured on `scripts/bench moe`, whose
// hot experts drift every 8 steps: resharding after 3 steps of skew with the moves
// unpriced made the mean step 13% slower than replicas alone (docs/benchmarks.md).
PlanCost PriceLoads(const PlannerInput& input, const ExpertLoads& loads, const BlockPlan& plan) {
  PlanCost cost;
  cost.rank_seconds = RankTimes(LoadsUnder(loads, plan), plan.replicas);
  for (size_t r = 0; r < input.ranks.size(); ++r) {
    cost.rank_seconds[r] += input.ranks[r].fixed_seconds;
  }
  cost.step_seconds = *std::max_element(cost.rank_seconds.begin(), cost.rank_seconds.end());
  cost.objective = cost.step_seconds;
  cost.offloaded_units = static_cast<int32_t>(plan.replicas.size());
  for (size_t u = 0; u < plan.owner_of_unit.size(); ++u) {
    cost.moved_units += plan.owner_of_unit[u] != input.owner_of_unit[u];
  }
  if (input.reshard_horizon_steps > 0) {
    cost.objective += cost.moved_units * input.move_seconds_per_unit / input.reshard_horizon_steps;
  }
  return cost;
}

// Every rank ends together with no transfers: the level T with sum over ranks of
// max(0, T - f_r) * speed_r equal to the total work (and at least the largest f_r).
double LevelStep(const PlannerInput& input, const ExpertLoads& loads) {
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

// Whether the plan in force (nullptr: none) splits experts: the block does not run
// all-local.
bool Replicating(const BlockPlan* current) {
  return current != nullptr && !current->replicas.empty();
}

// The one rule for balanced loads (SkewOfLoads, PlanExperts' calm).
bool WithinBand(double all_local_step, double ideal_step, double band) {
  return all_local_step <= (1 + band) * ideal_step;
}

// The reshard candidate for a skew that lasted: BalanceOwnership's moves, plus the replicas
// that still pay on the new ownership (whole experts rarely balance exactly).
PlanCandidate ReshardCandidate(const PlannerInput& input, const ExpertLoads& loads) {
  PlanCandidate reshard{.kind = CandidateKind::kReshard};
  reshard.plan.block = input.block;
  if (!(input.reshard_horizon_steps > 0)) {
    reshard.note =
        "no horizon to pay moves back over (reshard_after 0, or the group's step not measured yet)";
    return reshard;
  }
  absl::StatusOr<std::vector<RankId>> owners = BalanceOwnership(loads);
  if (!owners.ok()) {  // the input was validated: a bug, shown rather than planned on
    reshard.note = std::string(owners.status().message());
    return reshard;
  }
  if (*owners == input.owner_of_unit) {
    reshard.note = "no move or swap of whole experts balances the loads better";
    return reshard;
  }
  reshard.plan.owner_of_unit = *std::move(owners);
  absl::StatusOr<std::vector<Replica>> replicas = BalanceExperts(LoadsUnder(loads, reshard.plan));
  if (!replicas.ok()) {
    reshard.note = std::string(replicas.status().message());
    return reshard;
  }
  reshard.plan.replicas = *std::move(replicas);
  reshard.feasible = true;
  reshard.cost = PriceLoads(input, loads, reshard.plan);
  return reshard;
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
  const std::vector<RankId>& owners =
      plan.owner_of_unit.empty() ? input.owner_of_unit : plan.owner_of_unit;
  std::vector<double> work(input.ranks.size(), 0.0);
  for (size_t u = 0; u < input.unit_work.size(); ++u) {
    work[owners[u].value()] += input.unit_work[u];
  }
  for (const Replica& r : plan.replicas) {
    const double moved = input.unit_work[r.unit] * r.share;
    work[owners[r.unit].value()] -= moved;
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
  all_local.cost = PriceLoads(input, loads, all_local.plan);
  d.all_local_step_seconds = all_local.cost.step_seconds;
  d.ideal_step_seconds = LevelStep(input, loads);
  d.candidates.push_back(all_local);

  PlanCandidate replicas{.kind = CandidateKind::kReplicas, .feasible = true};
  replicas.plan.block = input.block;
  absl::StatusOr<std::vector<Replica>> balanced = BalanceExperts(loads);
  if (!balanced.ok()) return balanced.status();  // the input was validated: a bug
  replicas.plan.replicas = *std::move(balanced);
  replicas.cost = PriceLoads(input, loads, replicas.plan);
  if (replicas.plan.replicas.empty()) {
    replicas.note = "balanced within the tolerance, or no split pays its transfer";
  }
  // Loads within the band of the balanced ideal are balanced (BalancedBand says why), and
  // so are loads whose marginal skew the judge is waiting out.
  d.calm =
      WithinBand(all_local.cost.step_seconds, d.ideal_step_seconds, BalancedBand(policy, current));
  // (The judge waits out only blocks running all-local; replicas in force are never ended
  // by a wait.)
  if (d.calm || (input.skew_waits && !Replicating(current))) {
    replicas.note =
        absl::StrCat(replicas.note.empty() ? "" : absl::StrCat(replicas.note, "; "),
                     d.calm ? "not pushed: all-local is within the straggler threshold of the ideal"
                            : "not pushed: a marginal skew must last before it is balanced");
    d.calm = true;
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
    if (cur.feasible) cur.cost = PriceLoads(input, loads, cur.plan);
    d.candidates.push_back(cur);
    // The loads drift every step: re-split only when that is better by the hysteresis,
    // or every planning round would move slices back and forth for noise.
    if (cur.feasible && cur.plan.replicas != d.recommended.plan.replicas &&
        !BeatsByHysteresis(d.recommended.cost, cur.cost, policy.hysteresis)) {
      pushed = static_cast<int>(d.candidates.size()) - 1;
    }
  }

  // A skew that lasted is resharded when that beats the best on the experts' ownership
  // now, the plan in force included, with the moves paid over the horizon: the
  // persistence is the evidence the hysteresis stands in for elsewhere, and the reshard
  // then ends transfers that replicas would pay every step. A slow rank's skew lasts like
  // a hot expert's (SkewOfLoads weighs the ranks' speeds), so a chronic straggler needs
  // no rule of its own here. Not in a calm round (nothing to move), and not without a
  // horizon to pay the moves back over.
  if (input.skew_lasted && !d.calm) {
    PlanCandidate reshard = ReshardCandidate(input, loads);
    const double best = d.candidates[pushed].cost.objective;
    const bool pays = reshard.feasible && reshard.cost.objective < best;
    if (reshard.feasible && !pays) {
      reshard.note =
          absl::StrCat("not pushed: with its moves over ", Num(input.reshard_horizon_steps),
                       " steps, no better than ", Num(best), " on the ownership the experts have");
    }
    d.candidates.push_back(reshard);
    if (pays) {
      d.recommended = reshard;
      pushed = static_cast<int>(d.candidates.size()) - 1;
    }
  }
  const PlanCandidate& chosen = Balances(policy.mode) ? d.candidates[pushed] : all_local;
  d.plan = chosen.plan;
  d.predicted_step_seconds = chosen.cost.step_seconds;
  d.rank_seconds = chosen.cost.rank_seconds;
  d.objective = chosen.cost.objective;
  d.chosen = chosen.kind;
  d.kept_current = d.chosen == CandidateKind::kCurrent;
  return d;
}

}  // namespace planner_internal

double BalancedBand(const JobPolicy& policy, const BlockPlan* current) {
  return planner_internal::Replicating(current) ? policy.straggler_threshold / 2
                                                : policy.straggler_threshold;
}

absl::StatusOr<LoadsSkew> SkewOfLoads(const PlannerInput& input, const JobPolicy& policy,
                                      const BlockPlan* current) {
  if (absl::Status s = ValidatePlannerInput(input); !s.ok()) return s;
  if (input.unit_work.empty()) return absl::InvalidArgumentError("no loads (unit_work) given");
  const ExpertLoads loads = planner_internal::LoadsOf(input);
  const double all_local = planner_internal::PriceLoads(input, loads, BlockPlan{}).step_seconds;
  const double ideal = planner_internal::LevelStep(input, loads);
  LoadsSkew skew;
  skew.ratio = ideal > 0 ? all_local / ideal : 1;
  skew.band = BalancedBand(policy, current);
  skew.balanced = planner_internal::WithinBand(all_local, ideal, skew.band);
  skew.replicating = planner_internal::Replicating(current);
  return skew;
}

}  // namespace ballast::coordinator
