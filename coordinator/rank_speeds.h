// One verdict per rank of a TP group, pooled over the group's blocks: how much slower than
// the group the rank is over its whole share of the step, and whether it straggles.
//
// Why pool. The speed model estimates every (rank, block) on its own, and a short block
// either catches a co-tenant's time slice or a quota throttle or not: on the project's VM
// a calm rank's per-block estimate swings by 10% and more, so every few steps some block
// of some calm rank looked slow by more than the planner's hysteresis and a few units
// moved (the chaos run: 272 plan changes in its calm windows, only 41% of calm steps
// all-local). What matters for the step is the rank's time over all of its blocks, so the
// verdict pools them, each weighted by its time:
//
//   slowdown[r] = sum_b c[r][b] * units[b]  /  sum_b reference[b] * units[b]
//
// A group whose ranks all stay within the straggler threshold is calm, and runs
// all-local (PlannerInput::calm). Weighting by time matters: a rank under a CPU quota can
// look 2.5x slower in the block where its throttle falls and as fast as its peers in the
// others, and a median over blocks then called it calm and ended its plan every other
// planning round (the e2e benchmark's mid-run contention, first try).
//
//   std::vector<PoolBlock> blocks = ...;  // SpeedModel::Speeds and units, one per block
//   BALLAST_ASSIGN_OR_RETURN(PooledGroup g, PoolRankSpeeds(blocks, policy.straggler_threshold));
//   if (g.calm) ...
#ifndef BALLAST_COORDINATOR_RANK_SPEEDS_H_
#define BALLAST_COORDINATOR_RANK_SPEEDS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/speed_model.h"

namespace ballast::coordinator {

struct PoolBlock {
  GroupSpeeds speeds;  // ranks sorted by rank
  // The block's work a step in the units its speeds count: its units, or for a block
  // whose units divide (timed per token) its tokens. Weighs the block in the pool.
  double work = 0;
};

struct PooledRank {
  // The rank's block time at its own speeds over the same at the blocks' reference
  // speeds, over the blocks where it was judged (a fresh estimate and a reference); 0
  // when it was judged in none.
  double slowdown = 0;
  int32_t blocks_judged = 0;
  bool straggling = false;  // slowdown > 1 + straggler_threshold
  bool fast = false;        // slowdown < 1 / (1 + straggler_threshold)
};

struct PooledGroup {
  std::vector<PooledRank> ranks;  // indexed by rank, sized to the largest rank seen + 1
  // No rank straggles or is fast, and every rank was judged somewhere.
  bool calm = false;
};

// INVALID_ARGUMENT for a threshold that is negative or not finite, or a negative unit count.
absl::StatusOr<PooledGroup> PoolRankSpeeds(const std::vector<PoolBlock>& blocks,
                                           double straggler_threshold);

// Whether a straggle at `slowdown` (pooled, as above) is milder than one at `than`: slower
// by less than the straggler threshold's share of it, slowdown x (1 + threshold) < than.
// Two straggles within it are about as slow. The judge waits out only the blips not
// milder than a straggle (straggler_judge.h); the kind takes a straggle milder than its
// verdict's step windows as a drift, not its contention back (straggler_kind.h).
bool MilderStraggle(double slowdown, double than, double straggler_threshold);

// What the planner is given for a rank in a block (PlannerRank's fixed_seconds and
// seconds_per_unit), from its compute.
struct RankPrice {
  double fixed_seconds = 0;
  double seconds_per_unit = 0;
  bool fitted = false;  // the fixed part comes from the rank's AffineTime
};

// The block's reference seconds per unit times the rank's slowdown pooled over all
// blocks, rather than the rank's own estimate in this block. A rank's contention is the
// rank's, not the block's; its per-block estimates swing by 10-25% (a quota throttle falls
// in one block or another), and balancing each block on its own swung units back and
// forth, a reshard every dwell on a shaped link. Pooled, every block sees the same ratios
// between ranks, and a block's own noise scales all its ranks alike. The rank's own
// estimate is the fallback while it has been judged nowhere.
//
// With `use_fit` and a fit of the rank's block time over unit counts (RankSpeed::affine),
// that price is split as the fit splits the rank's time: the fit's fixed seconds and
// seconds per unit, both scaled by the pooled price over the rank's own estimate. At the
// units the rank runs the price is about as before (the line need not pass through that
// count's median); a unit moved is priced at what it saves.
RankPrice PriceRank(const RankSpeed& rank, const GroupSpeeds& block, const PooledGroup& pooled,
                    bool use_fit);

// A marginal straggler (every rank within 1 + kMarginalFactor x threshold of the
// reference, either way) must last `marginal_for` (a coordinator option, default 3 s)
// before a group that runs all-local starts balancing; a larger one starts it at once,
// unless the group's plans flap (then any straggler waits the flap's hold: TreatAsCalm).
// On a shared machine a calm rank is now and then 15-35% slower for one or two seconds
// (the e2e benchmark's calm run of 2026-11-25: 6 spells of 5-12 steps in 1,150 steps,
// and its 8 plan changes). Detecting one and pushing its plan takes about a second, so the
// plan arrived as the blip ended and was undone a few steps later: two plan changes and
// nothing gained. A real straggler is larger or lasts.
inline constexpr double kMarginalFactor = 3;

// A group's run of planning rounds in a row with some verdict (a marginal straggler;
// calm), kept by the caller per group, starting empty.
struct RoundRun {
  std::optional<absl::Duration> since;  // the run's first round; none: no run
  absl::Duration last_round = absl::ZeroDuration();
};

// Extends `run` by the round judged at monotonic time `now` when `holds`, else ends it; a
// gap of more than `max_gap` since the last round judged ends it first (rounds not judged
// are no evidence). Returns how long the run has lasted (zero when it does not hold).
absl::Duration ExtendRun(bool holds, absl::Duration now, absl::Duration max_gap, RoundRun& run);

// Whether `ratio` (a slowdown, or a skew: a step over its balanced ideal) is marginal:
// within 1 + kMarginalFactor x the straggler threshold of 1, either way.
bool IsMarginal(double ratio, double straggler_threshold);

// The marginal rule for a block's skewed loads (StragglerJudge::JudgeSkew; TreatAsCalm
// applies the same rule to a group's straggler, with the flaps' wait beside it): whether
// the round judged at monotonic time `now`
// waits, treated as calm, because what it saw is `marginal` and the group (or block)
// runs all-local, and that has not lasted `marginal_for` in `run`. A round that is not
// marginal, or not all-local, ends the run, and so does a gap of more than `max_gap` since
// the last round judged.
bool WaitOutMarginal(bool marginal, bool running_all_local, absl::Duration now,
                     absl::Duration marginal_for, absl::Duration max_gap, RoundRun& run);

// Whether a group that is not calm has every rank judged and within the marginal band.
bool MarginalStraggler(const PooledGroup& group, double straggler_threshold);

// A round under the waits: whether the group is treated as calm, and the wait a straggler
// seen in it must outlast (zero: none).
struct CalmVerdict {
  bool calm = false;
  absl::Duration wait = absl::ZeroDuration();
};

// The round judged at monotonic time `now`, on a group running all-local when
// `running_all_local` (its plan asks nothing of the workers: group_figures.h,
// PlanRunsAllLocal): a straggler there waits while its run in `run` is
// shorter than the wait, `marginal_for` for a marginal one and at least `flap_wait` for
// any (the wait of a group whose plans flap, plan_flaps.h: StartWait; zero otherwise). A
// round without a straggler that waits ends the run, and so does a gap of more than
// `max_gap` since the last round judged (the job was paused, or not every rank reported):
// rounds not judged are no evidence that the straggler lasted.
CalmVerdict TreatAsCalm(const PooledGroup& group, double straggler_threshold,
                        bool running_all_local, absl::Duration now, absl::Duration marginal_for,
                        absl::Duration flap_wait, absl::Duration max_gap, RoundRun& run);

// "ranks pooled over 4 blocks (straggler above 1.10x): 0 1.00x, 1 1.98x straggling", for
// explanations.
std::string DescribePooledGroup(const PooledGroup& group, int32_t num_blocks,
                                double straggler_threshold);

}  // namespace ballast::coordinator

#endif  // BALLAST_COORDINATOR_RANK_SPEEDS_H_
