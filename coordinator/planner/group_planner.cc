#include "coordinator/planner/group_planner.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

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

// Whether `desired` differs from the plan in force. Content, not versions: an unchanged
// plan is not re-pushed.
bool IsChange(const GroupPlannerInput& input, const WorkloadPlan& desired) {
  if (input.unknown_plan_in_force) return true;
  const WorkloadPlan& in_force = input.in_force;
  // Imputation and priority matter only to units a plan prunes or offloads (the priority
  // orders storage, and both cut their ranges from its end): an all-local plan is
  // unchanged whatever they say, and the next plan that balances carries the job's.
  if (in_force.blocks == desired.blocks &&
      (desired.blocks.empty() ||
       (in_force.imputation == desired.imputation && in_force.priority == desired.priority))) {
    return false;
  }
  // Nothing pushed yet and all-local wanted: the workers already run all-local.
  return !(in_force.version.value() == 0 && desired.blocks.empty());
}

}  // namespace

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
        "probe): the best plan replaces it, with no hysteresis");
  }
  out.planned_with = planning;
  WorkloadPlan desired;
  desired.group = input.group;
  desired.imputation = policy.imputation;
  desired.priority = policy.priority;
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
    BlockPlan bp = decision->plan;
    bp.block = block.input.block;
    if (!bp.owner_of_unit.empty() && bp.owner_of_unit != block.input.owner_of_unit) {
      out.moves_units = true;
    }
    if (bp.owner_of_unit.empty() && block.move_unconfirmed) {
      bp.owner_of_unit = block.input.owner_of_unit;
    }
    // The job's choice of speed over exactness, not the planner's.
    bp.capacity_factor = CapacityFor(policy, block.units_divide);
    if (!Trivial(bp)) desired.blocks.push_back(std::move(bp));
    out.blocks[id] = *std::move(decision);
  }
  // Observe pushes no balancing plan, so what it wants is all-local; it pushes that only
  // to end a plan a balancing mode left in force, which would otherwise run on unattended
  // (and unlike what observe predicts). Off does the same without planning.
  if (!IsChange(input, desired)) {
    out.moves_units = false;
    return out;
  }
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
