// The fixed part of each rank's affine step cost (fixed + per unit): the seconds of a step
// that a rank spends whatever it computes, which the planner balances together with the
// units (PlannerRank::fixed_seconds).
//
// Why. The planner balanced block compute only. Under contention the slow rank's
// collectives run slower too (a rank under a CPU quota waits for its share at every
// wake-up): in the e2e benchmark a 2x straggler spent 97 ms a step in collectives against
// its peer's 43 ms calm, though it arrived last at every all-reduce. Balancing compute left
// the fast rank waiting that difference at every all-reduce; balancing compute plus the
// unmovable part gives the straggler fewer units.
//
// What is measured. Each rank reports its collective seconds (waits included) and the
// pooled slowdown of its compute (rank_speeds.h). A rank's collective time is its own
// cost plus its wait for the last peer; the rank that arrives last waits for nobody. So
// the rank with the least collective time per unit of slowdown is taken as the one
// measured without waits, and every other rank's own cost as that rank's scaled by the
// ratio of their slowdowns, never more than the rank's own measurement:
//
//   base = min_q W_q / s_q,   fixed_r = min(W_r, s_r * base)
//
// The assumption is that what slows a rank's compute slows its share of the collectives
// alike, as a CPU co-tenant, a CPU quota or a GPU co-tenant's kernels do. A rank that is
// slower only in its compute (an older GPU on the same links) would be given a fixed cost
// it does not have, at most its own measured collective time, and once it then arrives
// first its own waits confirm the estimate. So by default (`--fixed_costs=auto`) the term
// is given only for a straggler whose collectives were measured slower than the group's
// calm ones (straggler_kind.h): on the small GPT under a 2x CPU quota it made auto 1.22x
// faster than plain TP where compute alone made it 1.04x, and under a 2x slower device it
// resharded too far (docs/benchmarks.md, 2026-12-02 (late)). `on` gives it for every
// straggler, `off` never. Measuring each rank's waits in its collectives would drop the
// assumption (docs/architecture.md, "Not done yet").
//
// A rank measured throttled whole (a CPU quota, a co-tenant: straggler_kind.h) has its
// collectives slowed with it, and its compute timers see a fraction of that. How it is
// priced is the coordinator's --throttled_price (ThrottledPrice below, applied by
// DecisionLoop::PriceThrottled):
//   - timers: as any rank, by the formula above.
//   - step: slowed in everything it does by s_r, its step over the calm one on the same
//     split. Its units are priced at s_r, so its collectives are too: fixed_r = s_r * K,
//     with K the collectives' calm cost that s_r was measured against
//     (StragglerKind::CalmCollectives), which is also the base for the others. Not its
//     measured W_r on top, which s_r already holds; nor capped by W_r: relieved of units,
//     its price is held as its slowdown is (straggler_kind.h), or the split would swing.
//     On the small GPT under a 2x quota this split as the best static plan does, but
//     predicted plain TP's step 12% long: the reference rank's own compute slows 1.3x
//     beside the quota straggler, and s_r, taken against the calm step, multiplies that
//     (docs/benchmarks.md, 2026-12-04 (e)).
//   - floor: its units at its timers' slowdown, its collectives at what they cost it
//     straggling on the calm split (StragglerKind::StragglingFloor: fixed_r = F_r), held
//     while its verdict stands, the base for the others K as above. Its collectives cost
//     it about as much in every plan however few units it keeps (0.21-0.24 s a step
//     there), so neither its measurement under another plan nor its slowdown times K
//     prices them better (docs/benchmarks.md, 2026-12-04 (e) and (f)). Its arrival
//     spread, where fitted, goes to the step prediction (arrival_spread.h).
//
// The planner is given each rank's excess over the least (`FixedCosts::excess`): only
// differences move units, and the common part stays in the step prediction as the
// collectives' own cost. Per block, a rank's excess is split by the block's share of the
// group's reference compute time, so every block sees the same ratios between ranks, as
// the pooled speeds do.
#ifndef BALLAST_COORDINATOR_FIXED_COSTS_H_
#define BALLAST_COORDINATOR_FIXED_COSTS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ballast::coordinator {

// Where the coordinator balances fixed costs (--fixed_costs).
enum class FixedCostsMode {
  kOff,   // never: block compute alone
  kAuto,  // for a straggler whose collectives were measured slower with it (straggler_kind.h)
  kOn,    // always, as estimated below
};
// "off", "auto", "on", in any case, and what the flag took when it was a bool ("true",
// "false", "1", "0", "yes", "no"...); INVALID_ARGUMENT naming the accepted values
// otherwise. (The bare `--fixed_costs` and `--nofixed_costs` of the bool are gone.)
absl::StatusOr<FixedCostsMode> ParseFixedCostsMode(absl::string_view text);

struct FixedCosts {
  // Per rank (indexed as the inputs): fixed seconds a step beyond the least, >= 0; 0 for a
  // rank without a measurement.
  std::vector<double> excess;
  // The least fixed seconds a step over the ranks measured: what every rank spends in
  // collectives at least (0 when none was measured).
  double common = 0;
  // Whether any rank was measured (a collective time and a slowdown, both > 0).
  bool measured = false;
};

// How a rank measured throttled whole is priced (--throttled_price; above).
enum class ThrottledPrice {
  kTimers,  // at its compute timers' slowdown, as any rank
  kStep,    // everything it does at the slowdown its step measured
  kFloor,   // its units by its timers, its collectives at their straggling floor
};
// "timers", "step", "floor", in any case; INVALID_ARGUMENT naming the accepted values
// otherwise.
absl::StatusOr<ThrottledPrice> ParseThrottledPrice(absl::string_view text);

// The ranks priced as throttled (above), and what their collectives are priced at. Applies
// where some rank is priced and `calm_collective_seconds` > 0.
struct ThrottledPriced {
  std::vector<bool> ranks;  // indexed as the inputs; empty: none
  // K above: the others' base, and a rank's in `ranks` without a straggling floor.
  double calm_collective_seconds = 0;
  // Per rank (indexed as the inputs; empty: none), its collectives' straggling floor F_r
  // where it is priced by it (floor above; relieved of units, the share of it they cost it
  // relieved: straggler_kind.h, "Relieved"), 0 where it is priced at s_r * K (step); read
  // only for a rank in `ranks`.
  std::vector<double> straggling_floors;
};

// `collective_seconds[r]`: rank r's median collective seconds a step, waits included (0 or
// less: not measured); `slowdowns[r]`: its pooled compute slowdown (0: not judged), its
// step's for a rank in `throttled` priced by its step. Vectors of one size
// (`throttled`'s may be empty).
// INVALID_ARGUMENT for sizes that differ or a value that is not finite (the coordinator
// validates every report, so only a bug gets there).
absl::StatusOr<FixedCosts> EstimateFixedCosts(const std::vector<double>& collective_seconds,
                                              const std::vector<double>& slowdowns,
                                              const ThrottledPriced& throttled = {});

// "fixed seconds a step beyond 0.0431 s of collectives (balanced with the units): 0 +0
// 1 +0.0512", for explanations.
std::string DescribeFixedCosts(const FixedCosts& costs);

}  // namespace ballast::coordinator

#endif  // BALLAST_COORDINATOR_FIXED_COSTS_H_
