// The planner's interface (planner.h): inputs validated, the candidates priced and the
// block's decision taken. The layers below it, each in its own file:
//   problem.h          the model in the solver's terms and the one load formula;
//   search.h           the exact optimum per mode on one ownership (a walk over step times);
//   transfer_solver.h  at one step time: coverage, the fewest prunes, the least max load;
//   knapsack.h         the exact knapsack for those prunes, with its LP bounds;
//   ownership.h        water-filled and halfway counts, unit moves for a reshard;
//   explain.cc         the text operators read.
#include "coordinator/planner/planner.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "coordinator/planner/explain.h"
#include "coordinator/planner/ownership.h"
#include "coordinator/planner/problem.h"
#include "coordinator/planner/search.h"

namespace ballast::coordinator {
namespace {

using planner_internal::kRelTol;
using planner_internal::Load;
using planner_internal::MakeProblem;
using planner_internal::ModePlans;
using planner_internal::Num;
using planner_internal::OwnedCounts;
using planner_internal::PlanningMode;
using planner_internal::Price;
using planner_internal::Problem;
using planner_internal::PrunesAllowed;
using planner_internal::Solution;
using planner_internal::SolveMode;
using planner_internal::TransfersAllowed;

std::vector<Offload> PairOffloads(const std::vector<int32_t>& y, const std::vector<int32_t>& x) {
  std::vector<Offload> out;
  size_t o = 0, h = 0;
  int32_t left_o = y.empty() ? 0 : y[0], left_h = x.empty() ? 0 : x[0];
  while (true) {
    while (o < y.size() && left_o == 0) {
      if (++o < y.size()) left_o = y[o];
    }
    while (h < x.size() && left_h == 0) {
      if (++h < x.size()) left_h = x[h];
    }
    if (o >= y.size() || h >= x.size()) break;
    const int32_t units = std::min(left_o, left_h);
    out.push_back({RankId(static_cast<int32_t>(o)), RankId(static_cast<int32_t>(h)), units});
    left_o -= units;
    left_h -= units;
  }
  return out;
}

PlanCandidate MakeCandidate(CandidateKind kind, BlockId block, const Problem& problem,
                            const Solution& s) {
  PlanCandidate cand;
  cand.kind = kind;
  cand.plan.block = block;
  cand.feasible = s.feasible;
  if (!s.feasible) {
    cand.note = s.reason;
    return cand;
  }
  bool any_pruned = false;
  for (int32_t zr : s.z) any_pruned = any_pruned || zr > 0;
  if (any_pruned) cand.plan.pruned_units = s.z;
  cand.plan.offloads = PairOffloads(s.y, s.x);
  cand.cost.step_seconds = s.step;
  cand.cost.objective = s.objective;
  cand.cost.rank_seconds.resize(problem.num_ranks);
  for (int32_t r = 0; r < problem.num_ranks; ++r) {
    cand.cost.pruned_units += s.z[r];
    cand.cost.offloaded_units += s.y[r];
    cand.cost.rank_seconds[r] =
        Load(problem.fixed_seconds[r], problem.seconds_per_unit[r], problem.tau,
             int64_t{problem.owned[r]} - s.z[r] - s.y[r] + s.x[r], int64_t{s.y[r]} + s.x[r]);
  }
  return cand;
}

// The plans priced on the current ownership after all-local, in the order explain prints
// them: each a technique the mode may allow, and the last one allowed is the mode's best.
struct Strategy {
  CandidateKind kind;
  bool (*allowed)(BalanceMode mode);
  Solution ModePlans::*solution;
};
constexpr Strategy kStrategies[] = {
    {CandidateKind::kResize, &PrunesAllowed, &ModePlans::resize},
    {CandidateKind::kMigrate, &TransfersAllowed, &ModePlans::migrate},
    {CandidateKind::kAuto, [](BalanceMode mode) { return mode == BalanceMode::kAuto; },
     &ModePlans::joint},
};

absl::Status ValidateInputs(const PlannerInput& input, const JobPolicy& policy) {
  BALLAST_RETURN_IF_ERROR(ValidatePlannerInput(input));
  if (absl::Status s = ValidatePolicy(policy); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("policy: ", s.message()));
  }
  return absl::OkStatus();
}

// Every unit computed by its owner, priced.
Solution AllLocal(const Problem& problem) {
  Solution all_local;
  all_local.feasible = true;
  all_local.z.assign(problem.num_ranks, 0);
  all_local.y.assign(problem.num_ranks, 0);
  all_local.x.assign(problem.num_ranks, 0);
  Price(problem, &all_local);
  return all_local;
}

// The reshard candidate: the water-filled ownership and the mode's best plan on it, or
// (`even_split`, for calm ranks) the even ownership run all-local, as calm ranks on an
// even split run. Worth pricing only for persistent imbalance (a chronic straggler, a
// cordon, or ranks calm for a while on an uneven split): it pays one transfer plus
// optimizer state. It is chosen only below `needed`, so the search proves no more
// than whether a plan beats that (`cut_off`: none does, and the plan is the best seen,
// not necessarily the best on that ownership). `halfway` (never with `even_split`): a
// refinement of a split already uneven goes only halfway to the water-filled counts
// (HalfwayCounts).
absl::StatusOr<PlanCandidate> PriceReshard(const PlannerInput& input, const JobPolicy& policy,
                                           BalanceMode mode, const std::vector<int32_t>& owned,
                                           bool even_split, bool halfway, double needed,
                                           bool* cut_off) {
  *cut_off = false;
  std::vector<PlannerRank> ranks = input.ranks;
  if (even_split) {
    for (PlannerRank& rank : ranks) {
      rank.seconds_per_unit = 1;
      rank.fixed_seconds = 0;
    }
  }
  BALLAST_ASSIGN_OR_RETURN(
      std::vector<int32_t> filled,
      WaterFillCounts(ranks, static_cast<int32_t>(input.owner_of_unit.size())));
  std::string aim;
  if (halfway) {
    aim = absl::StrCat("halfway to the water-filled ", absl::StrJoin(filled, ","),
                       " (refining an uneven split)");
    filled = HalfwayCounts(owned, filled);
  }
  PlanCandidate reshard;
  reshard.kind = CandidateKind::kReshard;
  reshard.plan.block = input.block;
  if (filled == owned) {
    reshard.note = aim.empty() ? "the water-filled ownership is the current one"
                               : absl::StrCat(aim, " is the current one");
    return reshard;
  }
  const Problem moved_problem = MakeProblem(input, filled, policy, mode);
  if (even_split) {
    reshard = MakeCandidate(CandidateKind::kReshard, input.block, moved_problem,
                            AllLocal(moved_problem));
  } else {
    const ModePlans moved = SolveMode(moved_problem, mode, needed);
    *cut_off = moved.joint_cut_off;
    reshard = MakeCandidate(CandidateKind::kReshard, input.block, moved_problem, moved.best(mode));
  }
  reshard.plan.owner_of_unit = MoveUnits(input.owner_of_unit, filled);
  for (size_t u = 0; u < input.owner_of_unit.size(); ++u) {
    reshard.cost.moved_units += reshard.plan.owner_of_unit[u] != input.owner_of_unit[u];
  }
  if (!aim.empty())
    reshard.note = reshard.note.empty() ? aim : absl::StrCat(aim, "; ", reshard.note);
  return reshard;
}

// The plan in force, priced under the new inputs (infeasible, with the reason, when it no
// longer fits them: a budget, a cordon).
PlanCandidate PriceCurrent(const PlannerInput& input, const JobPolicy& policy,
                           const BlockPlan& current) {
  PlanCandidate cur;
  cur.kind = CandidateKind::kCurrent;
  cur.plan = current;
  cur.plan.block = input.block;
  // A reshard already applied is just the ownership now: do not re-send it.
  if (cur.plan.owner_of_unit == input.owner_of_unit) cur.plan.owner_of_unit.clear();
  absl::StatusOr<PlanCost> cost = EvaluatePlan(input, policy, cur.plan);
  if (cost.ok()) {
    cur.feasible = true;
    cur.cost = *std::move(cost);
  } else {
    cur.note = std::string(cost.status().message());
  }
  return cur;
}

void Choose(const PlanCandidate& candidate, BlockDecision* d) {
  d->plan = candidate.plan;
  d->predicted_step_seconds = candidate.cost.step_seconds;
  d->objective = candidate.cost.objective;
  d->chosen = candidate.kind;
}

}  // namespace

absl::string_view CandidateKindName(CandidateKind kind) {
  switch (kind) {
    case CandidateKind::kAllLocal:
      return "all-local";
    case CandidateKind::kResize:
      return "resize";
    case CandidateKind::kMigrate:
      return "migrate";
    case CandidateKind::kAuto:
      return "auto";
    case CandidateKind::kReshard:
      return "reshard";
    case CandidateKind::kCurrent:
      return "current";
  }
  return "unknown";
}

int64_t PruneBudget(double fraction, int64_t units) {
  return static_cast<int64_t>(std::floor(fraction * static_cast<double>(units) + 1e-9));
}

absl::Status ValidatePlannerInput(const PlannerInput& input) {
  const size_t p = input.ranks.size();
  if (p == 0) return absl::InvalidArgumentError("ranks is empty");
  bool any_active = false;
  for (size_t r = 0; r < p; ++r) {
    const PlannerRank& rank = input.ranks[r];
    if (!std::isfinite(rank.seconds_per_unit) || rank.seconds_per_unit <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ranks[", r, "].seconds_per_unit ", rank.seconds_per_unit, " must be finite and > 0"));
    }
    if (!std::isfinite(rank.fixed_seconds) || rank.fixed_seconds < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ranks[", r, "].fixed_seconds ", rank.fixed_seconds, " must be finite and >= 0"));
    }
    if (rank.owned_units < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("ranks[", r, "].owned_units ", rank.owned_units, " must be >= 0"));
    }
    any_active = any_active || !rank.cordoned;
  }
  if (!any_active) {
    return absl::InvalidArgumentError(
        absl::StrCat("ranks: all ", p, " ranks are cordoned; at least one must compute"));
  }
  const double tau = input.transfer_seconds_per_unit;
  if (!std::isfinite(tau) || tau < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("transfer_seconds_per_unit ", tau, " must be finite and >= 0"));
  }
  std::vector<int64_t> counted(p, 0);
  for (size_t u = 0; u < input.owner_of_unit.size(); ++u) {
    const int32_t owner = input.owner_of_unit[u].value();
    if (owner < 0 || static_cast<size_t>(owner) >= p) {
      return absl::InvalidArgumentError(
          absl::StrCat("owner_of_unit[", u, "] = ", owner, " out of range [0, ", p, ")"));
    }
    ++counted[owner];
  }
  for (size_t r = 0; r < p; ++r) {
    if (counted[r] != input.ranks[r].owned_units) {
      return absl::InvalidArgumentError(
          absl::StrCat("ranks[", r, "].owned_units ", input.ranks[r].owned_units,
                       " but owner_of_unit gives rank ", r, " ", counted[r], " units"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<PlanCost> EvaluatePlan(const PlannerInput& input, const JobPolicy& policy,
                                      const BlockPlan& plan) {
  BALLAST_RETURN_IF_ERROR(ValidateInputs(input, policy));
  const int32_t p = static_cast<int32_t>(input.ranks.size());
  const size_t total = input.owner_of_unit.size();
  std::vector<int32_t> owned = OwnedCounts(input);
  PlanCost cost;
  if (!plan.owner_of_unit.empty()) {
    if (plan.owner_of_unit.size() != total) {
      return absl::InvalidArgumentError(absl::StrCat("plan.owner_of_unit has ",
                                                     plan.owner_of_unit.size(),
                                                     " entries, block has ", total, " units"));
    }
    std::fill(owned.begin(), owned.end(), 0);
    for (size_t u = 0; u < total; ++u) {
      const int32_t r = plan.owner_of_unit[u].value();
      if (r < 0 || r >= p) {
        return absl::InvalidArgumentError(
            absl::StrCat("plan.owner_of_unit[", u, "] = ", r, " out of range [0, ", p, ")"));
      }
      ++owned[r];
      if (plan.owner_of_unit[u] != input.owner_of_unit[u]) ++cost.moved_units;
    }
  }
  std::vector<int64_t> z(p, 0), y(p, 0), x(p, 0);
  if (!plan.pruned_units.empty()) {
    if (plan.pruned_units.size() != static_cast<size_t>(p)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "plan.pruned_units has ", plan.pruned_units.size(), " entries, group has ", p, " ranks"));
    }
    for (int32_t r = 0; r < p; ++r) {
      if (plan.pruned_units[r] < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("plan.pruned_units[", r, "] = ", plan.pruned_units[r], " must be >= 0"));
      }
      z[r] = plan.pruned_units[r];
    }
  }
  for (size_t i = 0; i < plan.offloads.size(); ++i) {
    const Offload& o = plan.offloads[i];
    const int32_t owner = o.owner.value(), helper = o.helper.value();
    if (owner < 0 || owner >= p || helper < 0 || helper >= p || owner == helper || o.units <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("plan.offloads[", i, "] ", owner, "->", helper,
                                                     " x", o.units, " is malformed"));
    }
    for (size_t j = 0; j < i; ++j) {
      if (plan.offloads[j].owner == o.owner && plan.offloads[j].helper == o.helper) {
        return absl::InvalidArgumentError(
            absl::StrCat("plan.offloads[", i, "] repeats ", owner, "->", helper));
      }
    }
    y[owner] += o.units;
    x[helper] += o.units;
  }
  for (int32_t r = 0; r < p; ++r) {
    if (z[r] + y[r] > owned[r]) {
      return absl::InvalidArgumentError(absl::StrCat("plan: rank ", r, " prunes ", z[r],
                                                     " and offloads ", y[r], " units but owns ",
                                                     owned[r]));
    }
  }
  const BalanceMode mode = PlanningMode(policy.mode);
  if (!TransfersAllowed(mode) && (!plan.offloads.empty() || !plan.owner_of_unit.empty())) {
    return absl::FailedPreconditionError("mode resize: the plan offloads or reshards");
  }
  const int64_t group_cap =
      PrunesAllowed(mode) ? PruneBudget(policy.max_pruned_fraction_group, total) : 0;
  int64_t pruned = 0;
  for (int32_t r = 0; r < p; ++r) {
    const int64_t cap =
        PrunesAllowed(mode) ? PruneBudget(policy.max_pruned_fraction_rank, owned[r]) : 0;
    if (z[r] > cap) {
      return absl::FailedPreconditionError(
          absl::StrCat("plan.pruned_units[", r, "] = ", z[r], " exceeds the budget ", cap,
                       " (mode ", BalanceModeName(policy.mode), ", max_pruned_fraction_rank ",
                       policy.max_pruned_fraction_rank, " of ", owned[r], " units)"));
    }
    pruned += z[r];
  }
  if (pruned > group_cap) {
    return absl::FailedPreconditionError(
        absl::StrCat("plan prunes ", pruned, " units, over the group budget ", group_cap,
                     " (max_pruned_fraction_group ", policy.max_pruned_fraction_group, ")"));
  }
  const double tau = input.transfer_seconds_per_unit;
  cost.rank_seconds.resize(p);
  for (int32_t r = 0; r < p; ++r) {
    const int64_t u = owned[r] - z[r] - y[r] + x[r];
    if (input.ranks[r].cordoned && (u != 0 || x[r] != 0)) {
      return absl::FailedPreconditionError(
          absl::StrCat("rank ", r, " is cordoned but the plan has it compute ", u, " units"));
    }
    cost.rank_seconds[r] =
        Load(input.ranks[r].fixed_seconds, input.ranks[r].seconds_per_unit, tau, u, y[r] + x[r]);
    cost.step_seconds = std::max(cost.step_seconds, cost.rank_seconds[r]);
    cost.offloaded_units += static_cast<int32_t>(y[r]);
  }
  cost.pruned_units = static_cast<int32_t>(pruned);
  const double lambda =
      total > 0 ? policy.accuracy_weight_seconds / static_cast<double>(total) : 0.0;
  cost.objective = cost.step_seconds + lambda * static_cast<double>(pruned);
  return cost;
}

absl::StatusOr<PlanCandidate> BestPlan(const PlannerInput& input, const JobPolicy& policy) {
  BALLAST_RETURN_IF_ERROR(ValidateInputs(input, policy));
  const BalanceMode mode = PlanningMode(policy.mode);
  const std::vector<int32_t> owned = OwnedCounts(input);
  const Problem problem = MakeProblem(input, owned, policy, mode);
  const ModePlans plans = SolveMode(problem, mode);
  const CandidateKind kind = mode == BalanceMode::kResize    ? CandidateKind::kResize
                             : mode == BalanceMode::kMigrate ? CandidateKind::kMigrate
                                                             : CandidateKind::kAuto;
  PlanCandidate cand = MakeCandidate(kind, input.block, problem, plans.best(mode));
  if (!cand.feasible) {
    return absl::FailedPreconditionError(
        absl::StrCat("mode ", BalanceModeName(policy.mode), ": ", cand.note));
  }
  return cand;
}

absl::StatusOr<BlockDecision> PlanBlock(const PlannerInput& input, const JobPolicy& policy,
                                        const BlockPlan* current) {
  BALLAST_RETURN_IF_ERROR(ValidateInputs(input, policy));
  const BalanceMode mode = PlanningMode(policy.mode);
  const std::vector<int32_t> owned = OwnedCounts(input);
  const Problem problem = MakeProblem(input, owned, policy, mode);

  BlockDecision d;
  // H = sum of 1 / c_r and F = sum of f_r / c_r over the ranks not cordoned, and the
  // largest fixed cost: no plan's step is below it, whatever it moves.
  double inverse_sum = 0, fixed_units = 0, most_fixed = 0;
  bool cordoned_owner = false, reshard_worth_pricing = false, any_cordoned = false;
  for (int32_t r = 0; r < problem.num_ranks; ++r) {
    const PlannerRank& rank = input.ranks[r];
    if (!rank.cordoned) {
      inverse_sum += 1 / rank.seconds_per_unit;
      fixed_units += rank.fixed_seconds / rank.seconds_per_unit;
    }
    most_fixed = std::max(most_fixed, rank.fixed_seconds);
    any_cordoned = any_cordoned || rank.cordoned;
    cordoned_owner = cordoned_owner || (rank.cordoned && rank.owned_units > 0);
    reshard_worth_pricing = reshard_worth_pricing || rank.cordoned || rank.chronic;
    d.all_local_step_seconds = std::max(d.all_local_step_seconds,
                                        Load(problem.fixed_seconds[r], problem.seconds_per_unit[r],
                                             problem.tau, rank.owned_units, 0));
  }
  // The water level with p units pruned: every rank computing at its own speed, nothing
  // transferred, all finishing together, (N - p + F) / H; or, when that is below some
  // rank's fixed cost, that cost (then the level is wrong, but the step cannot be lower).
  // With no fixed costs, N / H exactly.
  auto water_level = [&](double pruned) {
    return std::max(most_fixed,
                    (static_cast<double>(problem.num_units) - pruned + fixed_units) / inverse_sum);
  };
  d.ideal_step_seconds = water_level(0);

  // Candidates on the current ownership: all-local, then the mode's techniques; then the
  // reshard and the plan in force (at most 6).
  d.candidates.reserve(6);
  d.candidates.push_back(
      MakeCandidate(CandidateKind::kAllLocal, input.block, problem, AllLocal(problem)));
  if (cordoned_owner) {
    d.candidates.back().feasible = false;
    d.candidates.back().note = "a cordoned rank would compute its units";
  }
  const ModePlans plans = SolveMode(problem, mode);
  for (const Strategy& strategy : kStrategies) {
    if (!strategy.allowed(mode)) continue;
    d.candidates.push_back(
        MakeCandidate(strategy.kind, input.block, problem, plans.*strategy.solution));
  }
  PlanCandidate best = d.candidates.back();
  if (!best.feasible) {
    return absl::FailedPreconditionError(
        absl::StrCat("block ", input.block.value(), " mode ", BalanceModeName(policy.mode), ": ",
                     best.note, "; allow migration (mode auto or migrate) or raise the budget"));
  }

  // Calm ranks compute alike, so all-local is as good as the ownership is even. Units that
  // do not divide evenly leave one more on some ranks: that is still even.
  const int32_t most_owned =
      problem.num_ranks == 0 ? 0 : *std::max_element(problem.owned.begin(), problem.owned.end());
  const double share =
      problem.num_ranks == 0 ? 0 : static_cast<double>(problem.num_units) / problem.num_ranks;
  const bool even =
      most_owned <= std::max(std::ceil(share), (1 + policy.straggler_threshold) * share);
  // After a reshard for a straggler that has since recovered, calm ranks run an uneven
  // split. Offloading evens their compute, but for good: the midrun benchmark with 3 ms
  // quota periods (docs/benchmarks.md) resharded during a 63 s contention and offloaded
  // back for the 210 steps after it, never all-local again. The even split is where a
  // calm group rests, and the estimates cannot tell calm ranks apart, so its reshard
  // only has to be no worse than the best plan on the uneven split by that noise. (Not
  // the hysteresis: the dwell raises it to 0.3 right after a plan change, and that would
  // make going back easier then, not harder.)
  const bool uneven_calm = input.calm && input.calm_lasted && !any_cordoned &&
                           !reshard_worth_pricing && !even;
  // A threshold t on speeds is t / (1 + t) on the objective, below 1 for any t.
  const double noise = policy.straggler_threshold / (1 + policy.straggler_threshold);

  // Otherwise a reshard is chosen only when it beats the best plan on the current
  // ownership by the hysteresis and, unless a rank is cordoned, by as much as the
  // straggler threshold: estimates differ by that much in noise, and a split resharded on
  // noise moves units back and forth (measured: one to five units every 2 s dwell on a
  // shaped link, tests/integration/learned_link_test.sh).
  bool best_evens_split = false;
  if (TransfersAllowed(mode) && (reshard_worth_pricing || uneven_calm)) {
    // A cordon is no estimate: draining it needs only the hysteresis.
    const double margin = any_cordoned ? policy.hysteresis : std::max(policy.hysteresis, noise);
    const double needed =
        uneven_calm ? (1 + noise) * best.cost.objective : (1 - margin) * best.cost.objective;
    // No split beats every rank computing at its own speed with nothing transferred: with
    // p units pruned the step is at least the water level (water_level above), so the
    // objective is at least the least of water_level(p) + lambda p over p in [0, budget]:
    // a convex function, linear but for where the level meets the largest fixed cost, so
    // the least is at an end or there. When even that misses `needed`, the search on the
    // water-filled split is skipped (on the random planner benchmark, 40% of the reshards
    // priced).
    const double prune_cap = static_cast<double>(problem.group_prune_cap);
    const double kink =
        std::clamp(static_cast<double>(problem.num_units) + fixed_units - most_fixed * inverse_sum,
                   0.0, prune_cap);
    const double perfect =
        std::min({d.ideal_step_seconds, water_level(prune_cap) + problem.lambda * prune_cap,
                  water_level(kink) + problem.lambda * kink});
    bool cut_off = false;
    PlanCandidate reshard;
    if (!uneven_calm && perfect >= needed * (1 + kRelTol)) {
      reshard.kind = CandidateKind::kReshard;
      reshard.plan.block = input.block;
      reshard.note = absl::StrCat(
          "not priced: no split can beat ", Num(needed), " (by ", Num(margin),
          ": the hysteresis or the straggler threshold); perfect balance with no transfers "
          "gives ",
          Num(perfect));
    } else {
      // A split already uneven (some rank more than the threshold above or below an even
      // share) comes from a past reshard: the estimates now were measured under the load
      // that move set, and under a CPU quota or a co-tenant a rank's speed moves with its
      // load (fewer units, more idle time, less throttled), so the water-filled counts
      // overshoot. Going halfway settles where going all the way swung: 111/69 -> 123/57
      // -> 111/69 on the shaped link (tests/integration/learned_link_test.sh). The half
      // move must beat the margin itself, so a refinement needs about twice the gap a
      // first reshard does. Not for a cordon's drain, nor for the way back to even.
      const int32_t least_owned = *std::min_element(problem.owned.begin(), problem.owned.end());
      const bool uneven =
          !even ||
          least_owned < std::min(std::floor(share), share / (1 + policy.straggler_threshold));
      const bool halfway = uneven && !any_cordoned && !uneven_calm;
      BALLAST_ASSIGN_OR_RETURN(reshard, PriceReshard(input, policy, mode, owned, uneven_calm,
                                                     halfway, needed, &cut_off));
    }
    const bool wins = reshard.feasible && reshard.cost.objective < needed;
    if (reshard.feasible && !wins) {
      // What it aimed at (a refinement's halfway counts) stays in front.
      const std::string aim = reshard.note.empty() ? "" : absl::StrCat(reshard.note, "; ");
      reshard.note =
          aim +
          (uneven_calm
               ? absl::StrCat("not chosen: must be below ", Num(needed), " (the best plan on ",
                              "the uneven split x ", Num(1 + noise), ": estimate noise)")
               : absl::StrCat("not chosen: must beat ", Num(needed), " (by ", Num(margin),
                              ": the hysteresis or the straggler threshold)",
                              cut_off ? ", which no plan on it does (the best seen)" : ""));
    }
    d.candidates.push_back(reshard);
    if (wins) {
      best = std::move(reshard);
      best_evens_split = uneven_calm;
    }
  }
  d.recommended = best;
  d.calm = input.calm && !any_cordoned && even;
  if (policy.mode == BalanceMode::kOff || policy.mode == BalanceMode::kObserve || d.calm) {
    // Leaving a plan for a calm group skips the hysteresis: the plan was for a straggler
    // that is gone, and all-local moves no data.
    Choose(d.candidates.front(), &d);
  } else {
    Choose(best, &d);
    d.evens_split = best_evens_split;
    // Back to the even split needs no hysteresis against the plan in force either: that
    // plan only balances a split that no longer has a reason.
    if (current != nullptr && !d.evens_split) {
      PlanCandidate cur = PriceCurrent(input, policy, *current);
      // Flapping between near-equal plans costs transfers and re-layouts for nothing.
      if (cur.feasible && !(best.cost.objective < (1 - policy.hysteresis) * cur.cost.objective)) {
        Choose(cur, &d);
        d.kept_current = true;
      }
      d.candidates.push_back(std::move(cur));
    }
  }
  return d;
}

}  // namespace ballast::coordinator
