// Figures derived from what the registry knows of a group, that both the decision loop
// (its explanation lines) and the admin reads (status) show: the step a plan should take,
// and the link speed offloads are priced at. One writer each, so status and explanations
// can never disagree on them.
//
//   const StepPrediction p = PredictStep(decisions, pricing, snapshot.ranks);
//   status.set_predicted_step_seconds(p.Step());
#ifndef BALLAST_COORDINATOR_GROUP_FIGURES_H_
#define BALLAST_COORDINATOR_GROUP_FIGURES_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "coordinator/group_registry.h"
#include "coordinator/link_model.h"
#include "coordinator/planner/group_planner.h"
#include "coordinator/planner/planner.h"

namespace ballast::coordinator {

// What the step prediction adds to the planner's blocks, as the round that planned them
// priced it.
struct StepPricing {
  // The collectives' own cost a step that the round left out of the planner's fixed costs;
  // unset when it gave none (mode off, --fixed_costs=off, auto for a straggler not judged
  // slow in its collectives, nothing measured).
  std::optional<double> common_fixed_seconds;
  // A rank throttled whole priced by its floor, and its arrival spread
  // (StragglerKind::ArrivalSpread; set by DecisionLoop::PriceThrottled); -1 and 0: none.
  int32_t throttled_rank = -1;
  double arrival_spread = 0;
};

// The step the plan in force should take, as blocks (the planner's per-block predictions,
// summed: compute, and each rank's fixed cost beyond the least), collectives (what they
// cost once nobody waits for a peer: the least fixed cost the round estimated, else the
// smallest median collective time over the attached ranks) and the spread's wait (the
// wait beyond the slower side's mean that the throttled rank's arrival spread costs,
// arrival_spread.h, at the lead its load has over the others' under the plan: the sums of
// the blocks' rank loads). Zeros while nothing was planned.
struct StepPrediction {
  double blocks = 0;
  double collectives = 0;
  double spread_wait = 0;
  double Step() const { return blocks + collectives + spread_wait; }
};
StepPrediction PredictStep(const std::map<int32_t, BlockDecision>& decisions,
                           const StepPricing& pricing, const std::vector<RankSnapshot>& ranks);

// The bytes per second an offload is priced at: the group's slowest learned link
// (`learned`, LinkModel::Slowest), else the `prior` (--link_bytes_per_second).
// `explanation` (when not null) says which, for the explanation's "link:" line.
double LinkBytesPerSecond(const std::optional<LinkModel::Estimate>& learned,
                          absl::Duration stale_after, double prior, std::string* explanation);

// The ownership a block is planned on: the plan in force's, where it moves the block's
// units (restated until the workers confirm it, and stated until the group's next change
// after: group_planner.h, WithoutMadeMove), else what the workers run.
const std::vector<RankId>& PlannedOwnership(const WorkloadPlan& in_force,
                                            const BlockSnapshot& block);

// The group's step under plan `version`, as the measured-step loops judge plans by it
// (step_feedback.h, offload_check.h): once every attached rank runs it and has run at
// least `min_steps` steps under it, the slowest rank's median over them (the registry's
// last 16); 0 until then.
double MeasuredStep(const std::vector<RankSnapshot>& ranks, int64_t version, int64_t min_steps);

// The collectives' floor under plan `version` (straggler_kind.h), on the same terms: the
// least median collective seconds a step over the attached ranks (the rank that arrives
// last waits for nobody, so this is what the collectives cost); 0 until every attached
// rank ran `min_steps` steps under it.
double MeasuredCollectives(const std::vector<RankSnapshot>& ranks, int64_t version,
                           int64_t min_steps);

// Each rank's median collective seconds a step under plan `version`, on the same terms,
// indexed by rank in [0, size) (0 for a rank not attached); empty until every attached
// rank ran `min_steps` steps under it.
std::vector<double> MeasuredRankCollectives(const std::vector<RankSnapshot>& ranks, int64_t version,
                                            int64_t min_steps, int32_t size);

// Whether the group's newest plan asks nothing of its workers beyond the ownership they
// run (group_planner.h, RunsAllLocal): all-local, even where it still states a reshard
// they have made.
bool PlanRunsAllLocal(const GroupSnapshot& group);

// The blocks whose ownership the group's newest plan states and its workers run
// (BlockSnapshot::move_made: known without the snapshot's ownership), for PlanSummary:
// status reads them "reshard (made)".
std::set<BlockId> MovesMade(const GroupSnapshot& group);

// Each rank's units computed under the group's newest plan (straggler_kind.h): owned on
// the plan's ownership (PlannedOwnership), less pruned, less offloaded to a helper, and
// the helper's plus; blocks whose units divide (experts' replicas) are left out. Indexed
// by rank; empty where the snapshot carries no ownership.
std::vector<int32_t> UnitsComputed(const GroupSnapshot& group);
// The same with `computed` false: each rank's units owned on the plan's ownership alone
// (what a reshard moves; offloads and prunes leave it).
std::vector<int32_t> UnitsComputed(const GroupSnapshot& group, bool computed);

}  // namespace ballast::coordinator

#endif  // BALLAST_COORDINATOR_GROUP_FIGURES_H_
