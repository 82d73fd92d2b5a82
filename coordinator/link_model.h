// What the coordinator learns of the links between a group's ranks from the offload
// transfers they report (BlockTiming.received: bytes a rank received from one peer in a
// step and the seconds it took), so an offload is priced at the link's measured speed and
// --link_bytes_per_second is only the prior used before anything was measured.
//
// The workers start a sampled transfer together, behind a barrier (block.cc:
// OffloadExchange). What is left in its seconds, one side leaving the barrier late or being
// descheduled, can only make a link look slower; the transfer's fixed latency a link pays
// on every offload too. So the estimate of a pair is a low quantile of its recent seconds
// per byte: robust to those delays, not the single luckiest sample. The group is priced
// at its slowest learned pair (the planner has one transfer cost per block, not one per
// pair).
#ifndef BALLAST_COORDINATOR_LINK_MODEL_H_
#define BALLAST_COORDINATOR_LINK_MODEL_H_

#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
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

  struct Estimate {
    double bytes_per_second = 0;
    RankId a, b;  // the pair, a < b
    int32_t samples = 0;
  };

  // `receiver` got `bytes` from `sender` in `seconds`. INVALID_ARGUMENT naming the value
  // for a rank pair that is not two distinct ranks >= 0, bytes <= 0, or seconds not finite
  // and > 0; RESOURCE_EXHAUSTED for a new pair beyond kMaxPairs; nothing is recorded then.
  absl::Status Add(RankId receiver, RankId sender, int64_t bytes, double seconds);

  // The slowest learned pair; nullopt while no pair has kMinSamples samples.
  std::optional<Estimate> Slowest() const;

  // Drops every pair with `rank` (it moved to another device or node).
  void ForgetRank(RankId rank);

 private:
  struct Pair {
    std::vector<double> seconds_per_byte;  // at most kWindow
    size_t next = 0;
  };
  std::map<std::pair<int32_t, int32_t>, Pair> pairs_;  // (lower rank, higher rank)
};

}  // namespace ballast::coordinator

#endif  // BALLAST_COORDINATOR_LINK_MODEL_H_
