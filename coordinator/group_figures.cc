#include "coordinator/group_figures.h"

#include <algorithm>
#include <set>
#include <vector>

#include "absl/strings/str_format.h"
#include "coordinator/arrival_spread.h"

namespace ballast::coordinator {

namespace {

// SpreadWait at the throttled rank's lead under the plan: its load summed over the
// blocks less the most any other rank's sums to; 0 without a spread, or where a block's
// loads do not name the rank.
double SpreadWaitOf(const std::map<int32_t, BlockDecision>& decisions, const StepPricing& pricing) {
  const int32_t t = pricing.throttled_rank;
  if (t < 0 || !(pricing.arrival_spread > 0)) return 0;
  std::vector<double> loads;
  for (const auto& [b, d] : decisions) {
    if (static_cast<size_t>(t) >= d.rank_seconds.size()) return 0;
    loads.resize(std::max(loads.size(), d.rank_seconds.size()), 0.0);
    for (size_t r = 0; r < d.rank_seconds.size(); ++r) loads[r] += d.rank_seconds[r];
  }
  double others = 0;
  for (size_t r = 0; r < loads.size(); ++r) {
    if (r != static_cast<size_t>(t)) others = std::max(others, loads[r]);
  }
  return SpreadWait(pricing.arrival_spread, loads[t] - others);
}

}  // namespace

StepPrediction PredictStep(const std::map<int32_t, BlockDecision>& decisions,
                           const StepPricing& pricing, const std::vector<RankSnapshot>& ranks) {
  StepPrediction p;
  if (decisions.empty()) return p;  // nothing planned yet: no prediction
  for (const auto& [b, d] : decisions) p.blocks += d.predicted_step_seconds;
  p.spread_wait = SpreadWaitOf(decisions, pricing);
  if (pricing.common_fixed_seconds.has_value()) {
    // The rest of every rank's collectives is in the blocks' predictions already.
    p.collectives = *pricing.common_fixed_seconds;
    return p;
  }
  // The collectives' own cost, without the waiting for a late peer that a plan removes:
  // the rank that arrives last waits least, so the smallest median over the ranks.
  bool any = false;
  for (const RankSnapshot& rank : ranks) {
    if (!rank.attached || rank.collective_samples == 0) continue;
    p.collectives = any ? std::min(p.collectives, rank.collective_median) : rank.collective_median;
    any = true;
  }
  return p;
}

double LinkBytesPerSecond(const std::optional<LinkModel::Estimate>& learned,
                          absl::Duration stale_after, double prior, std::string* explanation) {
  if (explanation != nullptr) {
    if (!learned.has_value()) {
      *explanation = absl::StrFormat(
          "link: %.4g MB/s, the --link_bytes_per_second prior (no offload transfer measured "
          "yet)",
          prior / 1e6);
    } else {
      const std::string pair =
          absl::StrFormat("ranks %d and %d", learned->a.value(), learned->b.value());
      const std::string age =
          absl::FormatDuration(absl::Trunc(learned->age, absl::Milliseconds(100)));
      const std::string stale = absl::FormatDuration(stale_after);
      switch (learned->basis) {
        case LinkModel::Basis::kLearned:
          *explanation = absl::StrFormat(
              "link: %.4g MB/s, learned from %d offload transfers between %s (the slowest "
              "pair measured; prior %.4g MB/s)",
              learned->bytes_per_second / 1e6, learned->samples, pair, prior / 1e6);
          break;
        case LinkModel::Basis::kStale:
          *explanation = absl::StrFormat(
              "link: %.4g MB/s, the fastest of %d offload transfers between %s, the newest "
              "%s old (stale after %s: priced at what the link has done until offloads "
              "measure it again; prior %.4g MB/s)",
              learned->bytes_per_second / 1e6, learned->samples, pair, age, stale, prior / 1e6);
          break;
        case LinkModel::Basis::kRelearning:
          *explanation = absl::StrFormat(
              "link: %.4g MB/s between %s, the fastest transfer seen before it went stale, "
              "until %d new samples are in (%d so far; prior %.4g MB/s)",
              learned->bytes_per_second / 1e6, pair, LinkModel::kMinSamples, learned->samples,
              prior / 1e6);
          break;
      }
    }
  }
  return learned.has_value() ? learned->bytes_per_second : prior;
}

namespace {

// The terms of the Measured* figures: every attached rank runs plan `version` and has run
// at least `min_steps` steps under it.
bool EveryAttachedRan(const std::vector<RankSnapshot>& ranks, int64_t version, int64_t min_steps) {
  return std::all_of(ranks.begin(), ranks.end(), [&](const RankSnapshot& rank) {
    return !rank.attached || (rank.last_plan_version == version && rank.plan_steps >= min_steps);
  });
}

}  // namespace

double MeasuredStep(const std::vector<RankSnapshot>& ranks, int64_t version, int64_t min_steps) {
  if (!EveryAttachedRan(ranks, version, min_steps)) return 0;
  double step = 0;
  for (const RankSnapshot& rank : ranks) {
    if (rank.attached) step = std::max(step, rank.plan_step_median);
  }
  return step;
}

double MeasuredCollectives(const std::vector<RankSnapshot>& ranks, int64_t version,
                           int64_t min_steps) {
  if (!EveryAttachedRan(ranks, version, min_steps)) return 0;
  double floor = 0;
  bool any = false;
  for (const RankSnapshot& rank : ranks) {
    if (!rank.attached) continue;
    floor = any ? std::min(floor, rank.plan_collective_median) : rank.plan_collective_median;
    any = true;
  }
  return floor;
}

std::vector<double> MeasuredRankCollectives(const std::vector<RankSnapshot>& ranks, int64_t version,
                                            int64_t min_steps, int32_t size) {
  if (!EveryAttachedRan(ranks, version, min_steps)) return {};
  std::vector<double> out(std::max(size, 0), 0.0);
  for (const RankSnapshot& rank : ranks) {
    if (rank.attached && rank.rank >= 0 && rank.rank < size) {
      out[rank.rank] = rank.plan_collective_median;
    }
  }
  return out;
}

const std::vector<RankId>& PlannedOwnership(const WorkloadPlan& in_force,
                                            const BlockSnapshot& block) {
  for (const BlockPlan& bp : in_force.blocks) {
    if (bp.block.value() == block.block && !bp.owner_of_unit.empty()) return bp.owner_of_unit;
  }
  return block.owner_of_unit;
}

bool PlanRunsAllLocal(const GroupSnapshot& group) {
  static const std::vector<RankId> kNone;
  return std::all_of(
      group.plan.blocks.begin(), group.plan.blocks.end(), [&group](const BlockPlan& bp) {
        const auto block =
            std::find_if(group.blocks.begin(), group.blocks.end(),
                         [&bp](const BlockSnapshot& b) { return b.block == bp.block.value(); });
        return RunsAllLocal(bp, block == group.blocks.end() ? kNone : block->owner_of_unit);
      });
}

std::set<BlockId> MovesMade(const GroupSnapshot& group) {
  std::set<BlockId> made;
  for (const BlockSnapshot& block : group.blocks) {
    if (block.move_made) made.insert(BlockId(block.block));
  }
  return made;
}

std::vector<int32_t> UnitsComputed(const GroupSnapshot& group) {
  return UnitsComputed(group, /*computed=*/true);
}

std::vector<int32_t> UnitsComputed(const GroupSnapshot& group, bool computed) {
  std::vector<int32_t> units(std::max(group.size, 0), 0);
  const auto add = [&units](RankId rank, int32_t n) {
    if (rank.value() >= 0 && static_cast<size_t>(rank.value()) < units.size()) {
      units[rank.value()] += n;
    }
  };
  for (const BlockSnapshot& block : group.blocks) {
    if (block.units_divide) continue;
    const std::vector<RankId>& owners = PlannedOwnership(group.plan, block);
    if (owners.empty()) return {};
    for (RankId owner : owners) add(owner, 1);
    if (!computed) continue;
    for (const BlockPlan& bp : group.plan.blocks) {
      if (bp.block.value() != block.block) continue;
      for (size_t r = 0; r < bp.pruned_units.size(); ++r) {
        add(RankId(static_cast<int32_t>(r)), -bp.pruned_units[r]);
      }
      for (const Offload& o : bp.offloads) {
        add(o.owner, -o.units);
        add(o.helper, o.units);
      }
    }
  }
  return units;
}

}  // namespace ballast::coordinator
