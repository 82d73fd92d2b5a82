#include "coordinator/planner/candidates.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "coordinator/planner/explain.h"
#include "coordinator/planner/ownership.h"
#include "coordinator/planner/plan_cost.h"

namespace ballast::coordinator::planner_internal {
namespace {

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

// Every unit computed by its owner, priced as Price and MakeCandidate would price a
// solution of no prunes and no transfers, without allocating its counts.
PlanCandidate AllLocalCandidate(CandidateKind kind, BlockId block, const Problem& problem) {
  PlanCandidate cand;
  cand.kind = kind;
  cand.feasible = true;
  cand.plan.block = block;
  cand.cost.rank_seconds.resize(problem.num_ranks);
  for (int32_t r = 0; r < problem.num_ranks; ++r) {
    cand.cost.rank_seconds[r] = Load(problem.fixed_seconds[r], problem.seconds_per_unit[r],
                                     problem.tau, problem.owned[r], 0);
    cand.cost.step_seconds = std::max(cand.cost.step_seconds, cand.cost.rank_seconds[r]);
  }
  cand.cost.objective = cand.cost.step_seconds;  // nothing pruned
  return cand;
}

// ---------------------------------------------------------------------------------------
// All-local.

bool Always(const BlockState&, const PlanCandidate*) { return true; }

absl::StatusOr<Evaluated> EvaluateAllLocal(const BlockState& block, const PlanCandidate*) {
  Evaluated out;
  out.candidate = AllLocalCandidate(CandidateKind::kAllLocal, block.input->block, block.problem);
  if (block.cordoned_owner) {
    out.candidate.feasible = false;
    out.candidate.note = "a cordoned rank would compute its units";
  }
  // Leaving a plan for a calm group skips the hysteresis: the plan was for a straggler
  // that is gone, and all-local moves no data.
  out.verdict = block.balances ? Verdict::kListed : Verdict::kPushed;
  return out;
}

// ---------------------------------------------------------------------------------------
// The mode's techniques on the current ownership, as MakeBlockState solved them.

bool Allows(CandidateKind technique, BalanceMode mode) {
  switch (technique) {
    case CandidateKind::kResize:
      return PrunesAllowed(mode);
    case CandidateKind::kMigrate:
      return TransfersAllowed(mode);
    default:
      return mode == BalanceMode::kAuto;
  }
}

const Solution& SolutionOf(CandidateKind technique, const ModePlans& plans) {
  switch (technique) {
    case CandidateKind::kResize:
      return plans.resize;
    case CandidateKind::kMigrate:
      return plans.migrate;
    default:
      return plans.joint;
  }
}

template <CandidateKind kTechnique>
bool TechniqueApplies(const BlockState& block, const PlanCandidate*) {
  return Allows(kTechnique, block.techniques);
}

template <CandidateKind kTechnique>
absl::StatusOr<Evaluated> EvaluateTechnique(const BlockState& block, const PlanCandidate*) {
  Evaluated out;
  out.candidate = MakeCandidate(kTechnique, block.input->block, block.problem,
                                SolutionOf(kTechnique, block.plans));
  if (kTechnique == CandidateKind::kAuto && block.current_cut_off) {
    out.candidate.note = absl::StrCat(
        "the best seen: no plan on this ownership is below ", Num(block.current_cutoff),
        ", so the reshard wins whatever the best one is (the search stopped there)");
  }
  if (!out.candidate.feasible && kTechnique == ModeTechnique(block.mode)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "block ", block.input->block.value(), " mode ", BalanceModeName(block.policy->mode), ": ",
        out.candidate.note, "; allow migration (mode auto or migrate) or raise the budget"));
  }
  out.verdict = Verdict::kRecommended;
  return out;
}

// ---------------------------------------------------------------------------------------
// The reshard.

// A chronic straggler's first reshard (from an even split, no cordon) against a plan that
// offloads its units (`other`: the best plan on the current ownership, or the plan in
// force): the units the offloads ship every step, owned instead. Both act on the same
// estimates, so the noise a reshard's margin guards against would move the offloads as
// much; and what the model cannot price favours owning. At the same split, offloading ran
// 1.08x as long as owning under a 3x slower device and 1.20x under a 2x CPU quota, priced
// within 1-2% of each other (docs/benchmarks.md, 2026-11-29 (d)): an offload adds two
// points a block where the helper may wait on its owner, beyond its bytes. With the 9%
// margin the reshard came at steps 389-927 of 1,000, or never, and its timing set the
// step. So it only has to be no slower by the model, and then the split is uneven: a
// further reshard and offloads on top of it need the margin again, so this ratchets once.
bool OwningInsteadOfOffloading(const BlockState& block, bool other_offloads) {
  return block.reshard_worth_pricing && block.near_share && !block.any_cordoned && other_offloads;
}

// What a reshard must beat the best plan on the current ownership by (EvaluateReshard
// says why): it wins below `factor` times that plan's objective. A cordon is no estimate:
// draining it needs only the hysteresis; a straggler's first reshard in place of
// offloads, nothing (OwningInsteadOfOffloading); the way back to an even split, only to
// be no worse by the noise.
struct ReshardBar {
  double margin = 0;
  absl::string_view why;
  double factor = 1;
};
ReshardBar ReshardBarFor(const BlockState& block, bool best_offloads) {
  ReshardBar bar;
  bar.margin = std::max(block.reshard_hysteresis, block.noise);
  bar.why = ": the hysteresis or the straggler threshold";
  if (block.any_cordoned) bar.margin = block.reshard_hysteresis;
  if (OwningInsteadOfOffloading(block, best_offloads)) {
    bar.margin = 0;
    bar.why = ": owning what the plan offloads needs none";
  }
  bar.factor = block.uneven_calm ? 1 + block.noise : 1 - bar.margin;
  return bar;
}

// No split beats every rank computing at its own speed with nothing transferred: with p
// units pruned the step is at least the water level (WaterLevel), so the objective is at
// least the least of WaterLevel(p) + lambda p over p in [0, budget]: a convex function,
// linear but for where the level meets the largest fixed cost, so the least is at an end
// or there.
double PerfectBalance(const BlockState& block) {
  const Problem& problem = block.problem;
  const double prune_cap = static_cast<double>(problem.group_prune_cap);
  const double kink = std::clamp(static_cast<double>(problem.num_units) + block.fixed_units -
                                     block.most_fixed * block.inverse_sum,
                                 0.0, prune_cap);
  return std::min({WaterLevel(block, 0), WaterLevel(block, prune_cap) + problem.lambda * prune_cap,
                   WaterLevel(block, kink) + problem.lambda * kink});
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
PlanCandidate PriceReshard(const BlockState& block, bool even_split, bool halfway, double needed,
                           bool* cut_off) {
  const PlannerInput& input = *block.input;
  *cut_off = false;
  std::vector<PlannerRank> ranks = input.ranks;
  if (even_split) {
    for (PlannerRank& rank : ranks) {
      rank.seconds_per_unit = 1;
      rank.fixed_seconds = 0;
    }
  }
  std::vector<int32_t> filled =
      WaterFillCounts(ranks, static_cast<int32_t>(input.owner_of_unit.size()));
  std::string aim;
  if (halfway) {
    aim = absl::StrCat("halfway to the water-filled ", absl::StrJoin(filled, ","),
                       " (refining an uneven split)");
    filled = HalfwayCounts(block.owned, filled);
  }
  PlanCandidate reshard;
  reshard.kind = CandidateKind::kReshard;
  reshard.plan.block = input.block;
  if (filled == block.owned) {
    reshard.note = aim.empty() ? "the water-filled ownership is the current one"
                               : absl::StrCat(aim, " is the current one");
    return reshard;
  }
  const Problem moved_problem = MakeProblem(input, filled, *block.policy, block.mode);
  if (even_split) {
    reshard = AllLocalCandidate(CandidateKind::kReshard, input.block, moved_problem);
  } else {
    // In auto the candidate is the joint plan alone: the new ownership's resize-only plan,
    // not listed, would only seed the search with an incumbent that the exact search
    // matches for itself where it is the best (with the same objective; on such a tie the
    // plan may differ, as among the search's own ties). -3.2% instructions on the random
    // planner benchmark, -4% to -6% on the realistic ones, decisions identical.
    const bool joint = block.techniques == BalanceMode::kAuto;
    ModePlans moved = SolveTechniques(
        moved_problem, joint ? BalanceMode::kMigrate : block.techniques, block.reshard_solver);
    if (joint) SolveJoint(moved_problem, block.reshard_solver, needed, &moved);
    *cut_off = moved.joint_cut_off;
    reshard = MakeCandidate(CandidateKind::kReshard, input.block, moved_problem,
                            moved.best(block.techniques));
  }
  reshard.plan.owner_of_unit = MoveUnits(input.owner_of_unit, filled);
  for (size_t u = 0; u < input.owner_of_unit.size(); ++u) {
    reshard.cost.moved_units += reshard.plan.owner_of_unit[u] != input.owner_of_unit[u];
  }
  if (!aim.empty())
    reshard.note = reshard.note.empty() ? aim : absl::StrCat(aim, "; ", reshard.note);
  return reshard;
}

// Whether the block prices a reshard: persistent imbalance in a mode that may move units.
bool ReshardPriced(const BlockState& block) {
  return TransfersAllowed(block.mode) && (block.reshard_worth_pricing || block.uneven_calm);
}

bool ReshardApplies(const BlockState& block, const PlanCandidate* recommended) {
  return recommended != nullptr && ReshardPriced(block);
}

// The reshard priced before the joint search on the current ownership (MakeBlockState),
// so that search proves only what the decision needs, as the reshard's own search does.
// A reshard that wins is priced exactly either way; the best plan on the current
// ownership is needed exactly only when the reshard does not win, since then it is the
// recommendation. So the reshard's objective R comes first, searched as far as any plan
// of the mode on the current ownership (at most the better of its resize-only and
// migrate-only plans, B_ub) could let it win; and then the current ownership's search
// stops once no plan there is below R over the factor of the reshard's bar (ReshardBar)
// for the plan it would face (below): the reshard then wins whatever that plan is. On
// the random planner benchmark the reshard won 3,914 of the 4,120 times it was priced,
// mostly by a few percent over its bar: this spares three quarters of the current
// ownership's joint search there (0.79e9 -> 0.20e9 instructions a run) and a third of
// the decision's, with the same decisions (docs/benchmarks.md, 2026-12-05 (f)).
// Not for the way back to an even split (priced without a search), nor where a perfect
// balance is within the bar of B_ub (below), nor with a bar of factor 0 or less (a
// hysteresis of 1).
void PriceReshardFirst(BlockState* block) {
  if (!ReshardPriced(*block) || block->uneven_calm) return;
  const ModePlans& plans = block->plans;
  double best_bound = kInf;
  if (plans.resize.feasible) best_bound = plans.resize.objective;
  if (plans.migrate.feasible) best_bound = std::min(best_bound, plans.migrate.objective);
  const double low = ReshardBarFor(*block, false).factor, high = ReshardBarFor(*block, true).factor;
  // The bar against an offloading plan is the same or none, so high >= low.
  if (!(low > 0) || !std::isfinite(best_bound)) return;
  // At or above `low` times B_ub, the reshard's objective (no less than the
  // perfect balance) is not that far under B, so the current ownership's search could
  // stop early only against a plan that offloads (the cutoff below): the order is then
  // the one before, EvaluateReshard decides from the exact best plan, and it skips the
  // reshard's search where even a perfect balance misses the bar.
  if (PerfectBalance(*block) * (1 + kRelTol) >= low * best_bound) return;
  // The joint search keeps its seed, or a plan with fewer prunes, within kRelTol of a
  // better one, so B may exceed B_ub by that much: the bar above it, by far more.
  const double loses_from = high * best_bound * (1 + 1e-9);
  const bool halfway = !block->near_share && !block->any_cordoned;
  block->reshard =
      PriceReshard(*block, /*even_split=*/false, halfway, loses_from, &block->reshard_cut_off);
  block->reshard_first = true;
  if (block->reshard.feasible && !block->reshard_cut_off) {
    // The bar is lower against a plan that offloads (`high`: none for a straggler's first
    // reshard), and the best plan without offloads is resize-only's (none is feasible
    // when it is not). When the reshard beats that one by its bar, it beats any plan
    // that offloads and is not below R / high; else any plan not below R / low. Margins
    // well above the search's tolerances (1e-12), so that a search cut off there proves
    // the reshard below its bar.
    const double r = block->reshard.cost.objective;
    const bool beats_every_plan_without_offloads =
        !plans.resize.feasible || r < low * plans.resize.objective * (1 - 1e-9);
    block->current_cutoff = r / (beats_every_plan_without_offloads ? high : low) * (1 + 1e-9);
  }
}

// A reshard is chosen only when it beats the recommendation (the best plan on the current
// ownership) by the hysteresis and, unless a rank is cordoned, by as much as the
// straggler threshold: estimates differ by that much in noise, and a split resharded on
// noise moves units back and forth (measured: one to five units every 2 s dwell on a
// shaped link, tests/integration/learned_link_test.sh). The way back to an even split
// only has to be no worse than the best plan on the uneven one by that noise
// (MakeBlockState says why), and a straggler's first reshard in place of offloads only
// cheaper (OwningInsteadOfOffloading).
//
// The hysteresis here is the job's, not the dwell's (group_planner.h), which is raised
// for a while after each change and for minutes while a group flaps: a reshard is priced
// only for a rank that has straggled for reshard_after without a break or was measured a
// slower device in its straggle, the count starts again after each move (StragglerJudge),
// and the persistence (or the kind, which lasts) is the evidence the raised hysteresis
// stands in for, as for experts (expert_plan.cc); a cordon's drain is an operator's
// order, not an estimate. Held by the flap hold's 30%,
// the 2x quota straggler of the e2e benchmark was never resharded in 1,000 steps (no
// split could gain more than 15% by its timers), while its offloads flapped on and a
// static reshard ran its step 1.2x faster (docs/benchmarks.md, 2026-11-29 (b)).
absl::StatusOr<Evaluated> EvaluateReshard(const BlockState& block,
                                          const PlanCandidate* recommended) {
  const bool uneven_calm = block.uneven_calm;
  const ReshardBar bar = ReshardBarFor(block, recommended->cost.offloaded_units > 0);
  const double margin = bar.margin;
  const absl::string_view why_margin = bar.why;
  const double needed = bar.factor * recommended->cost.objective;
  // When even a perfect balance (PerfectBalance) misses `needed`, the search on the
  // water-filled split is skipped (on the random planner benchmark, 40% of the reshards
  // priced, before PriceReshardFirst).
  bool cut_off = false;
  PlanCandidate reshard;
  if (block.reshard_first) {
    // Taken, not copied (its unit moves are a few KB): this is its one reader, once per
    // decision, and what is left is infeasible with nothing in it.
    reshard = std::exchange(block.reshard, PlanCandidate{});
    cut_off = block.reshard_cut_off;
  } else if (const double perfect = PerfectBalance(block);
             !uneven_calm && perfect >= needed * (1 + kRelTol)) {
    reshard.kind = CandidateKind::kReshard;
    reshard.plan.block = block.input->block;
    reshard.note =
        absl::StrCat("not priced: no split can beat ", Num(needed), " (by ", Num(margin),
                     why_margin, "); perfect balance with no transfers gives ", Num(perfect));
  } else {
    // A split already uneven (some rank more than the threshold above or below an even
    // share) comes from a past reshard: the estimates now were measured under the load
    // that move set, and under a CPU quota or a co-tenant a rank's speed moves with its
    // load (fewer units, more idle time, less throttled), so the water-filled counts
    // overshoot. Going halfway settles where going all the way swung: 111/69 -> 123/57
    // -> 111/69 on the shaped link (tests/integration/learned_link_test.sh). The half
    // move must beat the margin itself, so a refinement needs about twice the gap a
    // first reshard does. Not for a cordon's drain, nor for the way back to even.
    const bool halfway = !block.near_share && !block.any_cordoned && !uneven_calm;
    reshard = PriceReshard(block, uneven_calm, halfway, needed, &cut_off);
  }
  // Where the current ownership's search was cut off (PriceReshardFirst), no plan there
  // comes within the bar of the reshard, whatever the recommendation it saw.
  const bool wins = reshard.feasible && (block.current_cut_off || reshard.cost.objective < needed);
  if (reshard.feasible && !wins) {
    // What it aimed at (a refinement's halfway counts) stays in front.
    const std::string aim = reshard.note.empty() ? "" : absl::StrCat(reshard.note, "; ");
    reshard.note =
        aim +
        (uneven_calm
             ? absl::StrCat("not chosen: must be below ", Num(needed), " (the best plan on ",
                            "the uneven split x ", Num(1 + block.noise), ": estimate noise)")
             : absl::StrCat("not chosen: must beat ", Num(needed), " (by ", Num(margin), why_margin,
                            ")", cut_off ? ", which no plan on it does (the best seen)" : ""));
  }
  return Evaluated{std::move(reshard), wins ? Verdict::kRecommended : Verdict::kListed};
}

// ---------------------------------------------------------------------------------------
// The plan in force.

// Priced only when the block balances, and not against a way back to the even split: that
// needs no hysteresis against the plan in force, which only balances a split that no
// longer has a reason.
bool CurrentApplies(const BlockState& block, const PlanCandidate* recommended) {
  return block.current != nullptr && recommended != nullptr && block.balances &&
         !(block.uneven_calm && recommended->kind == CandidateKind::kReshard);
}

// The first offload of `plan` onto a rank that takes no offloads (TakesOffloads), or none.
const Offload* OffloadOntoRankTakingNone(const PlannerInput& input, const BlockPlan& plan) {
  for (const Offload& o : plan.offloads) {
    const size_t helper = static_cast<size_t>(o.helper.value());
    if (helper < input.ranks.size() && !TakesOffloads(input, helper)) return &o;
  }
  return nullptr;
}

// The plan in force, priced under the new inputs (infeasible, with the reason, when it no
// longer fits them: a budget, a cordon). Kept unless the recommendation beats it by the
// hysteresis: flapping between near-equal plans costs transfers and re-layouts for
// nothing.
absl::StatusOr<Evaluated> EvaluateCurrent(const BlockState& block,
                                          const PlanCandidate* recommended) {
  const PlannerInput& input = *block.input;
  Evaluated out;
  PlanCandidate& cur = out.candidate;
  cur.kind = CandidateKind::kCurrent;
  cur.plan = *block.current;
  cur.plan.block = input.block;
  // A reshard already applied is just the ownership now: do not re-send it.
  if (cur.plan.owner_of_unit == input.owner_of_unit) cur.plan.owner_of_unit.clear();
  absl::StatusOr<PlanCost> cost = PricePlan(input, *block.policy, cur.plan);
  if (!cost.ok()) {
    cur.note = std::string(cost.status().message());
  } else if (block.offloads_refused && !cur.plan.offloads.empty()) {
    cur.note = "it offloads, and offloads are refused";
  } else if (const Offload* onto = OffloadOntoRankTakingNone(input, cur.plan)) {
    cur.note =
        absl::StrCat("it offloads onto rank ", onto->helper.value(), ", which takes no offloads");
  } else {
    cur.feasible = true;
    cur.cost = *std::move(cost);
  }
  // A reshard recommended has beaten the best plan on this ownership by its own margin
  // (EvaluateReshard): the plan in force holds it off by the job's hysteresis only.
  double hysteresis = recommended->kind == CandidateKind::kReshard ? block.reshard_hysteresis
                                                                   : block.policy->hysteresis;
  // Nor does a plan in force that offloads hold off a straggler's first reshard.
  if (recommended->kind == CandidateKind::kReshard && cur.feasible &&
      OwningInsteadOfOffloading(block, cur.cost.offloaded_units > 0)) {
    hysteresis = 0;
  }
  // On a split a reshard left uneven (a straggler's, not a calm group's way home, nor a
  // cordon's drain), a new plan of the techniques must also beat the plan in force by the
  // noise, as the reshard had to: the estimates now were measured under the load the
  // move set, and under a quota a rank's speed moves with its load. Measured: auto offloaded
  // on top of a 2x quota straggler's reshard, by the model a gain beyond the hysteresis,
  // and each time the step ran 10-20% slower (123 -> 136 -> 148 ms; under a 3x device
  // 114 -> 125 ms), where the reshard alone was within 7% of the best static plan
  // (docs/benchmarks.md, 2026-11-29 (d)).
  if (recommended->kind != CandidateKind::kReshard && !block.near_share && !block.any_cordoned &&
      !block.uneven_calm) {
    hysteresis = std::max(hysteresis, block.noise);
  }
  const bool kept = cur.feasible && !BeatsByHysteresis(recommended->cost, cur.cost, hysteresis);
  out.verdict = kept ? Verdict::kPushed : Verdict::kListed;
  return out;
}

constexpr CandidateEntry kCandidateList[] = {
    {CandidateKind::kAllLocal, &Always, &EvaluateAllLocal},
    {CandidateKind::kResize, &TechniqueApplies<CandidateKind::kResize>,
     &EvaluateTechnique<CandidateKind::kResize>},
    {CandidateKind::kMigrate, &TechniqueApplies<CandidateKind::kMigrate>,
     &EvaluateTechnique<CandidateKind::kMigrate>},
    {CandidateKind::kAuto, &TechniqueApplies<CandidateKind::kAuto>,
     &EvaluateTechnique<CandidateKind::kAuto>},
    {CandidateKind::kReshard, &ReshardApplies, &EvaluateReshard},
    {CandidateKind::kCurrent, &CurrentApplies, &EvaluateCurrent},
};

}  // namespace

CandidateKind ModeTechnique(BalanceMode mode) {
  return mode == BalanceMode::kResize    ? CandidateKind::kResize
         : mode == BalanceMode::kMigrate ? CandidateKind::kMigrate
                                         : CandidateKind::kAuto;
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

BlockState MakeBlockState(const PlannerInput& input, const JobPolicy& policy,
                          const BlockPlan* current, double reshard_hysteresis,
                          TransferSolver* solver, TransferSolver* reshard_solver) {
  BlockState block;
  block.input = &input;
  block.policy = &policy;
  block.current = current;
  block.reshard_hysteresis = reshard_hysteresis;
  block.reshard_solver = reshard_solver;
  block.mode = PlanningMode(policy.mode);
  block.offloads_refused = OffloadsRefused(input) && TransfersAllowed(block.mode);
  block.techniques = block.offloads_refused ? BalanceMode::kResize : block.mode;
  block.owned = OwnedCounts(input);
  block.problem = MakeProblem(input, block.owned, policy, block.mode);
  const Problem& problem = block.problem;
  for (int32_t r = 0; r < problem.num_ranks; ++r) {
    const PlannerRank& rank = input.ranks[r];
    if (!rank.cordoned) {
      block.inverse_sum += 1 / rank.seconds_per_unit;
      block.fixed_units += rank.fixed_seconds / rank.seconds_per_unit;
    }
    block.most_fixed = std::max(block.most_fixed, rank.fixed_seconds);
    block.any_cordoned = block.any_cordoned || rank.cordoned;
    block.cordoned_owner = block.cordoned_owner || (rank.cordoned && rank.owned_units > 0);
    block.reshard_worth_pricing = block.reshard_worth_pricing || rank.cordoned || rank.chronic;
    block.all_local_step_seconds = std::max(
        block.all_local_step_seconds, Load(problem.fixed_seconds[r], problem.seconds_per_unit[r],
                                           problem.tau, rank.owned_units, 0));
  }
  // Calm ranks compute alike, so all-local is as good as the ownership is even. Units that
  // do not divide evenly leave one more on some ranks: that is still even.
  const int32_t most_owned =
      problem.num_ranks == 0 ? 0 : *std::max_element(problem.owned.begin(), problem.owned.end());
  const double share =
      problem.num_ranks == 0 ? 0 : static_cast<double>(problem.num_units) / problem.num_ranks;
  block.even = most_owned <= std::max(std::ceil(share), (1 + policy.straggler_threshold) * share);
  const int32_t least_owned =
      problem.num_ranks == 0 ? 0 : *std::min_element(problem.owned.begin(), problem.owned.end());
  block.near_share =
      block.even &&
      least_owned >= std::min(std::floor(share), share / (1 + policy.straggler_threshold));
  // After a reshard for a straggler that has since recovered, calm ranks run an uneven
  // split. Offloading evens their compute, but for good: the midrun benchmark with 3 ms
  // quota periods (docs/benchmarks.md) resharded during a 63 s contention and offloaded
  // back for the 210 steps after it, never all-local again. The even split is where a
  // calm group rests, and the estimates cannot tell calm ranks apart, so its reshard
  // only has to be no worse than the best plan on the uneven split by that noise. (Not
  // the hysteresis: the dwell raises it to 0.3 right after a plan change, and that would
  // make going back easier then, not harder.)
  block.uneven_calm = input.calm && input.calm_lasted && !block.any_cordoned &&
                      !block.reshard_worth_pricing && !block.even;
  // A threshold t on speeds is t / (1 + t) on the objective, below 1 for any t.
  block.noise = policy.straggler_threshold / (1 + policy.straggler_threshold);
  block.calm = input.calm && !block.any_cordoned && block.even;
  block.balances = Balances(policy.mode) && !block.calm;
  block.plans = SolveTechniques(problem, block.techniques, solver);
  if (block.techniques == BalanceMode::kAuto) {
    PriceReshardFirst(&block);
    SolveJoint(problem, solver, block.current_cutoff, &block.plans);
    block.current_cut_off = block.current_cutoff < kInf && block.plans.joint_cut_off;
  }
  return block;
}

double WaterLevel(const BlockState& block, double pruned) {
  return std::max(block.most_fixed,
                  (static_cast<double>(block.problem.num_units) - pruned + block.fixed_units) /
                      block.inverse_sum);
}

std::span<const CandidateEntry> CandidateList() { return kCandidateList; }

}  // namespace ballast::coordinator::planner_internal
