// The coordinator's decision loop: each due group's inputs gathered (the speed model's
// estimates pooled per rank, chronic stragglers, the learned link, cordons, the plan in
// force and what the workers run), the decision left to the planner (DecideGroup in
// coordinator/planner/group_planner.h), and a changed plan numbered for pushing. Split
// from coordinator.cc (agents and reports) so that each file stays readable on its own.
#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "ballast/plan.h"
#include "common/logging.h"
#include "coordinator/coordinator.h"
#include "coordinator/fixed_costs.h"
#include "coordinator/planner/group_planner.h"
#include "coordinator/rank_speeds.h"

namespace ballast::coordinator {

int64_t Coordinator::NextVersion(const GroupEntry& group) const {
  const int64_t now_us = absl::ToUnixMicros(clock_->Now());
  return std::max(group.plan.version.value() + 1, now_us);
}

namespace {

// What the planner is given for a rank in a block: the block's reference seconds per unit
// times the rank's slowdown pooled over all blocks (rank_speeds.h), rather than the
// rank's own estimate in this block. A rank's contention is the rank's, not the block's;
// its per-block estimates swing by 10-25% (a quota throttle falls in one block or
// another), and balancing each block on its own swings moved units back and forth, a
// reshard every dwell on a shaped link. Pooled, every block sees the same ratios between
// ranks, and a block's own noise scales all its ranks alike. The rank's own estimate is
// the fallback while it has been judged nowhere.
double PooledSecondsPerUnit(const RankSpeed& rank, const GroupSpeeds& block,
                            const PooledGroup& pooled) {
  const size_t r = static_cast<size_t>(rank.rank.value());
  const double slowdown = r < pooled.ranks.size() ? pooled.ranks[r].slowdown : 0;
  if (!(slowdown > 0) || !(block.reference_seconds_per_unit > 0)) return rank.seconds_per_unit;
  return block.reference_seconds_per_unit * slowdown;
}

}  // namespace

const std::vector<RankId>& Coordinator::PlannedOwnership(const GroupEntry& group,
                                                         int32_t block_id) {
  for (const BlockPlan& bp : group.plan.blocks) {
    if (bp.block.value() == block_id && !bp.owner_of_unit.empty()) return bp.owner_of_unit;
  }
  return group.blocks.at(block_id).owner_of_unit;
}

std::vector<bool> Coordinator::JudgeChronic(GroupEntry& group, const PooledGroup& pooled,
                                             const JobPolicy& policy, absl::Duration judged_now,
                                             std::vector<std::string>& lines) {
  // Chronic, so that resharding is priced: straggling over the group's blocks for the
  // policy's reshard_after without a break. Per block, the speed model's own straggler
  // state breaks off whenever that block's estimate dips under the threshold, and under
  // a CPU quota some block's does every few seconds.
  std::vector<bool> chronic(group.size, false);
  for (auto& [r, rank] : group.ranks) {
    const bool straggling = r < group.size && static_cast<size_t>(r) < pooled.ranks.size() &&
                            pooled.ranks[r].straggling;
    // Rounds come every report period; a longer gap (paused, not every rank reported)
    // is a break in the run.
    const bool gap = rank.judged_at.has_value() &&
                     judged_now - *rank.judged_at > kJudgementGapPeriods * policy.report_period;
    rank.judged_at = judged_now;
    if (!straggling || gap) rank.straggling_since.reset();
    if (!straggling) continue;
    if (!rank.straggling_since.has_value()) rank.straggling_since = judged_now;
    const absl::Duration straggling_for = judged_now - *rank.straggling_since;
    // A reshard restarts the count (see the end of Decide).
    const bool resharded_since =
        group.moved_units_at.has_value() && *group.moved_units_at > *rank.straggling_since;
    const absl::Duration counted =
        resharded_since ? judged_now - *group.moved_units_at : straggling_for;
    chronic[r] = counted >= policy.reshard_after;
    lines.push_back(absl::StrCat(
        "rank ", r, " straggling for ",
        absl::FormatDuration(absl::Trunc(straggling_for, absl::Milliseconds(100))),
        resharded_since
            ? absl::StrCat(", ",
                           absl::FormatDuration(absl::Trunc(counted, absl::Milliseconds(100))),
                           " since the last reshard")
            : "",
        chronic[r] ? ": chronic" : "", " (reshard_after ",
        absl::FormatDuration(policy.reshard_after), ")"));
  }
  return chronic;
}

std::optional<WorkloadPlan> Coordinator::Decide(GroupEntry& group, const JobPolicy& policy) {
  std::vector<std::string> lines;
  ++counters_.decisions;
  if (static_cast<int32_t>(group.ranks.size()) < group.size) {
    group.reasons = {.before = {absl::StrCat("waiting for ranks: ", group.ranks.size(), " of ",
                                             group.size, " registered")}};
    return std::nullopt;
  }
  GroupPlannerInput planner_input;
  planner_input.group = GroupId(group.name);
  // Written to the group with the decisions it goes with (their blocks hold the excess).
  std::optional<double> common_fixed;
  if (policy.mode != BalanceMode::kOff) {
    // Every block's speeds first: a rank's verdict is pooled over all of them.
    std::vector<PoolBlock> speeds;
    for (const auto& [block_id, block] : group.blocks) {
      absl::StatusOr<GroupSpeeds> s =
          speeds_->Speeds(group.job, GroupId(group.name), BlockId(block_id), policy);
      if (!s.ok() || static_cast<int32_t>(s->ranks.size()) < group.size) {
        lines.push_back(absl::StrCat("block ", block_id, ": not every rank has reported"));
        group.reasons = {.before = std::move(lines)};
        return std::nullopt;
      }
      for (const RankSpeed& rs : s->ranks) {
        if (!rs.has_estimate) {
          lines.push_back(absl::StrCat("block ", block_id, ": rank ", rs.rank.value(),
                                       " has no estimate yet"));
          group.reasons = {.before = std::move(lines)};
          return std::nullopt;
        }
      }
      speeds.push_back({.speeds = *std::move(s), .num_units = block.num_units});
    }
    absl::StatusOr<PooledGroup> pooled = PoolRankSpeeds(speeds, policy.straggler_threshold);
    if (!pooled.ok()) {  // the policy was validated when set: only a bug gets here
      group.reasons = {.before = {std::string(pooled.status().message())}};
      return std::nullopt;
    }
    const absl::Duration now = clock_->Monotonic();
    const bool calm = TreatAsCalm(*pooled, policy.straggler_threshold, group.plan.blocks.empty(),
                                  now, options_.marginal_straggler_for,
                                  kJudgementGapPeriods * policy.report_period, group.marginal);
    lines.push_back(absl::StrCat(
        DescribePooledGroup(*pooled, static_cast<int32_t>(speeds.size()),
                            policy.straggler_threshold),
        calm && !pooled->calm
            ? absl::StrCat("; a marginal straggler, for ",
                           absl::FormatDuration(
                               absl::Trunc(now - *group.marginal.since, absl::Milliseconds(100))),
                           " of ", absl::FormatDuration(options_.marginal_straggler_for),
                           " before balancing: all-local")
            : ""));
    // Symmetric with resharding for a chronic straggler: a split changes only on a verdict
    // that has held for reshard_after. Under a CPU quota a resharded rank with fewer units
    // is throttled less and can look calm for seconds while still contended; going back on
    // that would move units twice a cycle.
    const bool calm_lasted =
        ExtendRun(pooled->calm, now, kJudgementGapPeriods * policy.report_period, group.calm) >=
            policy.reshard_after &&
        pooled->calm;
    const std::vector<bool> chronic = JudgeChronic(group, *pooled, policy, now, lines);
    std::string link_line;
    const double bytes_per_second = LinkBytesPerSecond(group, &link_line);
    lines.push_back(std::move(link_line));
    const std::vector<double> fixed_per_step =
        FixedSecondsPerStep(group, *pooled, lines, common_fixed);
    // A rank's fixed seconds go to the blocks by their share of the group's reference
    // compute, so that every block sees the same ratios between ranks.
    double reference_total = 0;
    for (const PoolBlock& pb : speeds) {
      reference_total += pb.speeds.reference_seconds_per_unit * pb.num_units;
    }
    size_t b = 0;
    for (const auto& [block_id, block] : group.blocks) {
      const double share = reference_total > 0 ? speeds[b].speeds.reference_seconds_per_unit *
                                                     block.num_units / reference_total
                                               : 0;
      const GroupSpeeds& block_speeds = speeds[b++].speeds;
      GroupBlockInput& in = planner_input.blocks.emplace_back();
      in.input.block = BlockId(block_id);
      in.input.owner_of_unit = PlannedOwnership(group, block_id);
      in.move_unconfirmed = in.input.owner_of_unit != block.owner_of_unit;
      // Weights out once a step, gradients back once per micro-batch.
      in.input.transfer_seconds_per_unit =
          (1.0 + block.micro_batches) * static_cast<double>(block.unit_bytes) / bytes_per_second;
      in.input.calm = calm;
      in.input.calm_lasted = calm_lasted;
      std::vector<int32_t> owned(group.size, 0);
      for (RankId r : in.input.owner_of_unit) ++owned[r.value()];
      for (const RankSpeed& rs : block_speeds.ranks) {
        PlannerRank pr;
        pr.seconds_per_unit = PooledSecondsPerUnit(rs, block_speeds, *pooled);
        pr.owned_units = owned[rs.rank.value()];
        const size_t r = static_cast<size_t>(rs.rank.value());
        pr.fixed_seconds = r < fixed_per_step.size() ? fixed_per_step[r] * share : 0;
        pr.chronic = rs.rank.value() < group.size && chronic[rs.rank.value()];
        const RankEntry& entry = group.ranks.at(rs.rank.value());
        pr.cordoned = cordons_.contains(entry.identity.device());
        in.input.ranks.push_back(pr);
      }
    }
  }
  // Workers that report a plan newer than ours run one an earlier coordinator pushed (we
  // restarted and lost it).
  int64_t workers_version = 0, workers_number = 0;
  for (const auto& [r, rank] : group.ranks) {
    if (!rank.attached) continue;
    workers_version = std::max(workers_version, rank.last_plan_version);
    workers_number = std::max(workers_number, rank.last_plan_number);
  }
  planner_input.in_force = group.plan;
  planner_input.unknown_plan_in_force = workers_version > group.plan.version.value();
  if (group.plan_changed_at.has_value()) {
    planner_input.since_change = clock_->Monotonic() - *group.plan_changed_at;
  }
  const DwellOptions dwell{.plan_dwell = options_.plan_dwell,
                           .dwell_hysteresis = options_.dwell_hysteresis};
  GroupDecision decision = DecideGroup(planner_input, policy, dwell);
  // Moved, not copied: Explain renders this round's blocks from group.decisions (a block
  // whose planning failed keeps its last decision there, but its failure is shown).
  for (auto& [block_id, block_decision] : decision.blocks) {
    group.decisions[block_id] = std::move(block_decision);
  }
  if (policy.mode == BalanceMode::kOff) {
    // Off plans nothing, so it predicts nothing: an earlier mode's decisions would have
    // status and /metrics predict a plan no longer in force (the interleaved benchmark
    // measured mode off's prediction 27% off its step: the last auto plan's).
    group.decisions.clear();
    group.common_fixed_seconds.reset();
  } else {
    group.common_fixed_seconds = common_fixed;
  }
  decision.blocks.clear();
  const bool moves_units = decision.moves_units;
  std::vector<std::string> after;
  if (!group.decisions.empty()) {
    const StepPrediction p = PredictStep(group);
    // Two calls: absl's format strings must be constants (clang checks it).
    after.push_back(
        group.common_fixed_seconds.has_value()
            ? absl::StrFormat("step: %.4f s predicted = %.4f s of blocks (compute, and each "
                              "rank's fixed seconds beyond the least) + %.4f s of collectives "
                              "(the least fixed seconds)",
                              p.blocks + p.collectives, p.blocks, p.collectives)
            : absl::StrFormat("step: %.4f s predicted = %.4f s of block compute + %.4f s of "
                              "collectives (the smallest median over the ranks: their cost "
                              "without waiting for a late peer)",
                              p.blocks + p.collectives, p.blocks, p.collectives));
  }
  std::optional<WorkloadPlan> change = std::move(decision.change);
  decision.change.reset();
  planner_input.in_force = WorkloadPlan();  // ExplainGroup reads only the blocks
  group.reasons = {.before = std::move(lines),
                   .planned = std::move(planner_input),
                   .decision = std::move(decision),
                   .after = std::move(after)};
  if (!change.has_value()) return std::nullopt;
  WorkloadPlan plan = *std::move(change);
  // Above every version a worker runs, so the workers take it (they ignore older ones),
  // and numbered on from the plan they run, so a restart does not count from 1 again.
  plan.version = PlanVersion(std::max(NextVersion(group), workers_version + 1));
  plan.number = std::max(group.plan.number, workers_number) + 1;
  // A reshard restarts the count to chronic, so the next one waits reshard_after again.
  // Under a CPU quota a rank's slowdown moves with its load: one fewer unit, and it
  // idles more and is throttled less, which made the split swing by a unit every ~13
  // s on the shaped link (7 moves in 300 steps with reshard_after 4 s).
  if (moves_units) group.moved_units_at = clock_->Monotonic();
  return plan;
}

std::vector<double> Coordinator::FixedSecondsPerStep(const GroupEntry& group,
                                                     const PooledGroup& pooled,
                                                     std::vector<std::string>& lines,
                                                     std::optional<double>& common) const {
  std::vector<double> none(group.size, 0.0);
  if (!options_.fixed_costs) {
    lines.push_back(
        "fixed costs: off (coordinator flag --fixed_costs): block compute balanced alone");
    return none;
  }
  std::vector<double> collective(group.size, 0.0), slowdown(group.size, 0.0);
  for (const auto& [r, rank] : group.ranks) {
    if (r < 0 || r >= group.size || !rank.attached) continue;
    collective[r] = rank.collective_seconds.Median();
    if (static_cast<size_t>(r) < pooled.ranks.size()) slowdown[r] = pooled.ranks[r].slowdown;
  }
  absl::StatusOr<FixedCosts> costs = EstimateFixedCosts(collective, slowdown);
  if (!costs.ok()) {  // reports are validated: only a bug gets here
    lines.push_back(absl::StrCat("fixed costs: ", costs.status().message()));
    return none;
  }
  lines.push_back(DescribeFixedCosts(*costs));
  if (costs->measured) common = costs->common;
  return costs->excess;
}

void Coordinator::DecideDueGroups() {
  const absl::Duration now = clock_->Monotonic();
  for (auto& [key, group] : groups_) {
    if (now < group.next_decision) continue;
    const JobPolicy policy = PolicyFor(group.job);
    group.next_decision = now + policy.report_period;
    if (Paused(group.job)) {
      group.reasons = {.before = {"balancing paused: the plan in force stays"}};
      continue;
    }
    const absl::Time began = absl::Now();
    std::optional<WorkloadPlan> plan = Decide(group, policy);
    Observe(observations_.decision_seconds, absl::ToDoubleSeconds(absl::Now() - began));
    if (!plan.has_value()) continue;
    group.plan = *std::move(plan);
    ++counters_.plan_changes;
    BALLAST_LOG(INFO) << "job=" << group.job << " group=" << group.name << " new plan "
                      << PlanSummary(group.plan);
    Push(group);
    group.plan_pushed_at = clock_->Now();
    group.plan_changed_at = clock_->Monotonic();
  }
}

}  // namespace ballast::coordinator
