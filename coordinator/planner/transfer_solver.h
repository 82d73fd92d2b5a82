// Plans with transfers (modes migrate and auto), at a fixed step time t: how many units
// each rank can account for (compute or prune) with its load under t, the fewest prunes
// with which t is reachable, and the least max load those prunes allow. search.h walks t;
// this file answers for one t. Internal to the planner.
//
// Coverage. Call v_r = u_r + z_r the units rank r accounts for. In an optimum no rank both
// sends and receives (dropping one of each saves 2 tau and changes nothing else), so r
// transfers |n_r - v_r| units and
//   load_r = f_r + c_r * (v_r - z_r) + tau * |n_r - v_r|,
// and a plan is feasible iff sum_r v_r = N (f_r, the rank's fixed seconds, only narrows its
// room under t to t - f_r). For a step time t and prunes z_r, the v_r with
// load_r <= t form an interval whose top Vmax_r(t, z_r) has a closed form (Coverage); t is
// reachable with prunes z iff every rank can get under t and sum_r Vmax_r(t, z_r) >= N.
//
// Fixed t (MinPrunes). The fewest prunes with which t is reachable. Each rank needs some
// mandatory prunes m_r to get under t at all. Beyond that a prune on a rank that must send
// ("sender": c_r (n_r - z_r) > t) raises its coverage by at least one unit (it sends at
// least one unit fewer), while a prune on any other rank raises it by 0 or 1. So, by an
// exchange argument, some optimum prunes beyond m_r on non-senders only once every sender
// is saturated (at its budget or no longer sending). Phase A solves a small knapsack over
// the senders (one sender, the usual straggler, is a bisection); only if saturating them
// is not enough does phase B solve one over the others (knapsack.h).
#ifndef BALLAST_COORDINATOR_PLANNER_TRANSFER_SOLVER_H_
#define BALLAST_COORDINATOR_PLANNER_TRANSFER_SOLVER_H_

#include <cstdint>
#include <vector>

#include "coordinator/planner/knapsack.h"
#include "coordinator/planner/problem.h"

namespace ballast::coordinator::planner_internal {

class TransferSolver {
 public:
  // `problem` must outlive the solver (or the next Reset) and stay unchanged: the solver
  // keeps copies of its per-rank numbers.
  explicit TransferSolver(const Problem& problem) { Reset(problem); }
  // No problem yet: Reset before any other call.
  TransferSolver() = default;

  // Starts over on `problem`, keeping every buffer's capacity: a solver reused from one
  // decision to the next allocates almost nothing (PlannerWorkspace holds one for its
  // caller).
  void Reset(const Problem& problem);

  // Largest coverage rank r can have with z of its own units pruned and load <= t, or -1
  // when it cannot get under t at all. Cordoned ranks cover exactly their prunes.
  int64_t Coverage(int32_t r, double t, int32_t z) const;

  // The fewest prunes with which every rank gets under t and all units are covered, or
  // kNoPlan. Fills z (per-rank prunes) when non-null.
  int64_t MinPrunes(double t, std::vector<int32_t>* z);

  // Given prunes z that reach t, the coverage that minimises the max load: start from
  // every rank's Vmax and drop the costliest droppable unit of coverage until exactly N
  // remain, which keeps the N cheapest "slots". Returns that max load (<= t).
  double Balance(double t, const std::vector<int32_t>& z, std::vector<int64_t>* v);

  // Linear relaxation of MinPrunes(t): a lower bound, kInf where even it is infeasible.
  double LpPrunes(double t);

  // The exact least max load with no pruning: the N-th cheapest coverage slot over all
  // ranks (and no less than what each rank must bear anyway). A fractional water level
  // gets close first so that Balance only drops a handful of slots. Reads no prune
  // budget, so the auto solver answers it for migrate-only too.
  double MinStepWithoutPruning(std::vector<int64_t>* v);

 private:
  using Item = PruneKnapsack::Item;
  // A stretch of one rank's LP coverage curve, linear in its prunes.
  struct Piece {
    double slope;  // coverage per prune
    int32_t rank;
    bool send;  // the sender (or cordoned) stretch, else the keep-everything stretch
  };
  // Per rank, for LpPrunes (and the estimates in Coverage and MinPrunes): its divisors
  // inverted once (1 / min(c, tau), 1 / tau when cordoned; 1 / c; 1 / (c - tau) for a
  // sender; 1 / (c + tau)) and, at the t in hand, the lengths of its two LP pieces.
  struct RankLp {
    // Copies read without conversions: its fixed seconds, owned units, prune budget and
    // seconds per unit; whether it is cordoned, whether sending costs it less than computing
    // (c > tau), and whether its low divisor is positive.
    double fixed = 0, n = 0, cap = 0, c = 0;
    bool cordoned = false, sends_cheaper = false, low_positive = false;
    int64_t max_in = 0;  // units it may compute for others (Problem::max_in)
    double inverse_low = 0, inverse_c = 0, inverse_send = 0, inverse_keep = 0;
    double send_length = 0, keep_length = 0;
    // For Coverage's shortcut: an estimate at least kClear from an integer is
    // exact when its divisor times that (margin_keep for c + tau, margin_send for
    // c - tau) exceeds 1e-12 of the loads' magnitude (t plus this one: its fixed seconds
    // and (c + tau) times all the units it could hold). The loads and the estimate are
    // then each off by a few ulps of that magnitude at most, over 4,000 times less than
    // the margin, so the load tests the loops would make cannot come out otherwise.
    double magnitude = 0, margin_keep = 0, margin_send = 0;
  };
  // How far from an integer an estimate must be for Coverage and the sender options to
  // skip the loops that make it exact (each states why that is safe).
  static constexpr double kClear = 1e-6;
  // Whether an estimate whose distance to the integer on one side is `gap` (in [0, 1))
  // lies at least kClear from both integers around it.
  static bool ClearOfAnInteger(double gap) { return gap > kClear && gap < 1 - kClear; }

  // Rank r's load accounting for v units with z of its own pruned.
  double LoadAt(int32_t r, int64_t v, int32_t z) const {
    const int64_t n = problem_->owned[r];
    return Load(problem_->fixed_seconds[r], problem_->seconds_per_unit[r], problem_->tau, v - z,
                v >= n ? v - n : n - v);
  }
  double RealCoverage(double t) const;
  void FillSenderOptions(double t, int64_t target, Item* item) const;
  void FillReceiverOptions(double t, int32_t start, int32_t end, int64_t target, Item* item) const;

  const Problem* problem_ = nullptr;
  std::vector<Piece> pieces_;  // steepest first
  PruneKnapsack knapsack_;
  std::vector<RankLp> lp_;  // per rank
  double inverse_tau_ = 0;  // 1 / tau, 0 when tau is 0
  // Scratch, reused across calls so that the search allocates almost nothing: per rank
  // its mandatory prunes m_r, the prune count from which it keeps all its units (not
  // cordoned), that count capped by its budget (where it no longer sends) and its
  // coverage at m_r. MinPrunes writes them at its t; FillSenderOptions reads them.
  std::vector<int32_t> mandatory_, keep_from_, sender_end_;
  std::vector<int64_t> base_coverage_;
  // The t at which base_coverage_ holds for every rank (Balance reads it), or kNoStep.
  static constexpr double kNoStep = -1;
  double base_coverage_at_ = kNoStep;
  std::vector<double> breakpoints_;  // MinStepWithoutPruning's
  std::vector<double> drop_load_;    // Balance's, per rank
};

}  // namespace ballast::coordinator::planner_internal

#endif  // BALLAST_COORDINATOR_PLANNER_TRANSFER_SOLVER_H_
