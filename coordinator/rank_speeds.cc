#include "coordinator/rank_speeds.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace ballast::coordinator {

bool MilderStraggle(double slowdown, double than, double straggler_threshold) {
  return slowdown * (1 + straggler_threshold) < than;
}

absl::StatusOr<PooledGroup> PoolRankSpeeds(const std::vector<PoolBlock>& blocks,
                                           double straggler_threshold) {
  if (!(straggler_threshold >= 0) || !std::isfinite(straggler_threshold)) {
    return absl::InvalidArgumentError(
        absl::StrCat("straggler_threshold ", straggler_threshold, " must be finite and >= 0"));
  }
  int32_t size = 0;
  for (size_t b = 0; b < blocks.size(); ++b) {
    if (!(blocks[b].work >= 0) || !std::isfinite(blocks[b].work)) {
      return absl::InvalidArgumentError(
          absl::StrCat("blocks[", b, "].work ", blocks[b].work, " must be finite and >= 0"));
    }
    for (const RankSpeed& r : blocks[b].speeds.ranks) size = std::max(size, r.rank.value() + 1);
  }
  std::vector<double> own(size, 0), reference(size, 0);
  PooledGroup out;
  out.ranks.resize(size);
  for (const PoolBlock& block : blocks) {
    const double ref = block.speeds.reference_seconds_per_unit;
    for (const RankSpeed& r : block.speeds.ranks) {
      if (!(r.slowdown > 0) || !(ref > 0)) continue;  // not judged here (stale, no estimate)
      own[r.rank.value()] += r.slowdown * ref * block.work;
      reference[r.rank.value()] += ref * block.work;
      ++out.ranks[r.rank.value()].blocks_judged;
    }
  }
  out.calm = size > 0;
  for (int32_t r = 0; r < size; ++r) {
    PooledRank& pooled = out.ranks[r];
    if (!(reference[r] > 0)) {
      pooled.blocks_judged = 0;
      out.calm = false;  // nothing known about this rank: no verdict for the group
      continue;
    }
    pooled.slowdown = own[r] / reference[r];
    pooled.straggling = pooled.slowdown > 1 + straggler_threshold;
    // The reference is a median: with TP 4, three ranks at 2x make a 1x rank look 0.5x,
    // and that group gains from balancing as much as one with a straggler.
    pooled.fast = pooled.slowdown < 1 / (1 + straggler_threshold);
    if (pooled.straggling || pooled.fast) out.calm = false;
  }
  return out;
}

RankPrice PriceRank(const RankSpeed& rank, const GroupSpeeds& block, const PooledGroup& pooled,
                    bool use_fit) {
  const size_t r = static_cast<size_t>(rank.rank.value());
  const double slowdown = r < pooled.ranks.size() ? pooled.ranks[r].slowdown : 0;
  RankPrice price;
  price.seconds_per_unit = slowdown > 0 && block.reference_seconds_per_unit > 0
                               ? block.reference_seconds_per_unit * slowdown
                               : rank.seconds_per_unit;
  if (!use_fit || !rank.affine.has_value() || !(rank.seconds_per_unit > 0)) return price;
  const double scale = price.seconds_per_unit / rank.seconds_per_unit;
  price.fixed_seconds = rank.affine->fixed_seconds * scale;
  price.seconds_per_unit = rank.affine->seconds_per_unit * scale;
  price.fitted = true;
  return price;
}

absl::Duration ExtendRun(bool holds, absl::Duration now, absl::Duration max_gap, RoundRun& run) {
  if (run.since.has_value() && now - run.last_round > max_gap) run.since.reset();
  run.last_round = now;
  if (!holds) {
    run.since.reset();
    return absl::ZeroDuration();
  }
  if (!run.since.has_value()) run.since = now;
  return now - *run.since;
}

bool IsMarginal(double ratio, double straggler_threshold) {
  const double margin = 1 + kMarginalFactor * straggler_threshold;
  return ratio <= margin && ratio >= 1 / margin;
}

bool WaitOutMarginal(bool marginal, bool running_all_local, absl::Duration now,
                     absl::Duration marginal_for, absl::Duration max_gap, RoundRun& run) {
  const bool waits = marginal && running_all_local;
  const absl::Duration lasted = ExtendRun(waits, now, max_gap, run);
  return waits && lasted < marginal_for;
}

bool MarginalStraggler(const PooledGroup& group, double straggler_threshold) {
  bool marginal = !group.calm && !group.ranks.empty();
  for (const PooledRank& r : group.ranks) {
    marginal = marginal && r.blocks_judged > 0 && IsMarginal(r.slowdown, straggler_threshold);
  }
  return marginal;
}

CalmVerdict TreatAsCalm(const PooledGroup& group, double straggler_threshold,
                        bool running_all_local, absl::Duration now, absl::Duration marginal_for,
                        absl::Duration flap_wait, absl::Duration max_gap, RoundRun& run) {
  if (group.calm) {
    ExtendRun(false, now, max_gap, run);  // a calm round ends a straggler's run
    return {.calm = true};
  }
  absl::Duration wait = absl::ZeroDuration();
  if (running_all_local) {
    wait = MarginalStraggler(group, straggler_threshold) ? std::max(marginal_for, flap_wait)
                                                         : flap_wait;
  }
  const bool waits = wait > absl::ZeroDuration();
  const absl::Duration lasted = ExtendRun(waits, now, max_gap, run);
  return {.calm = waits && lasted < wait, .wait = wait};
}

std::string DescribePooledGroup(const PooledGroup& group, int32_t num_blocks,
                                double straggler_threshold) {
  std::vector<std::string> ranks;
  for (size_t r = 0; r < group.ranks.size(); ++r) {
    const PooledRank& rank = group.ranks[r];
    if (rank.blocks_judged == 0) {
      ranks.push_back(absl::StrCat(r, " not judged"));
      continue;
    }
    ranks.push_back(absl::StrCat(r, " ", absl::StrFormat("%.2f", rank.slowdown), "x",
                                 rank.straggling ? " straggling" : (rank.fast ? " fast" : "")));
  }
  std::string out = absl::StrCat(
      "ranks pooled over ", num_blocks, " block", num_blocks == 1 ? "" : "s", " (straggler above ",
      absl::StrFormat("%.2f", 1 + straggler_threshold), "x): ", absl::StrJoin(ranks, ", "));
  if (group.calm) absl::StrAppend(&out, "; calm");
  return out;
}

}  // namespace ballast::coordinator
