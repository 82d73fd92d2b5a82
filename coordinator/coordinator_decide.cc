// The coordinator's decision loop: each due group's inputs gathered (the speed model's
// estimates pooled per rank, chronic stragglers, the learned link, cordons, the plan in
// force), the planner run per block, and a changed plan numbered for pushing. Split from
// coordinator.cc (agents and reports) so that each file stays readable on its own.
#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "ballast/plan.h"
#include "common/logging.h"
#include "coordinator/coordinator.h"
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

std::optional<WorkloadPlan> Coordinator::Decide(GroupEntry& group, const JobPolicy& policy) {
  WorkloadPlan desired;
  desired.group = GroupId(group.name);
  desired.imputation = policy.imputation;
  std::vector<std::string> lines;
  ++counters_.decisions;
  if (static_cast<int32_t>(group.ranks.size()) < group.size) {
    group.explanation =
        absl::StrCat("waiting for ranks: ", group.ranks.size(), " of ", group.size, " registered");
    return std::nullopt;
  }
  // Right after a change, only a large improvement changes the plan again (see
  // CoordinatorOptions::plan_dwell).
  JobPolicy planning = policy;
  const absl::Duration now = clock_->Monotonic();
  if (policy.mode != BalanceMode::kOff && group.plan_changed_at.has_value() &&
      now - *group.plan_changed_at < options_.plan_dwell &&
      options_.dwell_hysteresis > policy.hysteresis) {
    planning.hysteresis = options_.dwell_hysteresis;
    lines.push_back(absl::StrCat("plan changed ",
                                 absl::FormatDuration(now - *group.plan_changed_at),
                                 " ago: hysteresis ", options_.dwell_hysteresis, " until the ",
                                 absl::FormatDuration(options_.plan_dwell), " dwell ends"));
  }
  if (policy.mode != BalanceMode::kOff) {
    // Every block's speeds first: a rank's verdict is pooled over all of them.
    std::vector<PoolBlock> speeds;
    for (const auto& [block_id, block] : group.blocks) {
      absl::StatusOr<GroupSpeeds> s =
          speeds_->Speeds(group.job, GroupId(group.name), BlockId(block_id), policy);
      if (!s.ok() || static_cast<int32_t>(s->ranks.size()) < group.size) {
        lines.push_back(absl::StrCat("block ", block_id, ": not every rank has reported"));
        group.explanation = absl::StrJoin(lines, "\n");
        return std::nullopt;
      }
      for (const RankSpeed& rs : s->ranks) {
        if (!rs.has_estimate) {
          lines.push_back(absl::StrCat("block ", block_id, ": rank ", rs.rank.value(),
                                       " has no estimate yet"));
          group.explanation = absl::StrJoin(lines, "\n");
          return std::nullopt;
        }
      }
      speeds.push_back({.speeds = *std::move(s), .num_units = block.num_units});
    }
    absl::StatusOr<PooledGroup> pooled = PoolRankSpeeds(speeds, policy.straggler_threshold);
    if (!pooled.ok()) {  // the policy was validated when set: only a bug gets here
      group.explanation = std::string(pooled.status().message());
      return std::nullopt;
    }
    const bool calm = TreatAsCalm(*pooled, policy.straggler_threshold,
                                  group.plan.blocks.empty(), group.marginal_rounds);
    lines.push_back(absl::StrCat(
        DescribePooledGroup(*pooled, static_cast<int32_t>(speeds.size()),
                            policy.straggler_threshold),
        calm && !pooled->calm
            ? absl::StrCat("; a marginal straggler, for ", group.marginal_rounds, " round(s) of ",
                           kMarginalRounds, " before balancing: all-local")
            : ""));
    // Chronic, so that resharding is priced: straggling over the group's blocks for the
    // policy's reshard_after without a break. Per block, the speed model's own straggler
    // state breaks off whenever that block's estimate dips under the threshold, and under
    // a CPU quota some block's does every few seconds.
    const absl::Duration judged_now = clock_->Monotonic();
    std::vector<bool> chronic(group.size, false);
    for (auto& [r, rank] : group.ranks) {
      const bool straggling = r < group.size && static_cast<size_t>(r) < pooled->ranks.size() &&
                              pooled->ranks[r].straggling;
      // Rounds come every report period; a longer gap (paused, not every rank reported)
      // is a break in the run.
      const bool gap = rank.judged_at.has_value() &&
                       judged_now - *rank.judged_at > 3 * policy.report_period;
      rank.judged_at = judged_now;
      if (!straggling || gap) rank.straggling_since.reset();
      if (!straggling) continue;
      if (!rank.straggling_since.has_value()) rank.straggling_since = judged_now;
      const absl::Duration straggling_for = judged_now - *rank.straggling_since;
      chronic[r] = straggling_for >= policy.reshard_after;
      lines.push_back(absl::StrCat(
          "rank ", r, " straggling for ",
          absl::FormatDuration(absl::Trunc(straggling_for, absl::Milliseconds(100))),
          chronic[r] ? ": chronic" : "", " (reshard_after ",
          absl::FormatDuration(policy.reshard_after), ")"));
    }
    std::string link_line;
    const double bytes_per_second = LinkBytesPerSecond(group, &link_line);
    lines.push_back(std::move(link_line));
    size_t b = 0;
    for (auto& [block_id, block] : group.blocks) {
      const GroupSpeeds& block_speeds = speeds[b++].speeds;
      PlannerInput input;
      input.block = BlockId(block_id);
      input.owner_of_unit = block.owner_of_unit;
      input.transfer_seconds_per_unit =
          2.0 * static_cast<double>(block.unit_bytes) / bytes_per_second;
      input.calm = calm;
      std::vector<int32_t> owned(group.size, 0);
      for (RankId r : block.owner_of_unit) ++owned[r.value()];
      for (const RankSpeed& rs : block_speeds.ranks) {
        PlannerRank pr;
        pr.seconds_per_unit = PooledSecondsPerUnit(rs, block_speeds, *pooled);
        pr.owned_units = owned[rs.rank.value()];
        pr.chronic = rs.rank.value() < group.size && chronic[rs.rank.value()];
        const RankEntry& entry = group.ranks.at(rs.rank.value());
        pr.cordoned = cordons_.contains(entry.identity.device());
        input.ranks.push_back(pr);
      }
      // A block the plan in force leaves out runs all-local: that is the current plan to
      // beat by the hysteresis, so noise never flips a group in and out of balancing.
      BlockPlan current;
      current.block = BlockId(block_id);
      for (const BlockPlan& bp : group.plan.blocks) {
        if (bp.block.value() == block_id) current = bp;
      }
      current.owner_of_unit.clear();  // ownership already moved: counts refer to it
      absl::StatusOr<BlockDecision> decision = PlanBlock(input, planning, &current);
      if (!decision.ok()) {
        lines.push_back(absl::StrCat("block ", block_id, ": ", decision.status().message()));
        continue;
      }
      lines.push_back(absl::StrCat("block ", block_id, ":\n", decision->explanation));
      BlockPlan bp = decision->plan;
      bp.block = BlockId(block_id);
      // A reshard is restated in every plan until a worker confirms it: ranks agree on the
      // newest plan they all hold, so two plans pushed within one step skip the first,
      // and a reshard followed by its all-local plan was lost (the workers kept the old
      // ownership while the coordinator planned on the new one). Restated, it is a no-op
      // for ranks that already moved.
      if (bp.owner_of_unit.empty() && block.reshard_unconfirmed) {
        bp.owner_of_unit = block.owner_of_unit;
      }
      const bool trivial =
          bp.offloads.empty() && bp.owner_of_unit.empty() &&
          std::all_of(bp.pruned_units.begin(), bp.pruned_units.end(), [](int32_t n) { return n == 0; });
      if (!trivial) desired.blocks.push_back(std::move(bp));
      group.decisions[block_id] = *std::move(decision);
    }
  }
  if (!group.decisions.empty()) {
    const StepPrediction p = PredictStep(group);
    lines.push_back(absl::StrFormat(
        "step: %.4f s predicted = %.4f s of block compute + %.4f s of collectives (the "
        "smallest median over the ranks: their cost without waiting for a late peer)",
        p.blocks + p.collectives, p.blocks, p.collectives));
  }
  group.explanation = absl::StrJoin(lines, "\n");
  if (policy.mode == BalanceMode::kObserve) return std::nullopt;  // explain, never push
  // Workers that report a plan newer than ours run one an earlier coordinator pushed (we
  // restarted and lost it): whatever we decide, even all-local, must replace it, or a
  // group relieved of its straggler would keep offloading for good.
  int64_t workers_version = 0, workers_number = 0;
  for (const auto& [r, rank] : group.ranks) {
    if (!rank.attached) continue;
    workers_version = std::max(workers_version, rank.last_plan_version);
    workers_number = std::max(workers_number, rank.last_plan_number);
  }
  const bool unknown_plan_in_force = workers_version > group.plan.version.value();
  // Compare content, not versions: an unchanged plan is not re-pushed.
  WorkloadPlan current = group.plan;
  current.version = PlanVersion(0);
  if (!unknown_plan_in_force) {
    if (current.blocks == desired.blocks &&
        (desired.blocks.empty() || current.imputation == desired.imputation)) {
      return std::nullopt;
    }
    if (group.plan.version.value() == 0 && desired.blocks.empty()) return std::nullopt;
  }
  // Above every version a worker runs, so the workers take it (they ignore older ones),
  // and numbered on from the plan they run, so a restart does not count from 1 again.
  desired.version = PlanVersion(std::max(NextVersion(group), workers_version + 1));
  desired.number = std::max(group.plan.number, workers_number) + 1;
  return desired;
}

void Coordinator::DecideDueGroups() {
  const absl::Duration now = clock_->Monotonic();
  for (auto& [key, group] : groups_) {
    if (now < group.next_decision) continue;
    const JobPolicy policy = PolicyFor(group.job);
    group.next_decision = now + policy.report_period;
    if (Paused(group.job)) {
      group.explanation = "balancing paused: the plan in force stays";
      continue;
    }
    const absl::Time began = absl::Now();
    std::optional<WorkloadPlan> plan = Decide(group, policy);
    Observe(observations_.decision_seconds, absl::ToDoubleSeconds(absl::Now() - began));
    if (!plan.has_value()) continue;
    // A reshard moves ownership for good: later plans count units against it.
    bool moved = false;
    for (const BlockPlan& bp : plan->blocks) {
      if (bp.owner_of_unit.empty()) continue;
      BlockEntry& block = group.blocks[bp.block.value()];
      moved |= block.owner_of_unit != bp.owner_of_unit;
      block.reshard_unconfirmed |= block.owner_of_unit != bp.owner_of_unit;
      block.owner_of_unit = bp.owner_of_unit;
    }
    // A reshard restarts the count to chronic, so the next one waits reshard_after again.
    // Under a CPU quota a rank's slowdown moves with its load: one fewer unit, and it
    // idles more and is throttled less, which made the split swing by a unit every ~13
    // s on the shaped link (7 moves in 300 steps with reshard_after 4 s).
    if (moved) {
      for (auto& [r, rank] : group.ranks) rank.straggling_since.reset();
    }
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
