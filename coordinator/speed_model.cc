#include "coordinator/speed_model.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/median.h"
#include "proto/validate.h"

namespace ballast::coordinator {
namespace {

// Units, or tokens for a block whose units divide (a mixture of experts counts every
// Forward's token rows: 64 micro-batches of 16k tokens, top-2, are 2M a step): 2^40 is
// beyond any step, and a per-unit time stays far above a double's resolution.
constexpr int64_t kMaxUnits = int64_t{1} << 40;
// Below this spread (1 ns per unit) a sample's difference from the median is timer noise;
// it keeps the outlier band open when every sample is 0.
constexpr double kMinSpreadSeconds = 1e-9;

absl::Status ValidateReport(const SpeedKey& key, double compute_seconds, int64_t units,
                            int64_t step, absl::Time at_time) {
  if (absl::Status s = ValidateName("job", key.job); !s.ok()) return s;
  if (absl::Status s = ValidateName("group", key.group.value()); !s.ok()) return s;
  if (key.rank.value() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", key.rank.value(), " negative"));
  }
  if (key.block.value() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("block ", key.block.value(), " negative"));
  }
  // Written so that NaN fails too (every comparison with NaN is false).
  if (!(compute_seconds >= 0 && compute_seconds <= kMaxStepSeconds)) {
    return absl::InvalidArgumentError(
        absl::StrCat("compute_seconds ", compute_seconds, " not in [0, ", kMaxStepSeconds, "]"));
  }
  if (units < 0 || units > kMaxUnits) {
    return absl::InvalidArgumentError(
        absl::StrCat("units_computed ", units, " not in [0, ", kMaxUnits, "]"));
  }
  if (step < 0) return absl::InvalidArgumentError(absl::StrCat("step ", step, " negative"));
  if (at_time == absl::InfinitePast() || at_time == absl::InfiniteFuture()) {
    return absl::InvalidArgumentError("at_time infinite");
  }
  return absl::OkStatus();
}

}  // namespace

struct SpeedModel::RankState {
  // Ring buffer of the last `window` accepted samples (seconds per unit); order is
  // irrelevant to the median, only the oldest must be found to evict it.
  std::vector<double> window;
  int32_t window_size = 0;
  int32_t window_next = 0;
  // The current run of consecutive outliers, all on `pending_side` (+1 slow, -1 fast).
  std::vector<double> pending;
  std::vector<int64_t> pending_units;  // each pending sample's units
  int pending_side = 0;
  // Block times per unit count, for the fixed part of the rank's block time; and the
  // units of the last sample the window took.
  UnitCountTimes count_times;
  int64_t last_units = 0;
  bool fitted = false;  // the last Speeds() found a line (kept on a lower bar)
  // Cached statistics of the window, refreshed when it changes, so that judging a sample
  // costs two comparisons.
  double median = 0;
  double mad = 0;
  int64_t samples = 0;
  int64_t outliers = 0;
  int64_t speed_changes = 0;
  int64_t last_step = -1;
  absl::Time last_report_time = absl::InfinitePast();
  absl::Duration last_report_monotonic;
  std::optional<absl::Duration> straggling_since;
};

struct SpeedModel::BlockState {
  absl::flat_hash_map<int32_t, RankState> ranks;
};

struct SpeedModel::JobState {
  absl::flat_hash_map<GroupId, absl::flat_hash_map<int32_t, BlockState>> groups;
};

absl::Status ValidateSpeedModelOptions(const SpeedModelOptions& o) {
  if (o.window < 1 || o.window > 4096) {
    return absl::InvalidArgumentError(absl::StrCat("window ", o.window, " not in [1, 4096]"));
  }
  if (!(o.outlier_k > 0) || !std::isfinite(o.outlier_k)) {
    return absl::InvalidArgumentError(
        absl::StrCat("outlier_k ", o.outlier_k, " must be finite and > 0"));
  }
  if (!(o.mad_floor_fraction >= 0 && o.mad_floor_fraction <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("mad_floor_fraction ", o.mad_floor_fraction, " not in [0, 1]"));
  }
  if (o.persist_samples < 1 || o.persist_samples > o.window) {
    return absl::InvalidArgumentError(
        absl::StrCat("persist_samples ", o.persist_samples, " not in [1, window ", o.window, "]"));
  }
  if (o.min_samples_for_outliers < 1 || o.min_samples_for_outliers > o.window) {
    return absl::InvalidArgumentError(absl::StrCat("min_samples_for_outliers ",
                                                   o.min_samples_for_outliers,
                                                   " not in [1, window ", o.window, "]"));
  }
  if (o.stale_after <= absl::ZeroDuration() || o.stale_after == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stale_after ", absl::FormatDuration(o.stale_after), " must be finite and > 0"));
  }
  if (o.forget_after < o.stale_after || o.forget_after == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("forget_after ",
                                                   absl::FormatDuration(o.forget_after),
                                                   " must be finite and >= stale_after"));
  }
  if (o.max_keys < 1) {
    return absl::InvalidArgumentError(absl::StrCat("max_keys ", o.max_keys, " must be >= 1"));
  }
  return absl::OkStatus();
}

absl::string_view StragglerStateName(StragglerState state) {
  switch (state) {
    case StragglerState::kNormal:
      return "normal";
    case StragglerState::kTransient:
      return "transient";
    case StragglerState::kChronic:
      return "chronic";
  }
  return "unknown";
}

absl::StatusOr<std::unique_ptr<SpeedModel>> SpeedModel::Create(const SpeedModelOptions& options,
                                                               Clock* clock) {
  if (clock == nullptr) return absl::InvalidArgumentError("clock null");
  if (absl::Status s = ValidateSpeedModelOptions(options); !s.ok()) return s;
  return std::unique_ptr<SpeedModel>(new SpeedModel(options, clock));
}

SpeedModel::SpeedModel(const SpeedModelOptions& options, Clock* clock)
    : options_(options), clock_(clock) {
  scratch_.resize(options_.window);
}

SpeedModel::~SpeedModel() = default;

absl::Status SpeedModel::Report(const SpeedKey& key, double compute_seconds, int64_t units_computed,
                                int64_t step, absl::Time at_time) {
  if (absl::Status s = ValidateReport(key, compute_seconds, units_computed, step, at_time);
      !s.ok()) {
    absl::MutexLock lock(&mu_);
    ++counters_.rejected;
    return s;
  }
  // Read outside the lock: the clock may be slow, and a reading a few ns early is harmless.
  const absl::Duration now = clock_->Monotonic();

  absl::MutexLock lock(&mu_);
  RankState* state = nullptr;
  // The common case, a known key, is four lookups and no allocation.
  if (auto job = jobs_.find(key.job); job != jobs_.end()) {
    if (auto group = job->second->groups.find(key.group); group != job->second->groups.end()) {
      if (auto block = group->second.find(key.block.value()); block != group->second.end()) {
        if (auto rank = block->second.ranks.find(key.rank.value());
            rank != block->second.ranks.end()) {
          state = &rank->second;
        }
      }
    }
  }
  if (state == nullptr) {
    if (counters_.keys >= options_.max_keys) {
      ++counters_.rejected;
      return absl::ResourceExhaustedError(absl::StrCat(
          "speed model holds max_keys ", options_.max_keys, " keys; refusing job ", key.job,
          " group ", key.group.value(), " rank ", key.rank.value(), " block ", key.block.value()));
    }
    std::unique_ptr<JobState>& job = jobs_[key.job];
    if (job == nullptr) job = std::make_unique<JobState>();
    state = &job->groups[key.group][key.block.value()].ranks[key.rank.value()];
    state->window.resize(options_.window);
    state->pending.reserve(options_.persist_samples);
    state->pending_units.reserve(options_.persist_samples);
    ++counters_.keys;
  }

  ++counters_.reports;
  if (step == state->last_step) {
    // An agent that lost its stream resends what it could not confirm; counting the same
    // step twice would weigh it double.
    ++counters_.duplicates;
    return absl::OkStatus();
  }
  state->last_step = step;
  state->last_report_time = at_time;
  state->last_report_monotonic = now;
  if (units_computed > 0) AddSample(*state, compute_seconds, units_computed);
  return absl::OkStatus();
}

void SpeedModel::AddSample(RankState& s, double seconds, int64_t units) {
  const double x = seconds / static_cast<double>(units);
  ++s.samples;
  int side = 0;
  if (s.window_size >= options_.min_samples_for_outliers) {
    const double spread =
        std::max({s.mad, options_.mad_floor_fraction * s.median, kMinSpreadSeconds});
    const double band = options_.outlier_k * spread;
    // Both sides: a spike is a stall, and a sudden drop is a rank that got its device back
    // (a co-tenant left); either way a run of them is a real change to adopt quickly.
    if (x > s.median + band) side = 1;
    if (x < s.median - band) side = -1;
  }
  if (side == 0) {
    s.pending.clear();
    s.pending_units.clear();
    s.pending_side = 0;
    s.count_times.Add(units, seconds);
    s.last_units = units;
    s.window[s.window_next] = x;
    s.window_next = (s.window_next + 1) % options_.window;
    s.window_size = std::min(s.window_size + 1, options_.window);
    RecomputeWindowStats(s);
    return;
  }
  ++s.outliers;
  ++counters_.outliers;
  if (side != s.pending_side) {
    s.pending.clear();
    s.pending_units.clear();
    s.pending_side = side;
  }
  s.pending.push_back(x);
  s.pending_units.push_back(units);
  if (static_cast<int>(s.pending.size()) < options_.persist_samples) return;
  // The outliers persisted: the rank's seconds per unit changed. Start over from them
  // rather than waiting for them to outvote the old samples (which would take window / 2
  // steps). At the unit count it ran before, the rank's speed changed, and the block times
  // it ran at other counts are of the old speed; at a new count, the plan changed and
  // the shift is the block's fixed part, which is what the count table is for.
  const bool same_count = std::all_of(s.pending_units.begin(), s.pending_units.end(),
                                      [&](int64_t u) { return u == s.last_units; });
  if (same_count) s.count_times.Clear();
  for (size_t i = 0; i < s.pending.size(); ++i) {
    s.count_times.Add(s.pending_units[i], s.pending[i] * static_cast<double>(s.pending_units[i]));
  }
  s.last_units = s.pending_units.back();
  s.pending_units.clear();
  std::copy(s.pending.begin(), s.pending.end(), s.window.begin());
  s.window_size = static_cast<int32_t>(s.pending.size());
  s.window_next = s.window_size % options_.window;
  s.pending.clear();
  s.pending_side = 0;
  ++s.speed_changes;
  ++counters_.speed_changes;
  RecomputeWindowStats(s);
}

void SpeedModel::RecomputeWindowStats(RankState& s) {
  const int n = s.window_size;
  double* v = scratch_.data();
  std::copy(s.window.begin(), s.window.begin() + n, v);
  s.median = MedianInPlace(v, n);
  for (int i = 0; i < n; ++i) v[i] = std::abs(v[i] - s.median);
  s.mad = MedianInPlace(v, n);
}

absl::StatusOr<GroupSpeeds> SpeedModel::Speeds(absl::string_view job, const GroupId& group,
                                               BlockId block, const JobPolicy& policy) {
  return Speeds(job, group, block, policy.straggler_threshold, policy.reshard_after);
}

absl::StatusOr<GroupSpeeds> SpeedModel::Speeds(absl::string_view job, const GroupId& group,
                                               BlockId block, double straggler_threshold,
                                               absl::Duration chronic_after) {
  if (!(straggler_threshold >= 0) || !std::isfinite(straggler_threshold)) {
    return absl::InvalidArgumentError(
        absl::StrCat("straggler_threshold ", straggler_threshold, " must be finite and >= 0"));
  }
  if (chronic_after < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("chronic_after ", absl::FormatDuration(chronic_after), " negative"));
  }
  const absl::Duration now = clock_->Monotonic();

  absl::MutexLock lock(&mu_);
  BlockState* state = nullptr;
  if (auto j = jobs_.find(job); j != jobs_.end()) {
    if (auto g = j->second->groups.find(group); g != j->second->groups.end()) {
      if (auto b = g->second.find(block.value()); b != g->second.end()) state = &b->second;
    }
  }
  if (state == nullptr) {
    return absl::NotFoundError(absl::StrCat("no speed reports for job ", job, " group ",
                                            group.value(), " block ", block.value()));
  }

  GroupSpeeds out;
  out.ranks.reserve(state->ranks.size());
  std::vector<double> live;
  live.reserve(state->ranks.size());
  for (auto& [rank, s] : state->ranks) {
    RankSpeed& r = out.ranks.emplace_back();
    r.rank = RankId(rank);
    r.has_estimate = s.window_size > 0;
    r.seconds_per_unit = r.has_estimate ? s.median : 0;
    if (r.has_estimate) r.affine = s.count_times.Fit(s.fitted);
    s.fitted = r.affine.has_value();
    r.window_samples = s.window_size;
    r.samples = s.samples;
    r.outliers = s.outliers;
    r.speed_changes = s.speed_changes;
    r.last_step = s.last_step;
    r.last_report_time = s.last_report_time;
    r.stale = now - s.last_report_monotonic > options_.stale_after;
    if (r.has_estimate && !r.stale) live.push_back(r.seconds_per_unit);
  }
  std::sort(out.ranks.begin(), out.ranks.end(),
            [](const RankSpeed& a, const RankSpeed& b) { return a.rank < b.rank; });
  if (!live.empty()) {
    // The lower middle value for an even count: in a TP=2 group the slow rank is then
    // measured against its fast peer, where the mean of the two would hide half the gap.
    std::sort(live.begin(), live.end());
    out.reference_seconds_per_unit = live[(live.size() - 1) / 2];
    out.reference_ranks = static_cast<int32_t>(live.size());
  }
  const double limit = (1 + straggler_threshold) * out.reference_seconds_per_unit;
  for (RankSpeed& r : out.ranks) {
    RankState& s = state->ranks.find(r.rank.value())->second;
    const bool judged = r.has_estimate && !r.stale && out.reference_ranks > 0;
    if (judged && out.reference_seconds_per_unit > 0) {
      r.slowdown = r.seconds_per_unit / out.reference_seconds_per_unit;
    }
    if (!judged || !(r.seconds_per_unit > limit)) {
      s.straggling_since.reset();
      continue;
    }
    if (!s.straggling_since.has_value()) s.straggling_since = now;
    r.straggling_for = now - *s.straggling_since;
    r.state =
        r.straggling_for >= chronic_after ? StragglerState::kChronic : StragglerState::kTransient;
  }
  return out;
}

std::vector<GroupBlock> SpeedModel::ListBlocks(absl::string_view job) const {
  std::vector<GroupBlock> out;
  absl::MutexLock lock(&mu_);
  auto j = jobs_.find(job);
  if (j == jobs_.end()) return out;
  for (const auto& [group, blocks] : j->second->groups) {
    for (const auto& [block, state] : blocks) out.push_back({group, BlockId(block)});
  }
  std::sort(out.begin(), out.end(), [](const GroupBlock& a, const GroupBlock& b) {
    return std::tie(a.group, a.block) < std::tie(b.group, b.block);
  });
  return out;
}

int64_t SpeedModel::Remove(absl::string_view job) {
  absl::MutexLock lock(&mu_);
  auto j = jobs_.find(job);
  if (j == jobs_.end()) return 0;
  int64_t dropped = 0;
  for (const auto& [group, blocks] : j->second->groups) {
    for (const auto& [block, state] : blocks) dropped += state.ranks.size();
  }
  jobs_.erase(j);
  counters_.keys -= dropped;
  return dropped;
}

int64_t SpeedModel::Remove(absl::string_view job, const GroupId& group) {
  absl::MutexLock lock(&mu_);
  auto j = jobs_.find(job);
  if (j == jobs_.end()) return 0;
  auto g = j->second->groups.find(group);
  if (g == j->second->groups.end()) return 0;
  int64_t dropped = 0;
  for (const auto& [block, state] : g->second) dropped += state.ranks.size();
  j->second->groups.erase(g);
  if (j->second->groups.empty()) jobs_.erase(j);
  counters_.keys -= dropped;
  return dropped;
}

int64_t SpeedModel::Sweep() {
  const absl::Duration now = clock_->Monotonic();
  absl::MutexLock lock(&mu_);
  int64_t dropped = 0;
  // erase(it++) is the idiom absl's flat_hash_map supports for erasing while iterating.
  for (auto j = jobs_.begin(); j != jobs_.end();) {
    auto& groups = j->second->groups;
    for (auto g = groups.begin(); g != groups.end();) {
      for (auto b = g->second.begin(); b != g->second.end();) {
        auto& ranks = b->second.ranks;
        for (auto r = ranks.begin(); r != ranks.end();) {
          if (now - r->second.last_report_monotonic > options_.forget_after) {
            ranks.erase(r++);
            ++dropped;
          } else {
            ++r;
          }
        }
        if (ranks.empty()) {
          g->second.erase(b++);
        } else {
          ++b;
        }
      }
      if (g->second.empty()) {
        groups.erase(g++);
      } else {
        ++g;
      }
    }
    if (groups.empty()) {
      jobs_.erase(j++);
    } else {
      ++j;
    }
  }
  counters_.keys -= dropped;
  return dropped;
}

SpeedModelCounters SpeedModel::counters() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

}  // namespace ballast::coordinator
