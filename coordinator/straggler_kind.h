// StragglerKind: whether a straggler's collectives slow with it, measured, so that fixed
// costs (fixed_costs.h) are balanced where they exist and only there.
//
// Why. A rank throttled whole (a CPU quota, a co-tenant) is slow in its collectives too,
// and balancing its compute alone leaves its peers waiting that difference at every
// all-reduce: on the small GPT under a 2x quota the coordinator gained 1.04x over plain
// TP without fixed costs and 1.22x with them (docs/benchmarks.md, 2026-12-02 (late)). A
// rank slow only in its compute (an older GPU on the same links) has no such cost, and
// fixed costs inferred for it (fixed_costs.h assumes its collectives slow with its
// compute) reshard it too far: the GPT's 2x device straggler kept 19-25% of its units
// where the best static plan keeps 33%. A step's totals cannot tell the two apart (in
// lockstep every rank's compute plus collectives is the step); the group's collectives
// before the straggler can. The rank that arrives last at a collective waits for nobody,
// so the least collective time over the ranks is what the collectives themselves cost (the
// "floor"). A slower device leaves the floor as it was; a throttled rank raises it (in
// the e2e benchmark's 2x quota, 97 ms a step against 43 ms calm).
//
// How, per group:
//   - calm floor: in a round the compute timers judge calm, once every rank has run
//     `min_steps` steps under a plan without offloads (an offload's transfers are timed as
//     collectives), all since the group turned calm: the floor, kept as the group's;
//     but not one `min_ratio` times a fresh calm floor or more, which is a straggler's
//     the timers call calm: under a 2x quota the small GPT's timers put its straggler at
//     1.1-1.25x, some rounds judged it calm, and a "calm" floor of 0.16 s taken under
//     plain TP (0.06 s calm) had the quota judged a slower device for a whole run
//     (docs/benchmarks.md, 2026-12-04);
//   - straggling floor: the same for the straggler (the rank the timers judge it), the
//     first time such a plan has run `min_steps` steps while it straggled (through calm
//     spells shorter than that: a quota's straggler flickers calm) and computed
//     at least the units it computed when the calm floor was measured: before balancing
//     starts, plain TP held by an operator, or the offload check's probe
//     (offload_check.h). Fewer units relieve a throttled rank's collectives too (it idles
//     more, and waits less for its CPU share): under a 2x quota held at half its units
//     the GPT's straggler measured 1.25x the calm floor where at all of them 1.97-2.26x;
//   - kind: kWhole where the straggling floor is at least `min_ratio` times a calm floor
//     measured within `calm_fresh` before, else kCompute. The verdict stands while the
//     straggler lasts: once balanced, a throttled rank idles more and its collectives
//     speed up, and judging it again would take its fixed cost away and give it its units
//     back. It stands through calm rounds too (until a recheck, below). Its rank's absence
//     of kAbsentFor ends it: rounds in which that rank is not the straggler, whether the
//     group is calm or a peer straggles, counted only while it computes and owns its calm
//     units (relieved of some, a throttled rank can look calm while it is not). Counted
//     over the group's calm alone, the injected straggler's segments reset it so often in
//     the interleaved benchmark that a peer judged once from the VM's drift kept that
//     verdict for the whole run, and every later drift of it was chronic at once and
//     resharded (docs/benchmarks.md, 2026-12-06 (j)). Another straggler is judged on its
//     own (each verdict kept by rank, so two stragglers that take turns within kAbsentFor
//     keep theirs). The calm floor is not measured while a verdict stands, for the same
//     reason.
//   - throttled later: a kCompute verdict turns kWhole where, a window after it, the group
//     runs the calm split (no offloads) and its floor is kThrottledLaterRatio times a fresh
//     calm floor or more: a slower rank throttled later, whose straggle never paused for a
//     calm window. On this VM rank 1 of the small GPT timed 1.13-1.26x its peer with no
//     contention at all, was judged a slower device then (0.0798 s against 0.0745 s
//     calm), and kept that verdict through the 2x quota that followed (its floor on the
//     calm split 0.147-0.172 s): no fixed costs, and auto ran 1.23-1.28x the best static
//     plan (docs/benchmarks.md, 2026-12-06 (d)). Only one way and only on the calm split,
//     where the first verdict was judged: a slower device relieved of units arrives early
//     and its peers' collectives are the floor there, and a quota's floor relieved reads
//     nearer calm (see "Relieved"). Hence a higher bar than min_ratio: the first verdict
//     is one window, this one any window while the verdict stands, and VM noise alone
//     took 16-step floors of a group with no straggler to 1.67x. Its own collectives must
//     be the floor (it arrives last, as a throttled rank does there; another rank's
//     throttle raises the floor too) over a window that is all its straggle's. A recheck
//     that ends such a verdict gives the rank back as a slower device (straggling again
//     says nothing of a throttle there), to be turned again on the calm split, then
//     against the calm floor it had (none is measured meanwhile), and only then does the
//     next recheck wait longer. A peer throttled inside the collectives while the rank
//     still arrives last raises its floor too: neither verdict tells that apart. A slower
//     device that an auto plan has resharded is not seen throttled until the group runs
//     the calm split again (plain TP, an operator's hold); nor once the calm floor is
//     older than calm_fresh (none is measured while a verdict stands), and a machine
//     that slows 1.75x within that time turns a slower device throttled falsely, until a
//     recheck (each one after the first waits twice as long).
//   - recheck: relieved of units, a throttled rank whose contention ended looks as it did
//     still contended (its timers calm, its collectives slow: it arrives early and waits
//     for the ranks that took its units), so a verdict kept while relieved would keep the
//     reshard for good: the interleaved benchmark's calm segments after a resharded quota
//     straggler ran 1.33-1.45x the calm step for their whole minute (docs/benchmarks.md,
//     2026-12-05). A calm spell while relieved (computing fewer units than calm, or
//     owning fewer: helping its peers by offloads back, it computes its share again but
//     its reshard stands) ends the verdicts too, once it lasts kRecheckAfter (kAbsentFor
//     at first; through runs of rounds naming some rank a straggler shorter than
//     min_steps steps: the ViT's timers flag one for a round or two every few seconds,
//     and its spells never lasted 30 s without them), so the planner gives the units
//     back: calm, the group stays there; a rank that straggles again (for min_steps
//     steps, relieved or not) within kRecheckFailedWithin gets its verdict back, without
//     a fresh calm floor to compare with, and the next check waits twice as long (up to
//     kRecheckMax). Only kWhole verdicts are rechecked: a slower device stays slower, and
//     resharded it looks calm. The ViT's relieved quota straggler times 1.8x and is never
//     checked; the small GPT's times 1.06-1.14x, near the threshold, and one calm spell
//     of 35 s was seen (2026-12-03): the doubling bounds what such spells cost. Until the
//     recheck the coordinator gives a relieved throttled rank no work back by offloads
//     (RelievedThrottled; decision_loop.h: TakesNoOffloads): computing its peer's units
//     the ViT's timed 1.41x, and the spell restarted.
//   - kUnknown until then, and for a straggler with no calm floor to compare with (one
//     there from the job's start): the caller decides (the coordinator balances no fixed
//     costs then, as before this existed).
// A cordon measures nothing (its rank computes nothing; its collectives are no
// straggler's).
//
// Step slowdown. A rank throttled whole is slowed in all it does, and its compute timers
// see less of it than its step does: under a CPU quota it runs at full speed until its
// share of a period is spent, so most blocks time fast and the stalls land wherever the
// period ends, many in its collectives. Under the e2e benchmark's 2x quota the small
// GPT's timers put its straggler at a median 1.25x while the step under plain TP took
// 1.63x the calm one (the ViT's: 1.78x and 1.86x), and balancing by the timers left it
// 37% of the units where the best static plan leaves it 25% (docs/benchmarks.md,
// 2026-12-03). When the straggler is judged kWhole under the split it ran calm, the
// group's step is its step (it is the last to arrive), so that step over the calm one is
// its slowdown in everything it does: StepSlowdown, which the coordinator prices it at
// where its timers say less if asked (--throttled_price=step: fixed_costs.h; also in
// rounds its timers call it calm while, relieved of units, its verdict stands). Both
// steps are medians over the last kStepWindows disjoint windows of min_steps steps on
// that split, not one window each: under a quota a window's median moves by 10% or more,
// and one window (1.86x against a calm step from a fast window, where plain TP's step
// over the calm one had a median of 1.64x over 20 cycles) over-priced the GPT's quota
// straggler in every plan the planner predicted (docs/benchmarks.md, 2026-12-04 (b)).
// The straggler's windows are taken at its verdict and whenever it runs the calm split
// again (an operator's hold, a plan taken back), the calm ones in calm rounds on that
// split, also while its verdict stands: the calm step moves with the machine (the GPT's
// went from 0.139 s in the job's first minute to 0.16-0.20 s, its floor from 0.050 to
// 0.075-0.100 s), and a calm step from a fast minute over-prices the straggler for as
// long as its verdict stands. While it stands, a calm window is one whose floor lies
// nearer the calm windows' (median) than the straggler's, by ratio: a quota straggler
// the timers call calm raises the floor 2x or more (0.17-0.20 s there), the machine's
// drift less. Never on another split: relieved of units, a throttled rank idles more and
// its step says less, and the price must not follow it back (the split would swing).
//
// Contention gone. The verdict stands through the straggle's calm spells (above), and a
// rank whose contention ended can straggle again for another reason: the interleaved
// benchmark's rank 1, its quota lifted and held on the calm split, timed 1.1-1.2x its peer
// for a few rounds, and priced at its quota's straggling floor it had the step predicted
// 18-51% long (docs/benchmarks.md, 2026-12-05 (d)). On the calm split the group's floor
// tells: there a throttled rank arrives last and its collectives are the floor, as when it
// was judged. Where that floor is nearer the calm one than the rank's straggling floor
// (ContentionGone), the coordinator prices it by its timers (decision_loop.h:
// PriceThrottled); its verdict stands, and such a window is not one of its step windows
// (they would bring its price down toward calm, and the contention, back, would be priced
// at that). The floor is a median over min_steps steps, so it tells nothing of a
// straggle younger than that (FloorMissing): some of its steps are from before, and at
// the quota onsets' first rounds they read calm, and the rank, priced by its timers, was
// resharded a unit or two short of the best split (docs/benchmarks.md, 2026-12-07 (d)).
// Until then its verdict's floor prices it, contention or not, unless the straggle is a
// drift (DriftNotContention): its timers see it milder than they saw the rank in its
// step windows (MilderStraggle, by the job's straggler threshold, against their median).
// A contention back slows the timers as it did, and a drift does not. The benchmark's
// rank 1, its quota lifted and held on the calm split, drifted to 1.11-1.14x for a round
// now and then (its quota had read about 1.5x); each such straggle was priced at the
// straggling floor, and the steps were predicted up to 48% long (docs/benchmarks.md,
// 2026-12-07 (i)). A drift leaves the floor to tell, mixed as it is: of a drift it reads
// calm; of a milder contention's return, calm at first and then not, as at a straggle
// the timers did not see. Only where the windows' median is (1 + threshold)^3 or more
// (1.33x at 10%): the judge names a straggle above 1 + threshold, and the drifts and
// blips it names read up to about (1 + threshold)^2 (1.11-1.22x here), so a contention
// is told from them only a threshold above that. The ViT's quota (1.4-1.6x) is clear of
// them; the small GPT's (a median 1.25x, flickering down to 1.1x) is not, and there a
// drift is priced as its contention, as before: a contention back taken for a drift is
// resharded short (above). Against the windows' median, not their mildest: against the
// mildest, drifts of 1.13-1.14x still went to the floor in one run of three.
//
// Arrival spread. Balanced on average, a throttled rank still reaches some collectives
// late and others early, and the group waits beyond its mean (arrival_spread.h). While its
// kWhole verdict stands, each window of min_steps steps under a plan without offloads,
// off the calm split (where its floor was measured, its waits beyond it are that floor's
// noise), where it and the others both waited fits the spread that explains both waits: the
// others' beyond the calm collectives (CalmCollectives), its own beyond its straggling
// floor. The step prediction adds the wait that spread costs (group_figures.h).
//
// Relieved. A throttled rank left fewer units than calm spends less of its quota on
// compute, and its collectives cost it less than the straggling floor they cost it on the
// calm split: the small GPT's rank 1 under a 2x quota, at 16 or 20 of 64 units, measured a
// median 0.94x that floor in one 30-cycle run and 0.98x in another, at either count
// (docs/benchmarks.md, 2026-12-06). Priced at the floor, the steps on such splits were
// predicted long, by a median 1.6-4.3% a segment over two runs, and auto's by 10-21% where
// a wide arrival spread added its wait. So while its kWhole verdict stands, each window of
// min_steps steps under a plan without offloads in which it computes fewer units than calm
// and its collectives are not nearer calm than its floor (its contention is on; a deeper
// drop reads as the contention gone, not as relief) takes the ratio of its own collectives
// (median) to its straggling floor. While it is relieved, the coordinator prices its
// collectives at that floor times the median of those ratios, at most 1
// (RelievedFloorRatio). Per-rank totals do not tell its own cost from its waits: where it
// arrives early (a split that relieves it further) its collectives hold its waits for the
// others and the ratio reads at or above 1, so the median leans toward the floor: where it
// errs, it prices the rank nearer the floor, as before, not below its own cost. Not on the
// calm split, and not while it is not relieved: there the floor holds, so a straggler the
// planner has not yet relieved is priced as it was judged.
//
// Still last. A throttled rank that a reshard relieved too little (a drift's small move
// just before its contention began, or one that moved a unit where its quota wanted ten)
// still arrives last at the collectives: its own are the group's floor, the others wait
// beyond it, and its floor stays nearer its straggling floor than calm (SampleRelieved's
// test: its contention is on). So while its kWhole verdict stands, a round that measured a
// plan without offloads off the calm split (as SampleRelieved's) where it computes fewer
// units than calm, its collectives are the least and every other rank's at least
// min_ratio times them, marks it still last (StillLast). The judge then need not space a
// further move off it from the last one (straggler_judge.h: KindMeasuredChronic).
//
//   StragglerKind kinds(&clock, options);
//   StragglerKind::Kind k = kinds.Update(ref, round, lines);  // kWhole: fixed costs
//
// Thread-safe. Keyed by the group's incarnation, like the judge.
#ifndef BALLAST_COORDINATOR_STRAGGLER_KIND_H_
#define BALLAST_COORDINATOR_STRAGGLER_KIND_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "coordinator/group_registry.h"

namespace ballast::coordinator {

struct StragglerKindOptions {
  // Steps every rank runs under a plan before its collectives are a floor, >= 1 (the
  // registry's medians cover the last 16).
  int32_t min_steps = 16;
  // A straggling floor this many times the calm one or more is the straggler's, > 1:
  // 16-step medians of a calm floor moved by under 10% in the e2e benchmark.
  double min_ratio = 1.25;
  // How old a calm floor may be and still be compared with, > 0.
  absl::Duration calm_fresh = absl::Minutes(10);
};

// INVALID_ARGUMENT naming the field.
absl::Status ValidateStragglerKindOptions(const StragglerKindOptions& options);

class StragglerKind {
 public:
  enum class Kind {
    kUnknown,  // no straggler, or not measured yet
    kCompute,  // slow in its compute alone (a slower device): no fixed cost
    kWhole,    // its collectives slowed with it (a CPU quota, a co-tenant): fixed costs
  };

  // What one planning round saw of a group.
  struct Round {
    // The rank the compute timers judge the group's straggler; -1: calm.
    int32_t straggler = -1;
    // Some rank is cordoned: nothing is measured.
    bool cordon = false;
    int64_t plan_version = 0;       // the plan the workers run
    int64_t published_version = 0;  // the newest plan pushed
    bool offloads = false;          // the newest plan pushed offloads some unit
    // Each rank's units computed under the newest plan pushed (owned, less pruned and
    // offloaded; summed over the blocks planned by counts); empty: not known (nothing
    // is then compared).
    std::vector<int32_t> units;
    // Each rank's units owned under that plan (what a reshard moves; offloads leave it);
    // empty: not known. A rank that owns fewer than it computed calm was relieved by a
    // reshard, whatever it computes for others (see "recheck").
    std::vector<int32_t> owned;
    // The group's step and its collectives' floor under the plan the workers run, once
    // every rank ran min_steps steps under it (group_figures.h: MeasuredStep,
    // MeasuredCollectives); <= 0 until then.
    double step_seconds = 0;
    double collective_seconds = 0;
    // Each rank's median collective seconds a step under that plan, on the same terms
    // (group_figures.h: MeasuredRankCollectives; 0 for a rank not attached); empty until
    // then. What the arrival spread is fitted to, and a relieved rank's ratio read from.
    std::vector<double> rank_collective_seconds;
    // The straggler's slowdown as the compute timers pool it (rank_speeds.h; 0: not
    // known), and the job's straggler threshold: a drift, milder than its verdict's step
    // windows, is not taken as its contention back (DriftNotContention).
    double straggler_slowdown = 0;
    double straggler_threshold = 0;
  };

  // `clock` must outlive this.
  StragglerKind(Clock* clock, const StragglerKindOptions& options)
      : clock_(clock), options_(options) {}

  // The round's straggler's kind, appending lines on what was measured to `lines`. In a
  // calm round, the verdicts that still stand (kWhole if any is), else kUnknown.
  Kind Update(const GroupRef& ref, const Round& round, std::vector<std::string>& lines)
      ABSL_LOCKS_EXCLUDED(mu_);
  // When the verdict on `rank` that stands was measured (the clock's monotonic time); none
  // while none stands.
  std::optional<absl::Duration> MeasuredAt(const GroupRef& ref, int32_t rank) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // The slowdown of a rank throttled whole as its step measured it: the group's step while
  // it straggled over the calm step, both under the same units (every rank computing what
  // it computed when calm), where that is above 1; 0 while no kWhole verdict on `rank`
  // stands or no step of it on that split was measured. See "Step slowdown" above.
  double StepSlowdown(const GroupRef& ref, int32_t rank) const ABSL_LOCKS_EXCLUDED(mu_);
  // What the group's collectives cost calm on the split StepSlowdown is measured on: the
  // median floor of the calm step's windows, else the calm floor; 0 while none was
  // measured. A rank priced at its step's slowdown has its collectives priced at that
  // slowdown times this, and where one is priced as throttled the others are based on it
  // (fixed_costs.h).
  double CalmCollectives(const GroupRef& ref) const ABSL_LOCKS_EXCLUDED(mu_);
  // What `rank`'s collectives cost it while it straggled throttled whole on the calm split:
  // the median floor of its verdict's step windows (the group's floor is its own then: it
  // arrives last and waits for nobody); 0 while no kWhole verdict on it stands or none was
  // measured. Held while the verdict stands: a rank priced by it (fixed_costs.h, floor)
  // keeps it however few units it is left (its price, relieved, times RelievedFloorRatio).
  double StragglingFloor(const GroupRef& ref, int32_t rank) const ABSL_LOCKS_EXCLUDED(mu_);
  // How far `rank`'s arrival at the collectives scatters (arrival_spread.h): the median
  // of the spreads fitted while its kWhole verdict stands, one per window of min_steps
  // steps under a plan without offloads, on another split than the calm one, where it and
  // the others both waited (near the balanced split), the newest kSpreadFits; 0 while
  // none was fitted or no kWhole verdict
  // on it stands. Its waits are beyond its straggling floor, the others' beyond
  // CalmCollectives, so it needs both.
  double ArrivalSpread(const GroupRef& ref, int32_t rank) const ABSL_LOCKS_EXCLUDED(mu_);
  // What share of its StragglingFloor `rank`'s collectives cost it where it computes fewer
  // of `units` (Round::units) than calm (see "Relieved"): the median of the ratios its
  // verdict's relieved windows measured, at most 1; 1 where it computes its calm share or
  // more (the floor holds there), while none was measured, or while no kWhole verdict on
  // it stands. `windows` (if not null) gets how many ratios that is the median of, 0 where
  // it is 1 for any of those reasons.
  double RelievedFloorRatio(const GroupRef& ref, int32_t rank, const std::vector<int32_t>& units,
                            int* windows = nullptr) const ABSL_LOCKS_EXCLUDED(mu_);
  // Whether the last round (Update) found `rank`'s contention gone while its kWhole verdict
  // stands: the group on the calm split (every rank computing what it computed when calm)
  // under a plan without offloads that every rank ran min_steps steps, and its floor nearer
  // CalmCollectives than the rank's StragglingFloor, by ratio (a calm window's test: see
  // "Step slowdown"). Throttled, the rank would arrive last there and its collectives would
  // be the floor. Its verdict stands (as what it was, should it straggle again), but a
  // straggle now is not that contention's: see "Contention gone" above. `floor_now` (if not
  // null) gets that floor; `not_gone` (if not null), where it returns false with the
  // verdict standing, what the round lacked or measured (for explain: a throttled rank
  // priced when calm is otherwise unexplained).
  bool ContentionGone(const GroupRef& ref, int32_t rank, double* floor_now = nullptr,
                      std::string* not_gone = nullptr) const ABSL_LOCKS_EXCLUDED(mu_);
  // Whether `rank` has fewer of `units` (computed, Round::units, or owned, Round::owned)
  // than it computed when the calm floor was measured (under a plan without offloads):
  // relieved of units, as a throttled rank whose timers can call it calm.
  bool RelievedOf(const GroupRef& ref, int32_t rank, const std::vector<int32_t>& units) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // The ranks whose kWhole verdict stands and that compute fewer of `units` or own fewer
  // of `owned` (Round::units, Round::owned) than they computed calm: relieved throttled
  // ranks, which the coordinator gives no work back by offloads while their verdict
  // stands (decision_loop.h: TakesNoOffloads).
  std::vector<int32_t> RelievedThrottled(const GroupRef& ref, const std::vector<int32_t>& units,
                                         const std::vector<int32_t>& owned) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Whether the last round (Update) found `rank`, throttled whole and relieved, still
  // arriving last (see "Still last"); `seconds` (if not null) gets its collectives a step
  // there and `others` the least of the other ranks'.
  bool StillLast(const GroupRef& ref, int32_t rank, double* seconds = nullptr,
                 double* others = nullptr) const ABSL_LOCKS_EXCLUDED(mu_);
  // Whether a recheck ended a verdict within kRecheckAfter and its rank is still relieved:
  // its units are to go back (the coordinator takes the split back to even at once, not
  // after a steady calm of reshard_after, which blips here seldom leave). Set by Update.
  bool UnitsGoingBack(const GroupRef& ref) const ABSL_LOCKS_EXCLUDED(mu_);
  // Drops a group the registry forgot.
  void Forget(const GroupKey& key) ABSL_LOCKS_EXCLUDED(mu_);
  const StragglerKindOptions& options() const { return options_; }

  // A judged rank that has not straggled for this long, counted while it is not relieved,
  // is forgotten (a quota straggler relieved of units can look calm for seconds while
  // still contended: straggler_judge.h).
  static constexpr absl::Duration kAbsentFor = absl::Seconds(30);
  // A relieved straggler's calm spell that ends its verdict at first, the longest it
  // doubles to, and how soon after a check the same rank judged throttled again doubles
  // it (see "recheck").
  static constexpr absl::Duration kRecheckAfter = kAbsentFor;
  static constexpr absl::Duration kRecheckMax = absl::Minutes(32);
  static constexpr absl::Duration kRecheckFailedWithin = absl::Minutes(5);
  // A slower device's floor on the calm split this many times the calm one turns its
  // verdict to kWhole (see "Throttled later"): above the highest of 551 16-step windows of
  // the ViT with no straggler (1.67x) and below the 10th percentile of its 2x quota
  // onsets (1.79x; docs/benchmarks.md, 2026-12-05: bench/early_kind.py).
  static constexpr double kThrottledLaterRatio = 1.75;
  // How many disjoint windows a step figure is the median of (see "Step slowdown").
  static constexpr int kStepWindows = 5;
  // How many fits an arrival spread is the median of: one fit moved from 0.02 to 0.06 s
  // between segments of the same split on the ViT (docs/benchmarks.md, 2026-12-04 (g)).
  static constexpr int kSpreadFits = 5;
  // How many relieved windows RelievedFloorRatio is the median of: as the spread's, one
  // window moves by several percent (the GPT's 0.89-1.10 of its floor on one split).
  static constexpr int kRelievedWindows = 5;

 private:
  // A group's step and its collectives' floor over disjoint windows (each a median of
  // min_steps steps, the next taken min_steps steps after the last), the newest
  // kStepWindows of them.
  struct StepWindows {
    std::deque<double> seconds;
    std::deque<double> floors;
    absl::Duration last_at;  // monotonic
    // Whether a window of steps of `step` s ending `now` would not overlap the last one.
    bool Due(absl::Duration now, double step, int32_t min_steps) const;
    void Add(double step, double floor, absl::Duration now);
    double Median() const;       // of the steps; 0 while empty
    double MedianFloor() const;  // 0 while empty
  };
  struct Verdict {
    Kind kind = Kind::kUnknown;
    std::string why;             // its measurements
    absl::Duration measured_at;  // monotonic
    StepWindows steps;           // a kWhole straggler's, on the calm split
    // Its timers' slowdown (Round::straggler_slowdown) in the newest kStepWindows of
    // those windows whose timers were known (a window this round took counts too).
    std::deque<double> timer_slowdowns;
    std::deque<double> spreads;  // its arrival spread's fits, the newest kSpreadFits
    absl::Duration spread_at;    // monotonic, of the newest fit
    // Its collectives over its straggling floor in relieved windows, the newest
    // kRelievedWindows, and when the newest was taken (monotonic).
    std::deque<double> relieved_ratios;
    absl::Duration relieved_at;
    // A kWhole verdict a kCompute one turned into (ThrottledLater) keeps that one's words
    // and time: a recheck that ends it gives the rank back as a slower device, not as
    // throttled (a slower device straggles again whether or not it is still throttled).
    struct Earlier {
      std::string why;
      absl::Duration measured_at;
    };
    std::optional<Earlier> turned_from;
    // A kCompute verdict given back for a turned one by a recheck: turned again, with no
    // fresh calm floor needed, it was throttled still, and the next recheck waits longer.
    bool back_from_recheck = false;
    // Since when its rank has not straggled, counted while it is not relieved (AgeVerdicts).
    std::optional<absl::Duration> absent_since;
  };
  struct GroupState {
    uint64_t incarnation = 0;
    // The calm floor and when it was measured (0: none yet).
    double calm_floor = 0;
    StepWindows calm_steps;  // the group's calm step, on calm_units
    absl::Duration calm_floor_at;
    std::vector<int32_t> calm_units;           // Round::units when calm_floor was measured
    std::optional<absl::Duration> calm_since;  // the calm spell's first round
    // The rank judged the straggler since target_since, without a calm round between.
    int32_t target = -1;
    absl::Duration target_since;
    // Each straggler judged, until its absence of kAbsentFor (AgeVerdicts).
    std::map<int32_t, Verdict> judged;
    // The run of straggling rounds since the last calm one (any rank's).
    std::optional<absl::Duration> straggling_since;
    // The calm spell while relieved counted toward a recheck (through straggling runs
    // shorter than min_steps steps) and how long it must last (see "recheck").
    std::optional<absl::Duration> relieved_calm_since;
    absl::Duration recheck_after = kRecheckAfter;
    // The verdicts the last recheck ended, kept for kRecheckFailedWithin of rechecked_at:
    // a rank that straggles again in that time gets its own back.
    std::map<int32_t, Verdict> suspended;
    absl::Duration rechecked_at;  // monotonic
    // The last round's floor where the group ran the calm split under a plan without
    // offloads (ContentionGone); 0 otherwise, and then why, for explain: what kept the
    // round's floor from being measured (FloorMissing; empty if nothing), or the units
    // it computed on another split.
    double floor_on_calm_split = 0;
    std::string floor_missing;
    std::vector<int32_t> floor_units;
    // Within kRecheckAfter of a recheck, while a rank it ended is still relieved: the
    // split is to go back to even (UnitsGoingBack). No calm floor is taken while such a
    // rank is relieved (on that split its peer arrives last and waits for nobody: 0.0064
    // s where the even split's floor was 0.0163 s on the ViT).
    bool units_going_back = false;
    // The last round's relieved kWhole ranks still arriving last (StillLast): rank -> its
    // collectives and the least of the others', seconds a step.
    std::map<int32_t, std::pair<double, double>> still_last;
  };
  // The verdict on `rank` that stands in `ref`'s incarnation; null if none.
  const Verdict* StandingVerdict(const GroupRef& ref, int32_t rank) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the round's collectives are a floor: a plan without offloads that every rank
  // ran min_steps steps, all since `since`.
  bool Measurable(const Round& round, absl::Duration since, absl::Duration now) const;
  // Whether a floor lies nearer `calm` than `straggling`, by ratio: a window without a
  // throttled rank's contention (see "Step slowdown" and "Contention gone").
  static bool NearerCalm(double floor, double calm, double straggling);
  // The median of a verdict's or a group's windows (0 for none).
  static double MedianOf(const std::deque<double>& values);
  // Measurable's floor part: a plan without offloads, the newest pushed, its step and
  // floor measured (every rank ran min_steps steps under it); no cordon.
  static bool FloorMeasured(const Round& round);
  // What keeps the round's floor from telling a straggler's contention (ContentionGone),
  // for explain; empty where nothing does: FloorMeasured's conditions, and a straggle (the
  // round's straggler's) that has not lasted the floor's window of min_steps steps, unless
  // it is a drift (DriftNotContention).
  std::string FloorMissing(const GroupState& g, const Round& round, absl::Duration now) const;
  // Whether the round's straggle is a drift, not `verdict`'s contention back: milder than
  // its step windows' timers (their median; see "Contention gone"), which read clear of
  // the drifts the judge can name.
  static bool DriftNotContention(const Verdict& verdict, const Round& round);
  // Whether the round's units are those of the calm floor (the calm split).
  static bool OnCalmSplit(const GroupState& g, const Round& round);
  // Whether min_steps steps of the round's step have run since `since` (true while the
  // step is not measured): a floor's window, and how long a calm or straggling run must
  // last to count.
  bool LastedAWindow(const Round& round, absl::Duration since, absl::Duration now) const;
  // Whether the calm floor was measured within calm_fresh: one to compare a straggler's
  // floor with.
  bool FreshCalmFloor(const GroupState& g, absl::Duration now) const;
  // Doubles the wait for the next recheck (up to kRecheckMax), a rank throttled still
  // after one, and says so for explain.
  static std::string RecheckLater(GroupState& g);
  // Whether a kCompute verdict's rank is throttled now (see "Throttled later"): on the
  // calm split, a window after its verdict, its floor kThrottledLaterRatio times a fresh
  // calm floor or more.
  bool ThrottledLater(const GroupState& g, const Round& round, absl::Duration now,
                      const Verdict& verdict) const;
  // Whether `rank` computes fewer of `units` (Round::units) than when the calm floor was
  // measured.
  static bool Relieved(const GroupState& g, const std::vector<int32_t>& units, int32_t rank);
  // A calm window on the calm split while a throttled rank's verdict stands, where its
  // floor is nearer the calm one than `throttled_floor` (ThrottledFloor; see "Step
  // slowdown").
  void SampleCalmStep(GroupState& g, const Round& round, double throttled_floor,
                      absl::Duration now) const;
  // CalmCollectives' figure.
  static double CalmCollectivesOf(const GroupState& g);
  // The least floor of the throttled ranks' windows on the calm split (medians); 0: none.
  static double ThrottledFloor(const GroupState& g);
  // The verdict's straggling floor (StragglingFloor); 0 for one not kWhole.
  static double StragglingFloorOf(const Verdict& verdict);
  // Adds the round's step to a kWhole straggler's windows where it is one on the calm split
  // and its contention is not gone (its floor not nearer the calm one).
  void SampleStep(const GroupState& g, const Round& round, absl::Duration now,
                  Verdict& verdict) const;
  // Fits each kWhole verdict's arrival spread to the round's waits, where they tell it
  // (ArrivalSpread), saying so in `lines`.
  void FitSpreads(GroupState& g, const Round& round, absl::Duration now,
                  std::vector<std::string>& lines) const;
  // Takes each relieved kWhole verdict's ratio of its collectives to its straggling floor
  // where the round measured one (RelievedFloorRatio), saying so in `lines`.
  void SampleRelieved(GroupState& g, const Round& round, absl::Duration now,
                      std::vector<std::string>& lines) const;
  // Whether the round (one WaitsMeasured holds for) measured `rank`, judged by `verdict`,
  // relieved (fewer units than calm) with its contention on: its collectives not nearer
  // calm than its straggling floor. SampleRelieved's windows and NoteStillLast's rounds.
  static bool RelievedContended(const GroupState& g, const Round& round, int32_t rank,
                                const Verdict& verdict);
  // Sets g.still_last from the round (see "Still last").
  void NoteStillLast(GroupState& g, const Round& round) const;
  // Whether the round's per-rank collectives tell a plan's waits off the calm split: every
  // rank ran min_steps steps of the published plan, without offloads (their transfers are
  // timed as collectives) or a cordon (its rank computes nothing). FitSpreads' and
  // SampleRelieved's rounds.
  static bool WaitsMeasured(const GroupState& g, const Round& round);
  // Its step slowdown (0 if none measured or not above 1), and the words for explain.
  static double Slowdown(const GroupState& g, const Verdict& verdict);
  std::string StepText(const GroupState& g, const Verdict& verdict) const;
  // Update's two halves: a calm round measures the calm floor and counts the calm spell
  // that ends the verdicts; a straggling round judges the straggler.
  Kind Calm(GroupState& g, const Round& round, absl::Duration now, std::vector<std::string>& lines)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Kind Straggling(GroupState& g, const Round& round, absl::Duration now,
                  std::vector<std::string>& lines) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A calm round while some judged rank is relieved of units: counts the spell and ends
  // the relieved kWhole verdicts once it lasted g.recheck_after (see "recheck").
  static void Recheck(GroupState& g, const Round& round, absl::Duration now,
                      std::vector<std::string>& lines);
  // Drops the suspended verdicts once kRecheckFailedWithin has passed.
  static void ExpireSuspended(GroupState& g, absl::Duration now);
  // Counts each judged rank's absence in a round whose straggler is `straggler` (-1: a
  // calm round): the straggler's restarts, a relieved rank's counts nothing, and a
  // verdict whose rank has been absent kAbsentFor ends (see "kind").
  static void AgeVerdicts(GroupState& g, const Round& round, int32_t straggler, absl::Duration now);
  // Whether `rank` computes fewer of `units` or owns fewer of `owned` than it computed calm.
  static bool RelievedNow(const GroupState& g, const std::vector<int32_t>& units,
                          const std::vector<int32_t>& owned, int32_t rank);
  static bool RelievedNow(const GroupState& g, const Round& round, int32_t rank) {
    return RelievedNow(g, round.units, round.owned, rank);
  }
  // RelievedThrottled's ranks in `g`: the recheck's and the coordinator's one rule.
  static std::vector<int32_t> RelievedThrottledOf(const GroupState& g,
                                                  const std::vector<int32_t>& units,
                                                  const std::vector<int32_t>& owned);
  static bool AnyRelieved(const GroupState& g, const Round& round,
                          const std::map<int32_t, Verdict>& verdicts);

  Clock* const clock_;
  const StragglerKindOptions options_;
  mutable absl::Mutex mu_;
  std::map<GroupKey, GroupState> groups_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ballast::coordinator

#endif  // BALLAST_COORDINATOR_STRAGGLER_KIND_H_
