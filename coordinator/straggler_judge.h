// StragglerJudge: the verdicts on a group that need its history, not just this round's
// speeds. Per group it holds these runs of planning rounds, on the injected clock:
//   - calm: the pooled verdict calm without a break; an uneven split goes back to even only
//     after reshard_after of it (PlannerInput::calm_lasted);
//   - marginal: a straggler waited out without a break (rank_speeds.h: TreatAsCalm): a
//     marginal one on a group running all-local for marginal_straggler_for, any one for
//     the flap wait the caller gives while the group's plans flap;
//   - chronic, per rank: straggling, pooled over the group's blocks, for reshard_after,
//     counted from the last plan the planner pushed that moved units if later and still
//     in force (not an operator's hold: the rank straggled through it; a hold that moved
//     units since lifts it: HoldMovedUnits), so that resharding is priced; a calm spell
//     no longer than kMaxCalmSpell (and a gap the run survives, below) does not end it.
//     A straggler whose kind was measured (a slower device, or a rank throttled whole:
//     straggler_kind.h) is chronic at once (a verdict from before this run once the run
//     has outlasted the group's blips), unless the planner moved units within
//     reshard_after (KindMeasuredChronic; a move for another rank's straggle that took none
//     of this rank's units and came before this straggle began does not count, nor does a
//     move that relieved this rank too little: it still arrives last);
//   - skewed, per block planned by its loads (a mixture of experts): its loads unbalanced
//     on its ownership for reshard_after, counted the same way (PlannerInput::skew_lasted).
//     The last move is the group's, as it is for chronic ranks: a reshard of one block
//     restarts every block's count, which delays the next by at most reshard_after;
//   - blips: a rank's straggling run that ended on its own (calm past the calm spell's
//     grace, nothing asked of the workers and no units moved while it lasted, not begun
//     within kOperatorEcho of an operator's change) within the known kind's max wait. The
//     longest that ended within the blip memory and was about as slow as the straggle
//     (BlipToOutlast) is how long a straggle by a rank of known kind must last;
//   - a marginal skew, per such block: unbalanced, but within the marginal factor of the
//     balanced ideal, on a block running all-local, waited out for marginal_straggler_for
//     as a marginal straggler is (PlannerInput::skew_waits), unless it has lasted
//     reshard_after. All-local here means no replicas in force: a plan that only caps
//     capacity, or keeps a reshard's ownership, splits no expert. (The group's marginal
//     run, by contrast, counts a group as all-local only where its plan asks nothing of
//     the workers: none, or one that states only a move they have made, group_figures.h's
//     PlanRunsAllLocal; under an operator's hold, only with no plan at all.)
// A gap of more than kJudgementGapPeriods report periods between rounds (a pause, a detach,
// missing reports) breaks every run: rounds not judged are no evidence.
//
//   StragglerJudge judge(clock, options.marginal_straggler_for);
//   StragglerJudge::Verdict v = judge.Judge(ref, ranks, size, pooled, blocks, policy,
//                                           running_all_local, flaps.StartWait(options.dwell),
//                                           lines);
//   StragglerJudge::SkewVerdict s =
//       judge.JudgeSkew(ref, block, *SkewOfLoads(in, policy, in_force), policy, lines);
//   in.skew_lasted = s.lasted;
//   in.skew_waits = s.waits;
//   // (The kind may be another rank's verdict that stands: only the straggler's counts.)
//   if (kind != StragglerKind::Kind::kUnknown && !v.chronic[straggler]) {
//     if (std::optional<absl::Duration> at = kinds.MeasuredAt(ref, straggler)) {
//       v.chronic[straggler] = judge.KindMeasuredChronic(ref, straggler, kind, *at,
//                                                        still_last, policy, lines);
//     }
//   }
//   ... plan with v.calm, v.calm_lasted, v.chronic, in.skew_lasted, in.skew_waits ...
//   if (published && moves_units) held ? judge.HoldMovedUnits(ref) : judge.UnitsMoved(ref);
//
// Thread-safe. Its runs are keyed by the group's incarnation: a group forgotten and
// registered again starts afresh, even if Forget was not called.
#ifndef BALLAST_COORDINATOR_STRAGGLER_JUDGE_H_
#define BALLAST_COORDINATOR_STRAGGLER_JUDGE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "coordinator/group_registry.h"
#include "coordinator/planner/expert_plan.h"
#include "coordinator/policy.h"
#include "coordinator/rank_speeds.h"
#include "coordinator/straggler_kind.h"

namespace ballast::coordinator {

class StragglerJudge {
 public:
  // Rounds come every report period; a longer gap than this many breaks a run.
  static constexpr int kJudgementGapPeriods = 3;
  // The longest calm spell a rank's straggling run survives (no longer than the gap
  // above either): a round or two of a fast burst the speed model adopted, not a blip's
  // seconds of calm.
  static constexpr absl::Duration kMaxCalmSpell = absl::Seconds(1);
  // The bounds on how long a straggle by a rank whose kind was measured before it began
  // must last to be chronic at once (KindMeasuredChronic): longer than any blip about as
  // slow that the group has shown lately (BlipToOutlast), at least min and at most max.
  // The defaults of the coordinator's --known_kind_wait_min and --known_kind_wait_max. A
  // group that has shown no blip waits min: 0, where a fixed 2 s (longer than the last
  // VM's blips, up to 1.7 s) put a quota onset's reshard at step 20 on a VM whose ranks
  // never blipped, 5 with no wait (docs/benchmarks.md, 2026-12-07 (b)). The max is a
  // straggle no longer a blip: the 5 s it was before it followed the group's blips.
  static constexpr absl::Duration kKnownKindStraggleMin = absl::ZeroDuration();
  static constexpr absl::Duration kKnownKindStraggleMax = absl::Seconds(5);
  // How long a blip counts towards that wait after it ended (the default of the
  // coordinator's --known_kind_blip_memory). A machine's blips come in phases: kept for
  // the whole job, blips of 1-1.25 s in a job's first 9 s (its warm-up) held every quota
  // onset of the interleaved benchmark to 13-14 steps from the best static step, where
  // onsets with no wait in force took 4.5-6 (medians; docs/benchmarks.md, 2026-12-07 (h)).
  static constexpr absl::Duration kBlipMemory = absl::Minutes(2);
  // A straggling run that begins this soon after an operator's change to the group's
  // settings (OperatorChanged) is that change's, not a blip: in the interleaved
  // benchmark, whose segments switch by admin calls on the 2 cores the ranks run on, the
  // ranks parted beyond 1.10x in the 6 steps after 11% of 99 switches between level
  // segments, 3% mid-segment, and a one-round blip learned there made every later onset
  // wait a round (docs/benchmarks.md, 2026-12-07 (d)). About the 3 steps the timers take
  // to adopt a new speed and the report batch and round that carry it.
  static constexpr absl::Duration kOperatorEcho = absl::Seconds(1);

  struct Verdict {
    bool calm = false;          // plan all-local (a marginal straggler not lasted is calm)
    bool calm_lasted = false;   // calm for reshard_after without a break
    std::vector<bool> chronic;  // per rank in [0, size): chronic for planning
    // The slowest straggling rank, in a group not judged calm; -1: none. The compute
    // timers' target: the measured-step loops', and the straggle a move pushed this round
    // is taken to be for (UnitsMoved; the move may relieve other ranks too).
    int32_t straggler = -1;
  };
  // One rank's run of straggling rounds, for status.
  struct RankRun {
    std::optional<absl::Duration> straggling_since;   // unset when it does not straggle
    std::optional<absl::Duration> last_straggled_at;  // its run's last straggling round
    std::optional<absl::Duration> judged_at;          // the last round that judged it
    // Chronic before reshard_after, its kind measured (KindMeasuredChronic).
    bool kind_measured = false;
    // The largest pooled slowdown of its straggling rounds.
    double peak_slowdown = 0;
    // Something was done about it while it lasted: a round of it found the group's plan
    // asking something of the workers (offloads, prunes, a move not yet made), units
    // moved (the planner's or a hold's), or an operator changed the group's settings
    // (from kOperatorEcho before it began). Its end is then no blip's: a quota straggler
    // offloaded idles more and can read calm while still throttled.
    bool acted_on = false;
    // The last round found it calm inside a straggling run not yet ended by that calm:
    // the rank does not straggle now (status reads it normal), but its count goes on.
    bool InCalmSpell() const {
      return straggling_since.has_value() && last_straggled_at != judged_at;
    }
  };

  // `clock` must outlive the judge. A known kind's wait (KindMeasuredChronic) is kept
  // within [known_kind_min, known_kind_max]; 0 <= min <= max, and the blips it follows are
  // those that ended within `blip_memory` > 0 (the caller checks).
  StragglerJudge(Clock* clock, absl::Duration marginal_straggler_for,
                 absl::Duration known_kind_min = kKnownKindStraggleMin,
                 absl::Duration known_kind_max = kKnownKindStraggleMax,
                 absl::Duration blip_memory = kBlipMemory);

  // Judges the round at the clock's monotonic time for the group `ref` of `size` ranks
  // (`ranks`: those registered), on the speeds pooled over its `num_blocks` blocks.
  // `running_all_local`: the plan in force asks nothing of the workers (a straggling run
  // through a round that does not is acted on: RankRun::acted_on).
  // `flap_wait`: how long any straggler must last before a group running all-local starts
  // balancing, because its plans flap (plan_flaps.h: StartWait; zero: only the marginal
  // rule); not for a chronic rank.
  // Appends explanation lines: the pooled verdict, then each straggling rank's run (or
  // its calm spell).
  Verdict Judge(const GroupRef& ref, const std::vector<int32_t>& ranks, int32_t size,
                const PooledGroup& pooled, int32_t num_blocks, const JobPolicy& policy,
                bool running_all_local, absl::Duration flap_wait, std::vector<std::string>& lines);
  // A block's loads, judged over the rounds.
  struct SkewVerdict {
    // Unbalanced for reshard_after, counted from the last plan the planner pushed that
    // moved units if later: a reshard is worth pricing.
    bool lasted = false;
    // Marginally unbalanced on a block running all-local, not yet for
    // marginal_straggler_for: kept all-local.
    bool waits = false;
  };
  // Extends block `block`'s runs by this round's `skew` (SkewOfLoads: unbalanced when not
  // `balanced`; marginal by its ratio, rank_speeds.h: IsMarginal). Appends a line while
  // the loads are unbalanced.
  SkewVerdict JudgeSkew(const GroupRef& ref, int32_t block, const LoadsSkew& skew,
                        const JobPolicy& policy, std::vector<std::string>& lines);
  // Rank `rank`, the round's straggler, had its kind measured (`kind`, kCompute or kWhole:
  // straggler_kind.h) at `measured_at` (monotonic). Whether it is chronic now, without
  // lasting reshard_after. Measuring the kind took 16 steps of straggling, so the
  // straggle is no blip, and for either kind waiting reshard_after only delays the
  // reshard that ends in the same split:
  //   - a slower device (kCompute) stays slow (an older GPU stays old): offloading its
  //     units every step until reshard_after passed ran the GPT's 2x device straggler at
  //     1.126x the best static plan, 1.015x with this (docs/benchmarks.md, 2026-12-03
  //     (eve));
  //   - a rank throttled whole (kWhole: a CPU quota, a co-tenant) is throttled in its
  //     offloads' transfers too, so offloads barely relieve it: on the ViT's 2x quota
  //     straggler a static offload of 0.3 ran 0.967x plain TP where a reshard of 0.4 ran
  //     0.754x, and auto, offloading until reshard_after, 1.289x the best static plan
  //     (docs/benchmarks.md, 2026-12-03 (late)). What the wait guarded against, a quota's
  //     slowdown moving with its load, the spacing below still does.
  // A verdict measured before this straggling run began (it stands through calm spells
  // under 30 s: straggler_kind.h) counts once the run has outlasted every blip the group has
  // shown within the blip memory that was about as slow as this run has been
  // (BlipToOutlast; kept within the constructor's known_kind_min and known_kind_max), so
  // that no blip is resharded on it; without it, the GPT's device straggler coming back 17 s
  // after it left ran plain TP until reshard_after (its offloads refused), 0.98x plain. A
  // fixed wait (16 steps, at least 2 s) put the interleaved benchmark's quota onsets 20
  // steps from the best static step on a VM whose ranks never blipped, 5 with none
  // (docs/benchmarks.md, 2026-12-07 (b)); a group that blips learns its blips' length from
  // its calm rounds, before any rank's kind is measured (that takes 16 steps of straggle). Not if
  // the planner moved units within reshard_after (UnitsMoved) and no hold has moved them since
  // (HoldMovedUnits): the planner's reshards stay spaced as a chronic straggler's are (a quota's
  // slowdown moves with its load). Except for a straggle that began after a move the planner made
  // for another rank's straggle, where no move within reshard_after took this rank's units: that
  // move did not answer it, and spacing it left the interleaved benchmark's quota onsets with no
  // plan for their minute in 7 of 30 cycles, where a blip of the other rank had been resharded in
  // the calm segment before and took no offloads (docs/benchmarks.md, 2026-12-06 (h)). A rank a
  // move relieved stays spaced from it whatever the move was for (two ranks taking turns, a move
  // that relieves several), unless it is `still_last` (StragglerKind::StillLast: a window of the
  // newest plan measured it arriving last, its contention on): that move relieved it too little. In
  // the quota onsets of the interleaved benchmark, a drift's small reshard in the calm segment
  // before (45 -> 42 units) left the quota's rank arriving last, its collectives (the floor)
  // 0.032-0.052 s a step against 0.006-0.013 s calm, and its next move spaced from that one
  // (docs/benchmarks.md, 2026-12-07 (a) and (b)). What a wrong call costs: a straggle that ends
  // soon after its reshard costs a second move, back to even once calm has lasted reshard_after.
  // Appends a line saying which. Call after Judge in the same round.
  bool KindMeasuredChronic(const GroupRef& ref, int32_t rank, StragglerKind::Kind kind,
                           absl::Duration measured_at, bool still_last, const JobPolicy& policy,
                           std::vector<std::string>& lines);
  // The longest straggling run of any of the group's ranks that ended on its own within
  // the blip memory (calm, measured, for longer than the calm spell's grace; not acted
  // on: RankRun::acted_on), marginal ones included (1.09-1.19x blips of a rank whose kind
  // stood were resharded after 2 s at a calm segment's start: docs/benchmarks.md,
  // 2026-12-06 (e)), shorter than the known kind's max wait (a longer one no wait
  // outlasts: a contention that came and went), as its straggling rounds' span plus the
  // report period each stands for: BlipToOutlast at any slowdown. Unset: none within the
  // memory in this incarnation (the coordinator keeps blips in memory only).
  std::optional<absl::Duration> LongestBlip(const GroupRef& ref) const;
  // A blip the judge remembers: how long it lasted and the largest pooled slowdown of its
  // straggling rounds.
  struct Blip {
    absl::Duration ended_at;  // monotonic: the round that found it ended
    absl::Duration lasted;
    double peak_slowdown = 0;
  };
  // The blip a straggle whose rounds peaked at `peak_slowdown` must outlast to be no blip:
  // the longest remembered (ended within the blip memory) whose own peak was within the
  // straggler threshold `threshold` of it or above (blip peak x (1 + threshold) >=
  // `peak_slowdown`). A straggle slower than every blip lately is no blip, however short:
  // on this VM 14 of 15 blips peaked at 1.11-1.22x where a 2x quota's onset read
  // 1.43-1.61x in its first rounds, and the waits the mild blips set (0.5-1.25 s) held
  // the interleaved benchmark's quota onsets to 9-13 steps from the best static step;
  // counting only blips about as slow, 5 [4, 7] against 8.5 [6, 11] (docs/benchmarks.md,
  // 2026-12-07 (h)). Unset: none such.
  std::optional<Blip> BlipToOutlast(const GroupRef& ref, double peak_slowdown,
                                    double threshold) const;
  // A plan the planner decided that moves units was pushed now, taking units from the
  // ranks `relieved`: the counts to chronic and to a lasting skew restart. (Not for a held
  // plan: the runs go on through a hold.) The move is for the straggler the group's last
  // Judge named (the round that decided it).
  void UnitsMoved(const GroupRef& ref, const std::vector<int32_t>& relieved);
  // An operator's hold pushed a plan that moves units: the ownership in force is the
  // hold's, so the planner's last move no longer spaces its next one (resharding back
  // after a release is no swing of its own). Without it, a ViT's device straggler
  // released from a held even split ~40 s after the planner's reshard was offloaded from
  // that split until reshard_after: 1.084x the best static plan, 1.004x where no hold
  // came between (docs/benchmarks.md, 2026-12-03 (night)).
  void HoldMovedUnits(const GroupRef& ref);
  // An operator changed the group's settings (a policy, a hold, its release, a cordon:
  // DecisionLoop::ReplanNow): a straggling run open now, or beginning within
  // kOperatorEcho, is acted on (RankRun::acted_on), so no blip.
  void OperatorChanged(const GroupRef& ref);
  // Per registered rank, its run (none before the group's first round).
  std::map<int32_t, RankRun> Ranks(const GroupRef& ref) const;
  void Forget(const GroupKey& key);

 private:
  struct GroupRuns {
    uint64_t incarnation = 0;
    RoundRun marginal;
    RoundRun calm;
    std::map<int32_t, RankRun> ranks;
    // Per block planned by its loads: its unbalanced rounds, and its marginal ones waited
    // out.
    struct BlockRuns {
      RoundRun skewed;
      RoundRun marginal;
    };
    std::map<int32_t, BlockRuns> blocks;
    // Monotonic time of the last plan the planner pushed that moved units (UnitsMoved;
    // not a hold's), while that ownership is in force (a hold's move clears it), and the
    // straggler it was for (-1: none, the group calm).
    std::optional<absl::Duration> moved_units_at;
    int32_t moved_for = -1;
    // Per rank, when such a move last took units from it.
    std::map<int32_t, absl::Duration> relieved_at;
    // The straggler the last Judge named (Verdict::straggler).
    int32_t judged_straggler = -1;
    // The blips that ended within the memory, in the order they ended, less those a later
    // one dominates (lasted as long and peaked as high: it outlives them in the memory and
    // answers every question they would). At most one per report period of the memory.
    std::vector<Blip> blips;
    std::optional<absl::Duration> operator_at;  // the last OperatorChanged
  };
  // The group's runs, fresh for a new incarnation.
  GroupRuns& RunsOf(const GroupRef& ref) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Units moved: every straggling run still open was acted on (RankRun::acted_on).
  static void ActOnOpenRuns(GroupRuns& runs);
  // BlipToOutlast over `runs` at `now`, the threshold applied (0 peak: any blip).
  std::optional<Blip> BlipToOutlastAt(const GroupRuns& runs, absl::Duration now,
                                      double peak_slowdown, double threshold) const;

  Clock* const clock_;
  const absl::Duration marginal_straggler_for_;
  const absl::Duration known_kind_min_;
  const absl::Duration known_kind_max_;
  const absl::Duration blip_memory_;
  mutable absl::Mutex mu_;
  std::map<GroupKey, GroupRuns> groups_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ballast::coordinator

#endif  // BALLAST_COORDINATOR_STRAGGLER_JUDGE_H_
