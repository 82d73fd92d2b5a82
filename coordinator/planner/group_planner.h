// The whole decision for one TP group, in one place: every block planned (PlanBlock), a
// recent change guarded by the dwell, the refinements of a group that balances weighed
// together (a change must gain the noise on the group's block time, not on one block's),
// a move restated until the workers confirm it, and whether the result differs from the
// plan in force. The coordinator only gathers the inputs (speeds, chronic stragglers, the
// link, cordons, what the workers run) and numbers and pushes what this returns. Pure: no
// I/O, no clock (the caller says how long ago the plan last changed), nothing kept
// between calls but the buffers of the PlannerWorkspace the caller passes (the
// coordinator's decision loop keeps one for its serial rounds).
//
//   GroupPlannerInput in;
//   in.group = GroupId("tp0");
//   in.in_force = current_plan;
//   in.since_change = absl::Seconds(1);   // the dwell still holds
//   in.blocks.push_back({.input = block_input});
//   GroupDecision d = DecideGroup(in, policy, DwellOptions{});
//   if (d.change.has_value()) Push(Number(*d.change));
//   std::vector<std::string> why = ExplainGroup(in, d);  // when someone asks
#ifndef BALLAST_COORDINATOR_PLANNER_GROUP_PLANNER_H_
#define BALLAST_COORDINATOR_PLANNER_GROUP_PLANNER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "ballast/plan.h"
#include "coordinator/planner/held_plan.h"
#include "coordinator/planner/planner.h"
#include "coordinator/policy.h"

namespace ballast::coordinator {

// For plan_dwell after a group's plan changes, a block's plan changes only for an
// improvement of at least dwell_hysteresis (instead of the job's hysteresis). Speed
// estimates of a time-sliced or quota-throttled rank swing by more than the hysteresis
// from one planning round to the next; without the dwell, plans flip between near-equal
// neighbours on most rounds. A new straggler still gets a plan at once: it improves the
// step by far more (after a blip, once it has lasted the flap hold: plan_flaps.h). A
// reshard for a chronic straggler is not held (its persistence, or its kind measured a
// slower device, is the evidence: candidates.cc's EvaluateReshard).
// A group whose changes keep being undone is held longer (plan_flaps.h): flap_hold, the
// first hold after a flap (0: never held longer).
struct DwellOptions {
  absl::Duration plan_dwell = absl::Seconds(2);
  double dwell_hysteresis = 0.3;  // in [0, 1], used when above the job's hysteresis
  absl::Duration flap_hold = absl::Seconds(30);
};

// Whether a plan changed `since_change` ago (none: no change yet) is still held by the
// dwell: within plan_dwell, and the dwell's hysteresis above the job's (DecideGroup then
// plans with it).
bool DwellHolds(const JobPolicy& policy, const DwellOptions& dwell,
                std::optional<absl::Duration> since_change);

struct GroupBlockInput {
  // Its ownership is the one the group plans on: the plan in force's move when it has
  // one, else what the workers run.
  PlannerInput input;
  // The plan in force moves this block's units and no worker has reported the move yet:
  // every plan restates it. Ranks agree on the newest plan they all hold, so two plans
  // pushed within one step skip the first, and a reshard followed by its all-local plan
  // was lost (the workers kept the old ownership while the coordinator planned on the new
  // one). Restated, it is a no-op for ranks that already moved. Once a worker reports it
  // (ranks apply plans in lockstep), a plan in force that still states it is no change
  // from one that does not (WithoutMadeMove): the statement stays until the group's next
  // change, rather than a plan pushed only to drop it.
  bool move_unconfirmed = false;
  // Its units divide (BlockShape::units_divide, experts): it takes the job's capacity cap
  // (JobPolicy::expert_capacity_factor) in the modes that balance, loads known or not.
  bool units_divide = false;
};

struct GroupPlannerInput {
  GroupId group;
  // Blocks to plan (none in mode off: nothing is measured, and all-local is the plan).
  std::vector<GroupBlockInput> blocks;
  // The plan in force (version 0: none pushed yet). A block it leaves out runs all-local.
  WorkloadPlan in_force;
  // The workers run a plan newer than in_force (an earlier coordinator pushed it and this
  // one restarted): whatever is decided, even all-local, must replace it, or a group
  // relieved of its straggler would keep offloading for good.
  bool unknown_plan_in_force = false;
  // Since the plan in force was pushed (none: no change yet, so no dwell).
  std::optional<absl::Duration> since_change;
  // The plan in force was measured slower than the plan before it (a failed probe of
  // the step feedback, step_feedback.h; the offload check's probe once offloads measured
  // faster, offload_check.h), or offloads what the blocks' offloads_refused forbids: it
  // is not kept by hysteresis or dwell; the
  // blocks are planned as if none were in force, and the best plan goes out (blocks of
  // experts excepted: their plan in force also sets the band their loads are judged in).
  bool in_force_measured_worse = false;
  // This round's change is chosen on purpose, not by noise: the step feedback's probe, or
  // its way back, moved the straggler's factor, the offload check refused offloads or
  // allowed them again, or an operator changed a setting
  // (DecisionLoop::ReplanNow). The refinements of a group that balances are then not
  // weighed against the noise (group_planner.cc's HoldSmallRefinements): a probe the
  // gate swallowed would only grow until it moved the plan in one jump.
  bool deliberate = false;
};

struct GroupDecision {
  // Per block planned (a block whose planning failed is missing: see `failed`).
  std::map<int32_t, BlockDecision> blocks;
  // Per block whose planning failed, why (the input was refused: a NaN speed, ...).
  std::map<int32_t, std::string> failed;
  // The policy the blocks were planned with: the job's, with the dwell's hysteresis
  // while the dwell holds. What ExplainDecision needs to explain them.
  JobPolicy planned_with;
  // The plan to push when it differs from the one in force: group, imputation, priority
  // and blocks set, version and number left to the caller. Never set in mode observe.
  std::optional<WorkloadPlan> change;
  // `change` moves units of some block to an ownership other than the one planned on.
  bool moves_units = false;
  // Where it does: the ranks it leaves owning fewer units of some block, ascending (the
  // straggler judge spaces their next reshard: StragglerJudge::UnitsMoved).
  std::vector<int32_t> relieved;
  // Remarks on the whole group (the dwell), before the blocks' explanations.
  std::vector<std::string> notes;
};

GroupDecision DecideGroup(const GroupPlannerInput& input, const JobPolicy& policy,
                          const DwellOptions& dwell, PlannerWorkspace* workspace);
// The same with a workspace of its own for the call (tests, one-off decisions).
GroupDecision DecideGroup(const GroupPlannerInput& input, const JobPolicy& policy,
                          const DwellOptions& dwell);

// The decision for a group an operator holds (held_plan.h): every block of `shapes` (with
// the ownership the workers run) at the hold's plan, whatever the speeds, pushed when it
// differs from input.in_force as DecideGroup's are; `cordoned` is per rank. A block the
// hold cannot be applied to is in `failed`, and then nothing changes. Plans no block
// (`blocks` is empty): its note says why.
GroupDecision DecideHeldGroup(const GroupPlannerInput& input, const std::vector<BlockShape>& shapes,
                              const std::vector<bool>& cordoned, const GroupHold& hold,
                              const JobPolicy& policy);

// `block` without its move where it states `workers_run`, the ownership the workers
// report (plan.h, MoveMade): a move the workers have made is their ownership now, and the
// plan in force keeps stating it until the group's next change
// (GroupBlockInput::move_unconfirmed). Two plans equal after this ask the same of the
// workers.
BlockPlan WithoutMadeMove(BlockPlan block, const std::vector<RankId>& workers_run);

// Whether `block` asks nothing of workers that run `workers_run`: no prunes, offloads,
// replicas or capacity cap, and no move but one they have made.
bool RunsAllLocal(const BlockPlan& block, const std::vector<RankId>& workers_run);

// Why, for `ballastctl explain`: the notes, then each block's explanation or failure, in
// the input's order. `input` must be the one `decision` was made from (its blocks; the
// plan in force is not read). Rendered only when asked: most decisions are never read.
std::vector<std::string> ExplainGroup(const GroupPlannerInput& input,
                                      const GroupDecision& decision);
// The same, with the blocks' decisions held elsewhere (the coordinator moves them out of
// `decision` into its own map): `blocks` must hold, for every block of `input` that did
// not fail, the decision made for it with `decision`.
std::vector<std::string> ExplainGroup(const GroupPlannerInput& input, const GroupDecision& decision,
                                      const std::map<int32_t, BlockDecision>& blocks);

}  // namespace ballast::coordinator

#endif  // BALLAST_COORDINATOR_PLANNER_GROUP_PLANNER_H_
