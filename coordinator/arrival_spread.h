// The arrival spread of a rank throttled whole: how far its arrival at the group's
// collectives scatters around its mean, and the wait that costs the group near the
// balanced split.
//
// Why. Under a CPU quota a rank runs at full speed until its share of a period is spent,
// then not at all: balanced on average, it still reaches some collectives late (and its
// peers wait there) and others early (and it waits). The step is the expected maximum of
// the ranks' arrivals, not the maximum of their means. On the ViT under a 2x quota, at 30%
// of the units to the straggler (its mean about the others'), the reference rank spent
// 0.025-0.028 s a step in collectives at reshard 0.4 against 0.017 s calm, and the
// straggler 0.049-0.053 s against the 0.038 s they cost it straggling; `--throttled_price=floor`
// priced the mean alone and predicted those steps 5-7% short. At 25% (the straggler early by about
// 0.04 s) the others waited nothing beyond calm (docs/benchmarks.md, 2026-12-04 (g)).
//
// The model. The straggler's lateness D at a step's collectives (its arrival less the
// others') is normal with mean `lead` and standard deviation `spread`. The others wait
// E[max(D, 0)], the straggler E[max(-D, 0)]; beyond the waiting for the mean (max(lead,
// 0), or its negative for the straggler) each side waits
//
//   SpreadWait(spread, lead) = spread * g(|lead| / spread),  g(x) = phi(x) - x (1 - Phi(x))
//
// (phi, Phi: the standard normal density and distribution): 0.399 spread at the balanced
// split, falling fast as either side leads (g(1) = 0.083, g(2) = 0.0085). The step is the
// slower side's mean plus that wait.
//
// The fit. Under a plan that ran, each side's wait is what its collectives measured beyond
// their own cost: the others' beyond the calm cost, the straggler's beyond its straggling
// floor (straggler_kind.h). Then lead = others_wait - throttled_wait and
// min(others_wait, throttled_wait) = SpreadWait(spread, lead), which fixes the spread.
// Only a plan near the balanced split tells it: far from it the earlier side's wait is
// ~0 whatever the spread (plain TP's others wait the whole lead, the straggler nothing),
// and the noise in a small wait would set it (a wait measured beyond a floor that is
// itself a median moves by some percent of that floor). So a fit is taken only where the
// smaller wait is at least g(1/2) = 0.198 times the lead, i.e. the sides were within half
// a spread of each other: at one spread a throttled rank's 12 ms of noise beside a lead of
// 0.115 s fitted a spread of 0.125 s, four times the ViT's. (The two-sided fit and a fit
// of the step's excess over the slower mean agree: in lockstep they are the same
// equation.)
//
//   if (std::optional<double> s = FitArrivalSpread(0.0105, 0.0150)) ...  // s ~ 0.032
//   double wait = SpreadWait(0.032, /*lead=*/-0.004);                     // ~ 0.011 s
#ifndef BALLAST_COORDINATOR_ARRIVAL_SPREAD_H_
#define BALLAST_COORDINATOR_ARRIVAL_SPREAD_H_

#include <optional>

namespace ballast::coordinator {

// Each side's wait beyond the mean lateness `lead` (seconds a step, either sign), for an
// arrival spread of `spread` seconds: spread * g(|lead| / spread). 0 for a spread <= 0 or
// an input that is not finite.
double SpreadWait(double spread, double lead);

// The spread that explains the waits a plan measured: `others_wait`, the others' (the
// least over them) collective seconds a step beyond their calm cost, and
// `throttled_wait`, the throttled rank's beyond its straggling floor (a negative wait is
// taken as none). None where they do not tell it: an input not finite, no wait on one
// side, or the smaller wait under g(1/2) times the lead (the sides more than half a
// spread apart: see "The fit").
std::optional<double> FitArrivalSpread(double others_wait, double throttled_wait);

}  // namespace ballast::coordinator

#endif  // BALLAST_COORDINATOR_ARRIVAL_SPREAD_H_
