#include "coordinator/straggler_judge.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"

namespace ballast::coordinator {

StragglerJudge::StragglerJudge(Clock* clock, absl::Duration marginal_straggler_for,
                               absl::Duration known_kind_min, absl::Duration known_kind_max,
                               absl::Duration blip_memory)
    : clock_(clock),
      marginal_straggler_for_(marginal_straggler_for),
      known_kind_min_(known_kind_min),
      known_kind_max_(std::max(known_kind_min, known_kind_max)),
      blip_memory_(blip_memory) {}

StragglerJudge::GroupRuns& StragglerJudge::RunsOf(const GroupRef& ref) {
  GroupRuns& runs = groups_[ref.key];
  if (runs.incarnation != ref.incarnation) runs = GroupRuns{.incarnation = ref.incarnation};
  return runs;
}

StragglerJudge::Verdict StragglerJudge::Judge(const GroupRef& ref,
                                              const std::vector<int32_t>& ranks, int32_t size,
                                              const PooledGroup& pooled, int32_t num_blocks,
                                              const JobPolicy& policy, bool running_all_local,
                                              absl::Duration flap_wait,
                                              std::vector<std::string>& lines) {
  const absl::Duration now = clock_->Monotonic();
  const absl::Duration max_gap = kJudgementGapPeriods * policy.report_period;
  absl::MutexLock lock(&mu_);
  GroupRuns& runs = RunsOf(ref);
  std::erase_if(runs.blips, [&](const Blip& b) { return now - b.ended_at > blip_memory_; });
  Verdict v;
  std::vector<std::string> rank_lines;
  // Chronic, so that resharding is priced: straggling over the group's blocks for the
  // policy's reshard_after without a break. Per block, the speed model's own straggler
  // state breaks off whenever that block's estimate dips under the threshold, and under
  // a CPU quota some block's does every few seconds: the pooled verdict rides those out.
  // A break is a gap in the rounds (max_gap) or a calm spell: the rank not straggling for
  // longer than the calm spell grace since it last straggled. Shorter ones are kept: the
  // speed model adopts a run of a few fast samples at once (speed_model.h), and under a
  // CPU quota a straggler computing few units has such runs (three steps at 0.4-1.1x its
  // peer's time a unit in the interleaved benchmark), so it read calm for a round or two
  // and its count restarted 90 s into the straggle (docs/benchmarks.md, 2026-12-02
  // (night)). Longer ones end the run: a rank slow 1.5 s in every 4.5 s is blips.
  const absl::Duration calm_grace = std::min(max_gap, kMaxCalmSpell);
  v.chronic.assign(size, false);
  for (int32_t r : ranks) {
    RankRun& rank = runs.ranks[r];
    const bool pooled_rank = r < size && static_cast<size_t>(r) < pooled.ranks.size();
    const bool straggling = pooled_rank && pooled.ranks[r].straggling;
    const bool gap = rank.judged_at.has_value() && now - *rank.judged_at > max_gap;
    rank.judged_at = now;
    if (gap) rank = RankRun{.judged_at = now};
    // A round of a run (this one may start it) on a plan that asks something of the workers.
    if ((straggling || rank.straggling_since.has_value()) && !running_all_local) {
      rank.acted_on = true;
    }
    if (!straggling) {
      if (!rank.straggling_since.has_value()) continue;
      const absl::Duration calm_for = now - *rank.last_straggled_at;
      if (calm_for > calm_grace) {
        // Ended on its own: a blip, unless something was done about it, it lasted as long
        // as the longest wait, or this round did not measure the rank (a rank whose experts
        // got no tokens reads not straggling: its end is not known).
        const absl::Duration blip =
            *rank.last_straggled_at - *rank.straggling_since + policy.report_period;
        const bool measured = pooled_rank && pooled.ranks[r].blocks_judged > 0;
        if (!rank.acted_on && measured && blip < known_kind_max_) {
          const Blip ended{.ended_at = now, .lasted = blip, .peak_slowdown = rank.peak_slowdown};
          std::erase_if(runs.blips, [&](const Blip& b) {
            return b.lasted <= ended.lasted && b.peak_slowdown <= ended.peak_slowdown;
          });
          runs.blips.push_back(ended);
          // Rare (a few a minute on a noisy machine): why a known kind's straggle waits.
          BALLAST_LOG(INFO) << "job=" << ref.key.first << " group=" << ref.key.second << " rank "
                            << r << " straggled " << absl::FormatDuration(blip) << " at up to "
                            << absl::StrFormat("%.2fx", ended.peak_slowdown)
                            << ", ended on its own: a blip, which a known kind's straggle "
                               "about as slow waits out for the next "
                            << absl::FormatDuration(blip_memory_);
        }
        rank = RankRun{.judged_at = now};
        continue;
      }
      rank_lines.push_back(
          absl::StrCat("rank ", r, " not straggling for ",
                       absl::FormatDuration(absl::Trunc(calm_for, absl::Milliseconds(10))),
                       ", straggling again within ", absl::FormatDuration(calm_grace),
                       " keeps its count to chronic"));
      continue;
    }
    rank.last_straggled_at = now;
    rank.peak_slowdown = std::max(rank.peak_slowdown, pooled.ranks[r].slowdown);
    if (!rank.straggling_since.has_value()) {
      rank.straggling_since = now;
      // Begun as an operator's change took effect: that change's (kOperatorEcho).
      if (runs.operator_at.has_value() && now - *runs.operator_at <= kOperatorEcho) {
        rank.acted_on = true;
      }
    }
    const absl::Duration straggling_for = now - *rank.straggling_since;
    // A reshard restarts the count (UnitsMoved).
    const bool resharded_since =
        runs.moved_units_at.has_value() && *runs.moved_units_at > *rank.straggling_since;
    const absl::Duration counted = resharded_since ? now - *runs.moved_units_at : straggling_for;
    v.chronic[r] = counted >= policy.reshard_after;
    rank_lines.push_back(absl::StrCat(
        "rank ", r, " straggling for ",
        absl::FormatDuration(absl::Trunc(straggling_for, absl::Milliseconds(100))),
        resharded_since
            ? absl::StrCat(", ",
                           absl::FormatDuration(absl::Trunc(counted, absl::Milliseconds(100))),
                           " since the last reshard")
            : "",
        v.chronic[r] ? ": chronic" : "", " (reshard_after ",
        absl::FormatDuration(policy.reshard_after), ")"));
  }
  // A chronic straggler is no blip: it has lasted reshard_after, which may be shorter
  // than a flap's wait that has doubled.
  if (std::find(v.chronic.begin(), v.chronic.end(), true) != v.chronic.end()) {
    flap_wait = absl::ZeroDuration();
  }
  const CalmVerdict waited =
      TreatAsCalm(pooled, policy.straggler_threshold, running_all_local, now,
                  marginal_straggler_for_, flap_wait, max_gap, runs.marginal);
  v.calm = waited.calm;
  std::string waits;
  if (v.calm && !pooled.calm) {
    waits = absl::StrCat(
        waited.wait > marginal_straggler_for_ ||
                !MarginalStraggler(pooled, policy.straggler_threshold)
            ? "; a straggler while the plans flap"
            : "; a marginal straggler",
        ", for ",
        absl::FormatDuration(absl::Trunc(now - *runs.marginal.since, absl::Milliseconds(100))),
        " of ", absl::FormatDuration(waited.wait), " before balancing: all-local");
  }
  lines.push_back(
      absl::StrCat(DescribePooledGroup(pooled, num_blocks, policy.straggler_threshold), waits));
  // Symmetric with resharding for a chronic straggler: a split changes only on a verdict
  // that has held for reshard_after (here without the calm spell's grace: a straggling
  // round ends the calm run, so a split goes back to even only on a steady calm, or on a
  // StragglerKind recheck: decision_loop.cc). Under a CPU quota a resharded rank with
  // fewer units is throttled less and can look calm for seconds while still contended;
  // going back on that would move units twice a cycle.
  v.calm_lasted =
      ExtendRun(pooled.calm, now, max_gap, runs.calm) >= policy.reshard_after && pooled.calm;
  if (!v.calm) {
    double slowest = 0;
    for (size_t r = 0; r < pooled.ranks.size() && r < static_cast<size_t>(size); ++r) {
      if (pooled.ranks[r].straggling && pooled.ranks[r].slowdown > slowest) {
        slowest = pooled.ranks[r].slowdown;
        v.straggler = static_cast<int32_t>(r);
      }
    }
  }
  runs.judged_straggler = v.straggler;

  lines.insert(lines.end(), rank_lines.begin(), rank_lines.end());
  return v;
}

StragglerJudge::SkewVerdict StragglerJudge::JudgeSkew(const GroupRef& ref, int32_t block,
                                                      const LoadsSkew& skew,
                                                      const JobPolicy& policy,
                                                      std::vector<std::string>& lines) {
  const absl::Duration now = clock_->Monotonic();
  const absl::Duration max_gap = kJudgementGapPeriods * policy.report_period;
  absl::MutexLock lock(&mu_);
  GroupRuns& runs = RunsOf(ref);
  GroupRuns::BlockRuns& block_runs = runs.blocks[block];
  SkewVerdict v;
  const bool skewed = !skew.balanced;
  const absl::Duration skewed_for = ExtendRun(skewed, now, max_gap, block_runs.skewed);
  v.waits = WaitOutMarginal(skewed && IsMarginal(skew.ratio, policy.straggler_threshold),
                            !skew.replicating, now, marginal_straggler_for_, max_gap,
                            block_runs.marginal);
  if (!skewed) return v;
  // As for a chronic straggler: the experts just moved are judged afresh.
  const bool moved_since =
      runs.moved_units_at.has_value() && *runs.moved_units_at > *block_runs.skewed.since;
  const absl::Duration counted = moved_since ? now - *runs.moved_units_at : skewed_for;
  v.lasted = counted >= policy.reshard_after;
  // A skew that has lasted reshard_after is no passing spell, whatever its size: it is
  // priced for a reshard, not waited out (reshard_after may be shorter than the wait).
  if (v.lasted) v.waits = false;
  auto seconds = [](absl::Duration d) {
    return absl::FormatDuration(absl::Trunc(d, absl::Milliseconds(100)));
  };
  lines.push_back(absl::StrCat(
      "block ", block, ": loads unbalanced on its experts' ownership (all-local ",
      absl::StrFormat("%.2f", skew.ratio), "x the ideal) for ", seconds(counted),
      moved_since ? " since the last reshard" : "", v.lasted ? ": lasted, a reshard is priced" : "",
      " (reshard_after ", absl::FormatDuration(policy.reshard_after), ")",
      v.waits ? absl::StrCat("; a marginal skew, for ", seconds(now - *block_runs.marginal.since),
                             " of ", absl::FormatDuration(marginal_straggler_for_),
                             " before splitting experts: all-local")
              : ""));
  return v;
}

bool StragglerJudge::KindMeasuredChronic(const GroupRef& ref, int32_t rank,
                                         StragglerKind::Kind kind, absl::Duration measured_at,
                                         bool still_last, const JobPolicy& policy,
                                         std::vector<std::string>& lines) {
  if (kind == StragglerKind::Kind::kUnknown) return false;
  const std::string what = kind == StragglerKind::Kind::kCompute
                               ? "a slower device"
                               : "throttled whole (its collectives slow too)";
  const absl::Duration now = clock_->Monotonic();
  absl::MutexLock lock(&mu_);
  GroupRuns& runs = RunsOf(ref);
  RankRun& run = runs.ranks[rank];
  if (!run.straggling_since.has_value()) return false;  // Judge found it calm
  const std::optional<Blip> outlast =
      BlipToOutlastAt(runs, now, run.peak_slowdown, policy.straggler_threshold);
  const absl::Duration not_a_blip =
      std::clamp(outlast.has_value() ? outlast->lasted : absl::ZeroDuration(), known_kind_min_,
                 known_kind_max_);
  if (*run.straggling_since > measured_at && now - *run.straggling_since < not_a_blip) {
    const std::string blips = absl::StrCat(
        outlast.has_value()
            ? absl::StrCat(
                  "this group's longest blip ",
                  absl::FormatDuration(absl::Ceil(outlast->lasted, absl::Milliseconds(10))),
                  absl::StrFormat(" (up to %.2fx)", outlast->peak_slowdown))
            : "no blip",
        " within the last ", absl::FormatDuration(blip_memory_),
        absl::StrFormat(" about as slow as this straggle's %.2fx", run.peak_slowdown));
    lines.push_back(absl::StrCat(
        "rank ", rank, ": ", what,
        ", measured before this straggle began: chronic once the straggle has lasted ",
        absl::FormatDuration(absl::Ceil(not_a_blip, absl::Milliseconds(10))), " (not a blip: ",
        blips, ", kept within --known_kind_wait_min ", absl::FormatDuration(known_kind_min_),
        " and --known_kind_wait_max ", absl::FormatDuration(known_kind_max_), ")"));
    return false;
  }
  // The last move answered another rank's straggle, this one began after it, and no move
  // within reshard_after took this rank's units (two ranks taking turns stay spaced).
  const bool moved_lately =
      runs.moved_units_at.has_value() && now - *runs.moved_units_at < policy.reshard_after;
  const auto relieved = runs.relieved_at.find(rank);
  const bool moved_for_another =
      moved_lately && runs.moved_for >= 0 && runs.moved_for != rank &&
      *run.straggling_since > *runs.moved_units_at &&
      (relieved == runs.relieved_at.end() || now - relieved->second >= policy.reshard_after);
  // A rank that move (or one since reshard_after) relieved, and that still arrives last.
  const bool relieved_too_little = moved_lately && still_last &&
                                   relieved != runs.relieved_at.end() &&
                                   now - relieved->second < policy.reshard_after;
  const std::string moved_ago =
      moved_lately
          ? absl::FormatDuration(absl::Trunc(now - *runs.moved_units_at, absl::Milliseconds(100)))
          : "";
  if (moved_lately && !moved_for_another && !relieved_too_little) {
    lines.push_back(absl::StrCat("rank ", rank, ": ", what, ", but units moved ", moved_ago,
                                 " ago: chronic only once reshard_after (",
                                 absl::FormatDuration(policy.reshard_after), ") has passed since"));
    return false;
  }
  lines.push_back(absl::StrCat(
      "rank ", rank, ": ", what, " (measured): chronic now, without lasting reshard_after ",
      "(coordinator flag ",
      kind == StragglerKind::Kind::kCompute ? "--reshard_slower_devices"
                                            : "--reshard_throttled_ranks",
      ")",
      moved_for_another
          ? absl::StrCat("; units moved ", moved_ago, " ago for rank ", runs.moved_for,
                         "'s straggle, before this one began: not spaced from "
                         "that move")
      : relieved_too_little ? absl::StrCat("; units moved ", moved_ago,
                                           " ago relieved it, but it still arrives last: not "
                                           "spaced from that move")
                            : ""));
  run.kind_measured = true;
  return true;
}

void StragglerJudge::UnitsMoved(const GroupRef& ref, const std::vector<int32_t>& relieved) {
  // Under a CPU quota a rank's slowdown moves with its load: one fewer unit, and it idles
  // more and is throttled less, which made the split swing by a unit every ~13 s on the
  // shaped link (7 moves in 300 steps with reshard_after 4 s). So the next reshard waits
  // reshard_after again.
  const absl::Duration now = clock_->Monotonic();
  absl::MutexLock lock(&mu_);
  GroupRuns& runs = RunsOf(ref);
  runs.moved_units_at = now;
  runs.moved_for = runs.judged_straggler;
  for (int32_t r : relieved) runs.relieved_at[r] = now;
  ActOnOpenRuns(runs);
}

void StragglerJudge::HoldMovedUnits(const GroupRef& ref) {
  absl::MutexLock lock(&mu_);
  GroupRuns& runs = RunsOf(ref);
  runs.moved_units_at.reset();
  runs.relieved_at.clear();
  ActOnOpenRuns(runs);
}

void StragglerJudge::OperatorChanged(const GroupRef& ref) {
  const absl::Duration now = clock_->Monotonic();
  absl::MutexLock lock(&mu_);
  GroupRuns& runs = RunsOf(ref);
  runs.operator_at = now;
  ActOnOpenRuns(runs);
}

void StragglerJudge::ActOnOpenRuns(GroupRuns& runs) {
  for (auto& [rank, run] : runs.ranks) {
    if (run.straggling_since.has_value()) run.acted_on = true;
  }
}

std::optional<absl::Duration> StragglerJudge::LongestBlip(const GroupRef& ref) const {
  const std::optional<Blip> longest = BlipToOutlast(ref, /*peak_slowdown=*/0, /*threshold=*/0);
  if (!longest.has_value()) return std::nullopt;
  return longest->lasted;
}

std::optional<StragglerJudge::Blip> StragglerJudge::BlipToOutlast(const GroupRef& ref,
                                                                  double peak_slowdown,
                                                                  double threshold) const {
  const absl::Duration now = clock_->Monotonic();
  absl::MutexLock lock(&mu_);
  auto it = groups_.find(ref.key);
  if (it == groups_.end() || it->second.incarnation != ref.incarnation) return std::nullopt;
  return BlipToOutlastAt(it->second, now, peak_slowdown, threshold);
}

std::optional<StragglerJudge::Blip> StragglerJudge::BlipToOutlastAt(const GroupRuns& runs,
                                                                    absl::Duration now,
                                                                    double peak_slowdown,
                                                                    double threshold) const {
  std::optional<Blip> longest;
  for (const Blip& blip : runs.blips) {
    if (now - blip.ended_at > blip_memory_) continue;  // forgotten (Judge drops it next)
    if (MilderStraggle(blip.peak_slowdown, peak_slowdown, threshold)) continue;
    if (!longest.has_value() || blip.lasted > longest->lasted) longest = blip;
  }
  return longest;
}

std::map<int32_t, StragglerJudge::RankRun> StragglerJudge::Ranks(const GroupRef& ref) const {
  absl::MutexLock lock(&mu_);
  auto it = groups_.find(ref.key);
  if (it == groups_.end() || it->second.incarnation != ref.incarnation) return {};
  return it->second.ranks;
}

void StragglerJudge::Forget(const GroupKey& key) {
  absl::MutexLock lock(&mu_);
  groups_.erase(key);
}

}  // namespace ballast::coordinator
