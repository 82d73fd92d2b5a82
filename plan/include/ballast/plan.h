// Workload plans: what each rank of a TP group computes for each block, and how a plan is
// checked before it may be applied.
//
// A block is a sum over independent units (MLP neuron tiles, attention heads, experts);
// each rank owns a set of units. A plan gives every unit a fate for the steps it is in
// force:
//
//   local      its owner computes it (the default)
//   pruned     nobody computes it; its contribution is imputed (ZERO-resizing)
//   offloaded  a helper rank computes it this step, exactly, merging the result into the
//              all-reduce that already exists (migration)
//   replicated helpers compute slices of its work, the owner the rest (units whose work
//              divides: a mixture-of-experts expert's tokens; named by id, see Replica)
//   resharded  it gets a new owner, permanently, with its optimizer state
//
// The plan states *how many* of each rank's units are pruned or offloaded, and the new
// owner of every unit when it reshards. *Which* units are pruned is the owner's choice, by
// its priority policy: only the owner knows the scores, and choosing locally keeps each
// rank's kept units contiguous in memory, so every GEMM of the block shrinks at once.
//
//   WorkloadPlan plan;
//   plan.group = GroupId("job/tp0"); plan.version = PlanVersion(3);
//   BlockPlan& mlp = plan.blocks.emplace_back();
//   mlp.block = BlockId(1);
//   mlp.pruned_units = {0, 4};                         // rank 1 drops 4 units
//   mlp.offloads.push_back({RankId(1), RankId(0), 2}); // rank 0 computes 2 of rank 1's
#ifndef BALLAST_PLAN_H_
#define BALLAST_PLAN_H_

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ballast/types.h"

namespace ballast {

// What a pruned unit contributes to the block output.
enum class Imputation {
  kZero,  // nothing (the research prototype's behaviour)
  kMean,  // the unit's running mean activation times its output weights
};

// Which of a rank's units are pruned first.
enum class Priority {
  kChange,      // least L1 weight change over the last window (the prototype's policy)
  kMagnitude,   // smallest L1 weight norm
  kRandom,      // seeded random order, redrawn each window
  kRoundRobin,  // the units pruned longest ago (or never) go first
};

absl::string_view ImputationName(Imputation imputation);
absl::StatusOr<Imputation> ParseImputation(absl::string_view name);
absl::string_view PriorityName(Priority priority);
absl::StatusOr<Priority> ParsePriority(absl::string_view name);

// `units` of `owner`'s units are computed by `helper` while the plan is in force.
struct Offload {
  RankId owner;
  RankId helper;
  int32_t units = 0;
  friend bool operator==(const Offload&, const Offload&) = default;
};

// Part of one unit's work computed by a helper this step, for blocks whose units' work
// divides (BlockShape::units_divide: a mixture-of-experts expert's tokens). The helper
// gets the unit's weights, as an offload's helper does, computes `share` of its work and
// returns the gradients, which the owner adds to its own. A unit's replicas take
// consecutive slices of its work in plan order, after the owner's 1 - (sum of shares).
struct Replica {
  int32_t unit = 0;
  RankId helper;
  double share = 0;  // in (0, 1]; a unit's shares sum to at most 1
  friend bool operator==(const Replica&, const Replica&) = default;
};

struct BlockPlan {
  BlockId block;
  // Per rank (size = group size, or empty for none): how many of its units are pruned.
  std::vector<int32_t> pruned_units;
  std::vector<Offload> offloads;
  // Empty: ownership unchanged. Otherwise the owner of every unit (size = unit count);
  // units whose owner differs from the current one move, with their optimizer state,
  // when the plan is applied. Prune and offload counts refer to this new ownership.
  std::vector<RankId> owner_of_unit;
  // Units split with helpers by id (blocks whose units divide). A rank whose units have
  // replicas neither prunes nor offloads in the same block plan: those take units by
  // count from the owner's priority order, and one unit must not be both.
  std::vector<Replica> replicas;
  // A cap on each unit's work, for blocks whose units divide (a mixture of experts): 0
  // (the default) none; otherwise each Forward of T tokens lets an expert compute at most
  // ExpertCapacity(capacity_factor, T, top_k, experts) of the tokens routed to it, the
  // first in token order, and drops the rest (Megatron's moe_expert_capacity_factor with
  // the "position" drop policy). Finite and >= 0. It trades quality (dropped tokens skip
  // the expert) for a bounded hot expert, so it is off unless a plan asks for it.
  double capacity_factor = 0;
  friend bool operator==(const BlockPlan&, const BlockPlan&) = default;
};

struct WorkloadPlan {
  GroupId group;
  PlanVersion version;
  // The group's plan count (1, 2, 3...) for people: logs and progress lines show "#3",
  // not a version in wall-clock microseconds. Versions order plans; numbers only name them.
  int64_t number = 0;
  Imputation imputation = Imputation::kZero;
  // The job's priority policy, which the workers adopt at their next priority window
  // (ParallelBlock::ApplyPlan); none: each block keeps its own (UnitConfig::priority, the
  // trainer's setting), as under a coordinator that does not send one.
  std::optional<Priority> priority;
  // Blocks not listed run all-local under their current ownership.
  std::vector<BlockPlan> blocks;
  friend bool operator==(const WorkloadPlan&, const WorkloadPlan&) = default;
};

// What a plan is checked against: the group and the current state of each block.
struct BlockShape {
  BlockId block;
  int32_t num_units = 0;
  std::vector<RankId> owner_of_unit;  // current ownership
  // Whether a unit's work divides between ranks (BlockPlan::replicas), as a mixture-of-
  // experts expert's tokens do; a tile of MLP neurons or an attention head does not.
  bool units_divide = false;
};
struct GroupShape {
  GroupId group;
  int32_t size = 0;
  std::vector<BlockShape> blocks;
};

// Checks every field of `plan` against `shape`; the error names the offending field,
// e.g. "plan v7 block 3: offloads[1].helper 9 out of range [0, 4)". Deterministic, so all
// ranks holding the same plan and state reach the same verdict.
absl::Status ValidatePlan(const WorkloadPlan& plan, const GroupShape& shape);

// The block part of ValidatePlan, for one block of a group of `group_size` ranks (the
// planner prices single blocks); the error names the block, e.g. "block 3: offloads[1].helper
// 9 out of range [0, 4)", and ValidatePlan prefixes it with the plan's version.
absl::Status ValidateBlockPlan(const BlockPlan& block, const BlockShape& shape, int32_t group_size);

// The most tokens an expert keeps in a Forward of `tokens` tokens under BlockPlan::
// capacity_factor: max(1, ceil(capacity_factor * tokens * top_k / experts)), at most
// `tokens`; `tokens` (no cap) for a capacity_factor of 0. The one rule: the workers drop
// by it (worker_lib's router) and the coordinator predicts capped loads by it.
int64_t ExpertCapacity(double capacity_factor, int64_t tokens, int32_t top_k, int32_t experts);

// Whether `block` moves units (its owner_of_unit) and `workers_run`, the ownership the
// workers report for the block, is the one it states: the move is made. The coordinator's
// plan in force keeps stating a move the workers have made until the group's next change,
// so the planner reads such a plan as asking nothing more of them and status reads it
// "reshard (made)"; both by this one rule.
bool MoveMade(const BlockPlan& block, const std::vector<RankId>& workers_run);

// A one-line human summary, e.g. "v7: block 1 pruned {0,4} offload 1->0 x2". A block in
// `moves_made`, whose workers run the ownership the plan states, reads "reshard (made)":
// the coordinator's plan in force keeps stating a reshard the workers have made until the
// group's next change, and "reshard" alone would read as a move still to come.
std::string PlanSummary(const WorkloadPlan& plan, const std::set<BlockId>& moves_made = {});

}  // namespace ballast

#endif  // BALLAST_PLAN_H_
