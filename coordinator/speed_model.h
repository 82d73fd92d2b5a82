// The coordinator's speed model (design brief section 4): turns the compute timings that
// workers report (time in kernels, collective waits excluded) into each rank's seconds per
// unit of work, robust to one-off stalls, and classifies the stragglers of a TP group.
//
//   BALLAST_ASSIGN_OR_RETURN(auto model, SpeedModel::Create(SpeedModelOptions{}, clock));
//   // From many gRPC threads, one report per step, rank and block:
//   BALLAST_RETURN_IF_ERROR(model->Report(
//       SpeedKey{"vit", GroupId("vit/tp0"), RankId(1), BlockId(0)},
//       /*compute_seconds=*/0.012, /*units_computed=*/8, /*step=*/41, clock->Now()));
//   // From the planner, each planning tick:
//   BALLAST_ASSIGN_OR_RETURN(GroupSpeeds g,
//                            model->Speeds("vit", GroupId("vit/tp0"), BlockId(0), policy));
//   for (const RankSpeed& r : g.ranks)
//     if (r.state == StragglerState::kChronic) ...  // reshard rather than offload
//
// Per (job, group, rank, block) the model keeps a window of the last `window` per-unit
// samples; the estimate is their median. A new sample farther than `outlier_k` MADs from
// the window's median is an outlier: counted and left out. If `persist_samples` outliers
// in a row lie on the same side, the speed really changed and the window restarts from
// them, so a throttled (or recovered) rank is adopted within a few steps while a single
// stall never moves the estimate. Beside the window, the last block times at each of the
// last few unit counts a rank ran give the fixed part of its block time (unit_count_fit.h);
// a speed change at an unchanged count clears them.
#ifndef BALLAST_COORDINATOR_SPEED_MODEL_H_
#define BALLAST_COORDINATOR_SPEED_MODEL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "ballast/types.h"
#include "common/clock.h"
#include "coordinator/policy.h"
#include "coordinator/unit_count_fit.h"

namespace ballast::coordinator {

// Identifies one stream of timings: one rank's share of one TP block.
struct SpeedKey {
  std::string job;
  GroupId group;
  RankId rank;
  BlockId block;
};

struct SpeedModelOptions {
  // Samples per key behind the estimate (W).
  int window = 16;
  // A sample is an outlier when |sample - median| > outlier_k * MAD of the window.
  double outlier_k = 5.0;
  // MAD floor as a fraction of the median: a very steady rank (MAD near 0) would
  // otherwise call every ordinary jitter an outlier. 2% with k = 5 gives a +-10% band.
  double mad_floor_fraction = 0.02;
  // Outliers in a row, on the same side, after which the window restarts from them (M).
  int persist_samples = 3;
  // Outlier tests start once the window holds this many samples; below it the median of
  // too few samples says nothing about the spread.
  int min_samples_for_outliers = 3;
  // A key with no report for longer is stale: shown, but not part of its group's reference
  // and never judged a straggler.
  absl::Duration stale_after = absl::Seconds(10);
  // Sweep() drops keys with no report for longer.
  absl::Duration forget_after = absl::Minutes(5);
  // A bound on memory whatever the reporters send: reports that would create a key beyond
  // it are refused with RESOURCE_EXHAUSTED.
  int64_t max_keys = 1 << 20;
};

// OK, or INVALID_ARGUMENT naming the first bad field.
absl::Status ValidateSpeedModelOptions(const SpeedModelOptions& options);

enum class StragglerState {
  kNormal,     // not slower than the group's reference by more than the threshold
  kTransient,  // straggling, for less than `chronic_after` so far
  kChronic,    // straggling continuously for at least `chronic_after`
};

absl::string_view StragglerStateName(StragglerState state);  // "normal", ...

struct RankSpeed {
  RankId rank;
  // Median of the window; meaningful only when has_estimate (some report had units > 0).
  double seconds_per_unit = 0;
  bool has_estimate = false;
  // The rank's block time as fixed seconds plus seconds per unit, fitted over the unit
  // counts it ran (unit_count_fit.h); none while it ran one count, or the times scale with
  // the units. Only with an estimate. The straggler verdicts keep to seconds_per_unit.
  std::optional<AffineTime> affine;
  // Samples behind the estimate now (<= window).
  int32_t window_samples = 0;
  // Reports with units > 0 received, and how many of them were outliers on arrival (a
  // speed change adopted after M outliers counts its M samples here too).
  int64_t samples = 0;
  int64_t outliers = 0;
  // Times the window restarted from persistent outliers (a speed change adopted).
  int64_t speed_changes = 0;
  int64_t last_step = -1;
  // `at_time` of the last accepted report, as the reporter gave it (for operators).
  absl::Time last_report_time = absl::InfinitePast();
  bool stale = false;
  // seconds_per_unit / the group's reference; 0 when either is unknown.
  double slowdown = 0;
  StragglerState state = StragglerState::kNormal;
  // How long the rank has straggled without interruption (zero when kNormal).
  absl::Duration straggling_for = absl::ZeroDuration();
};

struct GroupSpeeds {
  // The group's reference seconds per unit: the median estimate over its non-stale ranks
  // with an estimate (the lower middle value for an even count). 0 when none qualifies.
  double reference_seconds_per_unit = 0;
  int32_t reference_ranks = 0;
  std::vector<RankSpeed> ranks;  // sorted by rank
};

struct GroupBlock {
  GroupId group;
  BlockId block;
  friend bool operator==(const GroupBlock&, const GroupBlock&) = default;
};

struct SpeedModelCounters {
  int64_t reports = 0;        // accepted reports, units == 0 and duplicates included
  int64_t rejected = 0;       // reports refused (invalid, or over max_keys)
  int64_t duplicates = 0;     // repeats of a key's last step, ignored
  int64_t outliers = 0;       // over all keys, ever (not reduced by Remove or Sweep)
  int64_t speed_changes = 0;  // over all keys, ever
  int64_t keys = 0;           // keys held now
};

class SpeedModel {
 public:
  // `clock` must outlive the model; staleness and straggling durations use its
  // Monotonic() reading.
  static absl::StatusOr<std::unique_ptr<SpeedModel>> Create(const SpeedModelOptions& options,
                                                            Clock* clock);

  ~SpeedModel();
  SpeedModel(const SpeedModel&) = delete;
  SpeedModel& operator=(const SpeedModel&) = delete;

  // Records one step's compute time for one rank and block. INVALID_ARGUMENT naming the
  // field for an empty job or group, a negative rank, block or step, compute_seconds not
  // finite or outside [0, kMaxStepSeconds] (proto/validate.h), units_computed (units, or
  // tokens for a block whose units divide) outside [0, 2^40], or
  // an infinite at_time; RESOURCE_EXHAUSTED when a new key would exceed max_keys. A refused report
  // changes nothing. A report with units_computed == 0 only refreshes the key (it carries no
  // speed); one that repeats the key's last step is a resend and is ignored. A step lower
  // than the last is taken as a restart from a checkpoint and used.
  absl::Status Report(const SpeedKey& key, double compute_seconds, int64_t units_computed,
                      int64_t step, absl::Time at_time);

  // Every rank of one group's block, judged against the group: a rank straggles when its
  // estimate exceeds (1 + straggler_threshold) * reference. How long it has straggled is
  // measured from the first Speeds() call that saw it straggle (the planner calls this
  // each tick, so the tick is the resolution) and restarts whenever a call finds it
  // recovered. INVALID_ARGUMENT for a negative or non-finite threshold or a negative
  // chronic_after; NOT_FOUND when nothing was reported for the block.
  absl::StatusOr<GroupSpeeds> Speeds(absl::string_view job, const GroupId& group, BlockId block,
                                     double straggler_threshold, absl::Duration chronic_after);
  // The same, with the job's straggler_threshold and reshard_after.
  absl::StatusOr<GroupSpeeds> Speeds(absl::string_view job, const GroupId& group, BlockId block,
                                     const JobPolicy& policy);

  // The (group, block) pairs of a job that hold at least one key, sorted.
  std::vector<GroupBlock> ListBlocks(absl::string_view job) const;

  // Drops everything about a job; returns the number of keys dropped.
  int64_t Remove(absl::string_view job);
  // Drops everything about one group of a job; returns the number of keys dropped.
  int64_t Remove(absl::string_view job, const GroupId& group);
  // Drops keys with no report for longer than forget_after (and groups and jobs left
  // empty); returns the number of keys dropped. Call it periodically.
  int64_t Sweep();

  SpeedModelCounters counters() const;
  const SpeedModelOptions& options() const { return options_; }

 private:
  struct RankState;
  struct BlockState;
  struct JobState;

  SpeedModel(const SpeedModelOptions& options, Clock* clock);

  void AddSample(RankState& state, double seconds, int64_t units)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RecomputeWindowStats(RankState& state) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const SpeedModelOptions options_;
  Clock* const clock_;

  mutable absl::Mutex mu_;
  // job -> JobState (group -> block -> rank -> RankState). Nested so that Speeds() and
  // Remove() touch only their own part, and Report() needs no allocation for a known key.
  absl::flat_hash_map<std::string, std::unique_ptr<JobState>> jobs_ ABSL_GUARDED_BY(mu_);
  SpeedModelCounters counters_ ABSL_GUARDED_BY(mu_);
  // Scratch space for medians, sized once, so the hot path never allocates.
  std::vector<double> scratch_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ballast::coordinator

#endif  // BALLAST_COORDINATOR_SPEED_MODEL_H_
