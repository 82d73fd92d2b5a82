// What the coordinator learns of the links between a group's ranks from the offload
// transfers they report (BlockTiming.received: bytes a rank received from one peer in a
// step and the seconds it took), so an offload is priced at the link's measured speed and
// --link_bytes_per_second is only the prior used before anything was measured.
//
// The workers start a sampled transfer together, behind a barrier (block.cc:
// OffloadExchange). What is left in its seconds, one side leaving the barrier late or being
// descheduled, can only make a link look slower (Gloo writes a message only once its
// receiver has posted the receive, after its timer started); the transfer's fixed latency
// a link pays on every offload too. So the estimate of a pair is a low quantile of its
// recent seconds per byte: robust to those delays, not the single luckiest sample. The
// group is priced at its slowest learned pair (the planner has one transfer cost per
// block, not one per pair).
//
// Samples come only while the group offloads, so an estimate that prices offloading out
// would never be corrected: a pair whose newest sample is older than `stale_after` is
// priced at its fastest kept sample instead (what the link has been seen to do), so that
// the planner offloads again where that pays, and the next sample starts the pair's
// window afresh, at that price until kMinSamples new ones are in. Why: under a CPU quota a
// throttled sender is descheduled inside most of its transfers for a while (each one then
// reads 10-100x slow), and the quartile of a window of those once priced a 1 GB/s
// loopback link at 48 MB/s; the group stopped offloading and its 2x straggler went
// unbalanced for the remaining 14 minutes of the run (docs/benchmarks.md).
#ifndef BALLAST_COORDINATOR_LINK_MODEL_H_
#define BALLAST_COORDINATOR_LINK_MODEL_H_

#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "ballast/types.h"

namespace ballast::coordinator {

class LinkModel {
 public:
  // Samples kept per pair of ranks, oldest overwritten first.
  static constexpr size_t kWindow = 16;
  // A pair is learned once it has this many samples (the quantile is then the second
  // fastest, not the single luckiest).
  static constexpr size_t kMinSamples = 8;
  // Pairs held, at most (TP 64 has 2,016): a bound on what reports can make it hold.
  static constexpr size_t kMaxPairs = 4096;
  // The quantile of seconds per byte that estimates a pair (0 = fastest sample).
  static constexpr double kQuantile = 0.25;

  static constexpr absl::Duration kDefaultStaleAfter = absl::Seconds(60);

  // How a pair's speed was arrived at.
  enum class Basis {
    kLearned,     // the quartile of its window, whose newest sample is fresh
    kStale,       // its fastest kept sample: none for stale_after
    kRelearning,  // the fastest sample before it went stale, until kMinSamples new ones
  };
  struct Estimate {
    double bytes_per_second = 0;
    RankId a, b;  // the pair, a < b
    int32_t samples = 0;  // in its window now
    Basis basis = Basis::kLearned;
    absl::Duration age;  // since its newest sample
  };

  // `stale_after` > 0 (the coordinator validates its flag).
  explicit LinkModel(absl::Duration stale_after = kDefaultStaleAfter)
      : stale_after_(stale_after) {}

  // `receiver` got `bytes` from `sender` in `seconds`, reported at `now` (a monotonic
  // time). INVALID_ARGUMENT naming the value for a rank pair that is not two distinct
  // ranks >= 0, bytes <= 0, or seconds not finite and > 0; RESOURCE_EXHAUSTED for a new
  // pair beyond kMaxPairs; nothing is recorded then.
  absl::Status Add(RankId receiver, RankId sender, int64_t bytes, double seconds,
                   absl::Duration now);

  // The slowest pair at `now`; nullopt while no pair has had kMinSamples samples.
  std::optional<Estimate> Slowest(absl::Duration now) const;

  // Drops every pair with `rank` (it moved to another device or node).
  void ForgetRank(RankId rank);

  absl::Duration stale_after() const { return stale_after_; }

 private:
  struct Pair {
    std::vector<double> seconds_per_byte;  // at most kWindow
    size_t next = 0;
    absl::Duration newest_at;  // when its newest sample came
    // Relearning: the fastest seconds per byte it had seen when it went stale.
    std::optional<double> relearn_from;
  };
  std::optional<Estimate> EstimateOf(const Pair& pair, absl::Duration now) const;

  absl::Duration stale_after_;
  std::map<std::pair<int32_t, int32_t>, Pair> pairs_;  // (lower rank, higher rank)
};

// "learned", "stale" or "relearning".
const char* LinkBasisName(LinkModel::Basis basis);

}  // namespace ballast::coordinator

#endif  // BALLAST_COORDINATOR_LINK_MODEL_H_
