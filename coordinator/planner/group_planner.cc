#include "coordinator/planner/group_planner.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/planner/explain.h"

namespace ballast::coordinator {
namespace {

// The job's capacity cap for a block: experts (units that divide) take it in the modes
// that balance; held or planned alike, so a hold does not change what the model drops.
double CapacityFor(const JobPolicy& policy, bool units_divide) {
  return units_divide && Balances(policy.mode) ? policy.expert_capacity_factor : 0.0;
}

bool Trivial(const BlockPlan& plan) {
  return plan.offloads.empty() && plan.owner_of_unit.empty() && plan.replicas.empty() &&
         plan.capacity_factor == 0 &&
         std::all_of(plan.pruned_units.begin(), plan.pruned_units.end(),
                     [](int32_t n) { return n == 0; });
}

// The plan in force's blocks as they ask the workers to run: a move of a planned block
// that the workers have reported made is dropped (WithoutMadeMove), then blocks left
// asking nothing.
// A reshard's plan in force states the move until the next change: the plan pushed to
// drop it changed nothing the workers run, yet each reshard cost a second plan change
// (the plan version the interleaved benchmark counts; 27 of 66 changes in its quota
// onsets, 2 of 4 in its steady straggler's: docs/benchmarks.md, 2026-12-06 (i)).
std::vector<BlockPlan> InForceAsRun(const GroupPlannerInput& input) {
  std::vector<BlockPlan> out;
  for (const BlockPlan& bp : input.in_force.blocks) {
    const auto planned =
        std::find_if(input.blocks.begin(), input.blocks.end(),
                     [&bp](const GroupBlockInput& b) { return b.input.block == bp.block; });
    // Confirmed, the ownership planned on is the workers' (GroupBlockInput::input).
    if (planned == input.blocks.end() || planned->move_unconfirmed) {
      out.push_back(bp);
      continue;
    }
    BlockPlan run = WithoutMadeMove(bp, planned->input.owner_of_unit);
    if (!Trivial(run)) out.push_back(std::move(run));
  }
  return out;
}

// Whether `desired` differs from the plan in force. Content, not versions: an unchanged
// plan is not re-pushed.
bool IsChange(const GroupPlannerInput& input, const WorkloadPlan& desired) {
  if (input.unknown_plan_in_force) return true;
  const WorkloadPlan& in_force = input.in_force;
  // Imputation and priority matter only to units a plan prunes or offloads (the priority
  // orders storage, and both cut their ranges from its end): an all-local plan is
  // unchanged whatever they say, and the next plan that balances carries the job's.
  if (InForceAsRun(input) == desired.blocks &&
      (desired.blocks.empty() ||
       (in_force.imputation == desired.imputation && in_force.priority == desired.priority))) {
    return false;
  }
  // Nothing pushed yet and all-local wanted: the workers already run all-local.
  return !(in_force.version.value() == 0 && desired.blocks.empty());
}

// The plan in force as PlanBlock priced it under this round's inputs, when it still fits
// them; nullptr when it was not priced (a calm group, a probe undone) or does not fit.
const PlanCandidate* InForce(const BlockDecision& d) {
  for (const PlanCandidate& c : d.candidates) {
    if (c.kind == CandidateKind::kCurrent) return c.feasible ? &c : nullptr;
  }
  return nullptr;
}

// The group balances already: a block's plan in force prunes or offloads, or a past
// reshard left some block's split uneven (the counts of ranks not cordoned more than one
// apart). Experts' replicas and moves are their own (expert_plan.h), and a cordon's drain
// an operator's: neither makes a dense straggler's first plan a refinement.
bool GroupBalances(const GroupPlannerInput& input) {
  for (const BlockPlan& bp : input.in_force.blocks) {
    if (!bp.offloads.empty() || std::any_of(bp.pruned_units.begin(), bp.pruned_units.end(),
                                            [](int32_t n) { return n > 0; })) {
      return true;
    }
  }
  for (const GroupBlockInput& block : input.blocks) {
    if (block.units_divide) continue;
    int32_t most = 0, least = std::numeric_limits<int32_t>::max();
    for (const PlannerRank& rank : block.input.ranks) {
      if (rank.cordoned) continue;
      most = std::max(most, rank.owned_units);
      least = std::min(least, rank.owned_units);
    }
    if (most >= least && most - least > 1) return true;
  }
  return false;
}

// A group that balances already changes its plan by the techniques (not a reshard, not
// the way home to all-local or the even split) only when the changed blocks together
// gain, by the model, the straggler threshold's noise t / (1 + t) of the group's block
// time, or the hysteresis when that is higher; otherwise every such block keeps its plan
// in force. The hysteresis each block applies is a share of that block's time, and
// blocks differ: an attention block of 8 heads moves an eighth of its work per unit, so
// one unit more or less offloaded passed the 5% on noise alone, and each such change
// cost the whole group a plan change for a tenth of a percent of its step. And the plans
// of a steady straggler under a quota drifted between neighbours (offloading 3 <-> 4 of
// 15 MLP units, 1 <-> 0 of 4 heads) every 30-60 s, 5-10 plan changes per 1,000 steps
// (docs/benchmarks.md, 2026-12-01), on estimates that move that much with the load.
// A group that starts to balance (all-local on the even split) is not held here (its
// first plan gains a third for a 2x straggler; a marginal one is the marginal-straggler
// rule's, and blips the flap damping's: plan_flaps.h), nor a block whose plan in force
// no longer fits (a budget, a cordon), nor one a failed probe unholds, nor a change made
// on purpose (GroupPlannerInput::deliberate).
void HoldSmallRefinements(const GroupPlannerInput& input, const JobPolicy& planning,
                          const std::vector<const GroupBlockInput*>& planned, GroupDecision& out) {
  if (input.deliberate || !Balances(planning.mode) || !GroupBalances(input)) return;
  double gain = 0, block_time = 0;
  std::vector<int32_t> refined;
  for (const GroupBlockInput* block : planned) {
    const int32_t id = block->input.block.value();
    const BlockDecision& d = out.blocks[id];
    const PlanCandidate* in_force = InForce(d);
    block_time += in_force != nullptr ? in_force->cost.objective : d.objective;
    // Experts are balanced step by step on their loads (expert_plan.h), not refined; a
    // block a failed probe unholds priced no plan in force to refine.
    if (block->units_divide || in_force == nullptr || d.chosen == CandidateKind::kCurrent ||
        d.chosen == CandidateKind::kReshard || d.calm || d.evens_split) {
      continue;
    }
    gain += in_force->cost.objective - d.objective;
    refined.push_back(id);
  }
  const double t = planning.straggler_threshold;
  const double share = std::max(planning.hysteresis, t / (1 + t));
  const double needed = share * block_time;
  if (refined.empty() || gain >= needed) return;
  for (int32_t id : refined) {
    BlockDecision& d = out.blocks[id];
    const PlanCandidate& in_force = *InForce(d);
    d.plan = in_force.plan;
    d.predicted_step_seconds = in_force.cost.step_seconds;
    d.rank_seconds = in_force.cost.rank_seconds;
    d.objective = in_force.cost.objective;
    d.chosen = CandidateKind::kCurrent;
    d.kept_current = true;
    d.kept_for_group = true;
  }
  out.notes.push_back(absl::StrCat(
      "kept the plan in force in block", refined.size() > 1 ? "s " : " ",
      absl::StrJoin(refined, ", "),
      refined.size() > 1 ? ": their best new plans gain " : ": its best new plan gains ",
      planner_internal::Num(gain),
      refined.size() > 1 ? " s together, under the " : " s, under the ",
      planner_internal::Num(needed), " s a change of a group that balances must gain (",
      planner_internal::Num(share), " of its blocks' ", planner_internal::Num(block_time),
      " s: the straggler threshold's noise, or the hysteresis)"));
}

// Adds to `relieved` every rank that owns fewer units under `after` than under `before`.
void AddRelieved(const std::vector<RankId>& before, const std::vector<RankId>& after,
                 std::set<int32_t>& relieved) {
  std::map<int32_t, int64_t> change;  // units gained, by rank
  for (RankId r : before) --change[r.value()];
  for (RankId r : after) ++change[r.value()];
  for (const auto& [rank, gained] : change) {
    if (gained < 0) relieved.insert(rank);
  }
}

}  // namespace

BlockPlan WithoutMadeMove(BlockPlan block, const std::vector<RankId>& workers_run) {
  if (MoveMade(block, workers_run)) block.owner_of_unit.clear();
  return block;
}

bool RunsAllLocal(const BlockPlan& block, const std::vector<RankId>& workers_run) {
  return Trivial(WithoutMadeMove(block, workers_run));
}

GroupDecision DecideGroup(const GroupPlannerInput& input, const JobPolicy& policy,
                          const DwellOptions& dwell) {
  PlannerWorkspace workspace;
  return DecideGroup(input, policy, dwell, &workspace);
}

bool DwellHolds(const JobPolicy& policy, const DwellOptions& dwell,
                std::optional<absl::Duration> since_change) {
  return since_change.has_value() && *since_change < dwell.plan_dwell &&
         dwell.dwell_hysteresis > policy.hysteresis;
}

GroupDecision DecideGroup(const GroupPlannerInput& input, const JobPolicy& policy,
                          const DwellOptions& dwell, PlannerWorkspace* workspace) {
  GroupDecision out;
  JobPolicy planning = policy;
  if (policy.mode != BalanceMode::kOff && DwellHolds(policy, dwell, input.since_change)) {
    planning.hysteresis = dwell.dwell_hysteresis;
    out.notes.push_back(absl::StrCat("plan changed ", absl::FormatDuration(*input.since_change),
                                     " ago: hysteresis ", dwell.dwell_hysteresis, " until the ",
                                     absl::FormatDuration(dwell.plan_dwell), " dwell ends"));
  }
  if (input.in_force_measured_worse) {
    out.notes.push_back(
        "the plan in force ran slower than the plan before it (the step feedback's failed "
        "probe, or the offload check's probe once offloads measured faster) or offloads what "
        "the offload check refuses: the best plan replaces it, with no hysteresis");
  }
  out.planned_with = planning;
  WorkloadPlan desired;
  desired.group = input.group;
  desired.imputation = policy.imputation;
  desired.priority = policy.priority;
  // Each block planned on its own; the plans to push are gathered after the group's
  // refinements are weighed together (HoldSmallRefinements).
  std::vector<const GroupBlockInput*> planned;
  for (const GroupBlockInput& block : input.blocks) {
    const int32_t id = block.input.block.value();
    // A block the plan in force leaves out runs all-local: that is the current plan to
    // beat by the hysteresis, so noise never flips a group in and out of balancing.
    BlockPlan current;
    current.block = block.input.block;
    for (const BlockPlan& bp : input.in_force.blocks) {
      if (bp.block == block.input.block) current = bp;
    }
    current.owner_of_unit.clear();  // the input's ownership already has the move
    current.capacity_factor = 0;    // the policy's, set below, whatever the planner chose
    // A block of experts keeps its plan in force even then: its replicas are the step
    // feedback's concern only through the straggler's speed, and the plan in force also
    // sets the band its loads are judged balanced in (expert_plan.h).
    const bool unheld = input.in_force_measured_worse && !block.units_divide;
    absl::StatusOr<BlockDecision> decision =
        PlanBlock(block.input, planning, unheld ? nullptr : &current, policy.hysteresis, workspace);
    if (!decision.ok()) {
      out.failed[id] = std::string(decision.status().message());
      continue;
    }
    planned.push_back(&block);
    out.blocks[id] = *std::move(decision);
  }
  HoldSmallRefinements(input, planning, planned, out);
  std::set<int32_t> relieved;
  for (const GroupBlockInput* block : planned) {
    BlockPlan bp = out.blocks[block->input.block.value()].plan;
    bp.block = block->input.block;
    if (!bp.owner_of_unit.empty() && bp.owner_of_unit != block->input.owner_of_unit) {
      out.moves_units = true;
      AddRelieved(block->input.owner_of_unit, bp.owner_of_unit, relieved);
    }
    if (bp.owner_of_unit.empty() && block->move_unconfirmed) {
      bp.owner_of_unit = block->input.owner_of_unit;
    }
    // The job's choice of speed over exactness, not the planner's.
    bp.capacity_factor = CapacityFor(policy, block->units_divide);
    if (!Trivial(bp)) desired.blocks.push_back(std::move(bp));
  }
  // Observe pushes no balancing plan, so what it wants is all-local; it pushes that only
  // to end a plan a balancing mode left in force, which would otherwise run on unattended
  // (and unlike what observe predicts). Off does the same without planning.
  if (!IsChange(input, desired)) {
    out.moves_units = false;
    return out;
  }
  out.relieved.assign(relieved.begin(), relieved.end());
  out.change = std::move(desired);
  return out;
}

GroupDecision DecideHeldGroup(const GroupPlannerInput& input, const std::vector<BlockShape>& shapes,
                              const std::vector<bool>& cordoned, const GroupHold& hold,
                              const JobPolicy& policy) {
  GroupDecision out;
  out.planned_with = policy;
  out.notes.push_back(absl::StrCat("held by an operator (ballastctl hold) at ", DescribeHold(hold),
                                   " of the even split: the planner is not consulted until "
                                   "the group is released"));
  WorkloadPlan desired;
  desired.group = input.group;
  desired.imputation = policy.imputation;
  desired.priority = policy.priority;
  for (const BlockShape& shape : shapes) {
    const BlockPlan* in_force = nullptr;
    for (const BlockPlan& bp : input.in_force.blocks) {
      if (bp.block == shape.block) in_force = &bp;
    }
    absl::StatusOr<BlockPlan> held = HeldBlockPlan(hold, shape, cordoned, in_force);
    if (!held.ok()) {
      out.failed[shape.block.value()] = std::string(held.status().message());
      // Rendered from the notes: a held group plans no block for ExplainGroup to walk.
      out.notes.push_back(absl::StrCat("block ", shape.block.value(), ": ", held.status().message(),
                                       "; the plan in force stays"));
      continue;
    }
    held->capacity_factor = CapacityFor(policy, shape.units_divide);
    if (!held->owner_of_unit.empty() && held->owner_of_unit != shape.owner_of_unit) {
      out.moves_units = true;
    }
    if (!Trivial(*held)) desired.blocks.push_back(*std::move(held));
  }
  // Half a hold is no hold: the plan in force stays until every block can take it.
  if (!out.failed.empty() || !IsChange(input, desired)) {
    out.moves_units = false;
    return out;
  }
  out.change = std::move(desired);
  return out;
}

std::vector<std::string> ExplainGroup(const GroupPlannerInput& input,
                                      const GroupDecision& decision) {
  return ExplainGroup(input, decision, decision.blocks);
}

std::vector<std::string> ExplainGroup(const GroupPlannerInput& input, const GroupDecision& decision,
                                      const std::map<int32_t, BlockDecision>& blocks) {
  std::vector<std::string> lines = decision.notes;
  for (const GroupBlockInput& block : input.blocks) {
    const int32_t id = block.input.block.value();
    if (auto failed = decision.failed.find(id); failed != decision.failed.end()) {
      lines.push_back(absl::StrCat("block ", id, ": ", failed->second));
    } else if (auto planned = blocks.find(id); planned != blocks.end()) {
      lines.push_back(
          absl::StrCat("block ", id, ":\n",
                       ExplainDecision(block.input, decision.planned_with, planned->second)));
    }
  }
  return lines;
}

}  // namespace ballast::coordinator
