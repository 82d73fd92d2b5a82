// A rank's block time as a fixed part plus a part per unit, fitted over the unit counts
// the rank ran: time(n) = fixed + per_unit x n.
//
// Why. The speed model's estimate is the block's seconds over its units, as if every
// second of a block scaled with the units computed. A block also has a part that does not:
// its input and output handling, norms, kernel launches, the per-call overhead of each
// matrix product, and smaller products run less efficiently. Seconds over units then rise
// as a rank computes fewer, and the planner, reading a slower rank, offloads more. The
// ViT's 3x device straggler (docs/benchmarks.md, 2026-12-02) computed 7.4 ms a unit at 21
// units and 9.9 ms at 9: offloading more read as slowing it down, and the plan spiralled to
// a reshard of 81/9 (179 ms a step) where 75/15 ran 155 ms. Fitting a fixed part per
// (rank, block) lets the planner price a unit moved at what it really saves.
//
// How. Per unit count (the last kMaxCounts distinct counts a rank ran, which plans that
// offload or reshard vary anyway) the last kSamplesPerCount block times; a count not run
// for kMaxAge samples is dropped, so times of a speed long gone do not linger. The fit is
// the least-squares line through each count's median, once at least two counts have
// kMinSamples samples and the largest is at least kMinSpan x the smallest (counts close
// together put the line's slope in the noise). It is no fit, and the time scales with the
// units as far as anyone can tell, unless both its slope and its fixed part exceed
// kSignificance standard errors (propagated from each count's median, whose error comes
// from its samples' spread; kKeepSignificance for a line the caller already uses, so a
// fit near the bar does not come and go from round to round, each time moving what a unit
// is priced at), and the fixed part is between kMinFixedShare and kMaxFixedShare of the
// time at the fewest units. Why so strict: a wrong fixed part is worse than none. The
// first version, without the errors and the upper bound, fitted the ViT's device
// straggler on times a VM slowdown had disturbed, read most of its block time as fixed,
// and offloaded 83 of 90 units to its peer (199 ms a step, against 165 ms for the plan
// the per-unit model chose in the run beside it).
// The owner (SpeedModel) clears the table when the rank's speed changes at a count it
// keeps running. The line is used beyond the counts it was fitted on (the planner prices
// any count); the bounds on its fixed part hold only between them.
//
//   UnitCountTimes t;
//   t.Add(21, 0.156); ... t.Add(9, 0.089); ...
//   if (std::optional<AffineTime> f = t.Fit()) ... f->fixed_seconds, f->seconds_per_unit
#ifndef BALLAST_COORDINATOR_UNIT_COUNT_FIT_H_
#define BALLAST_COORDINATOR_UNIT_COUNT_FIT_H_

#include <array>
#include <cstdint>
#include <optional>

namespace ballast::coordinator {

struct AffineTime {
  double fixed_seconds = 0;     // > 0
  double seconds_per_unit = 0;  // > 0: what one unit more or less changes
  int32_t counts = 0;           // the unit counts the line was fitted through (>= 2)
  int64_t fewest_units = 0;     // the smallest and largest of them
  int64_t most_units = 0;
};

class UnitCountTimes {
 public:
  static constexpr int kMaxCounts = 4;
  static constexpr int kSamplesPerCount = 5;
  static constexpr int kMinSamples = kSamplesPerCount;
  static constexpr int64_t kMaxAge = 1000;  // samples since a count last ran, at most
  static constexpr double kMinSpan = 1.25;
  static constexpr double kMinFixedShare = 0.05;
  static constexpr double kMaxFixedShare = 0.5;
  static constexpr double kSignificance = 3;
  static constexpr double kKeepSignificance = 2;
  // Each count's median is taken as at least this uncertain (relative standard deviation).
  static constexpr double kNoiseFloor = 0.01;

  // One block time at `units` (> 0; others are ignored). A count not held yet replaces
  // the one used least recently when the table is full.
  void Add(int64_t units, double seconds);
  void Clear();
  // The line through the counts' medians, or none (above); `in_use`: the caller uses the
  // line it got last time, which then needs only kKeepSignificance.
  std::optional<AffineTime> Fit(bool in_use = false) const;

 private:
  struct Count {
    int64_t units = 0;  // 0: free
    int64_t last_use = 0;
    // Seconds, as floats: the table sits beside every (rank, block) key of the speed
    // model, and a timer's noise is far above a float's 1e-7.
    std::array<float, kSamplesPerCount> seconds{};
    int8_t size = 0;
    int8_t next = 0;
  };
  std::array<Count, kMaxCounts> counts_{};
  int64_t uses_ = 0;
};

}  // namespace ballast::coordinator

#endif  // BALLAST_COORDINATOR_UNIT_COUNT_FIT_H_
