#include "coordinator/planner/transfer_solver.h"

#include <algorithm>
#include <cmath>

namespace ballast::coordinator::planner_internal {

void TransferSolver::Reset(const Problem& problem) {
  problem_ = &problem;
  // The LP's concave pieces, steepest first: a prune on a sender covers
  // c / (c - tau) units, on a cordoned rank 1, on any other rank c / (c + tau).
  pieces_.clear();
  pieces_.reserve(2 * static_cast<size_t>(problem_->num_ranks));
  for (int32_t r = 0; r < problem_->num_ranks; ++r) {
    if (problem_->cordoned[r]) {
      pieces_.push_back({1.0, r, true});
      continue;
    }
    if (problem_->seconds_per_unit[r] > problem_->tau)
      pieces_.push_back(
          {problem_->seconds_per_unit[r] / (problem_->seconds_per_unit[r] - problem_->tau), r,
           true});
    pieces_.push_back(
        {problem_->seconds_per_unit[r] / (problem_->seconds_per_unit[r] + problem_->tau), r,
         false});
  }
  // A stable insertion sort: two pieces a rank, and std::stable_sort would allocate.
  for (size_t i = 1; i < pieces_.size(); ++i) {
    const Piece piece = pieces_[i];
    size_t j = i;
    for (; j > 0 && pieces_[j - 1].slope < piece.slope; --j) pieces_[j] = pieces_[j - 1];
    pieces_[j] = piece;
  }
  // Free transfers (tau 0): SmallestPrune(tau, ...) returns 0 before reading the inverse.
  inverse_tau_ = problem_->tau > 0 ? 1 / problem_->tau : 0.0;
  lp_.assign(problem_->num_ranks, RankLp{});
  for (int32_t r = 0; r < problem_->num_ranks; ++r) {
    const double c = problem_->seconds_per_unit[r], tau = problem_->tau;
    const double low = problem_->cordoned[r] ? tau : std::min(c, tau);
    lp_[r].fixed = problem_->fixed_seconds[r];
    lp_[r].n = problem_->owned[r];
    lp_[r].cap = problem_->prune_cap[r];
    lp_[r].c = c;
    lp_[r].cordoned = problem_->cordoned[r] != 0;
    lp_[r].sends_cheaper = c > tau;
    lp_[r].low_positive = low > 0;
    lp_[r].inverse_low = low > 0 ? 1 / low : 0.0;
    lp_[r].inverse_c = 1 / c;
    lp_[r].inverse_send = c > tau ? 1 / (c - tau) : 0.0;
    lp_[r].inverse_keep = 1 / (c + tau);
    const int64_t max_in = problem_->max_in.empty()
                               ? std::max<int64_t>(0, problem_->num_units - problem_->owned[r])
                               : problem_->max_in[r];
    lp_[r].max_in = max_in;
    lp_[r].magnitude =
        (c + tau) * static_cast<double>(problem_->owned[r] + max_in) + problem_->fixed_seconds[r];
    lp_[r].margin_keep = (c + tau) * kClear;
    lp_[r].margin_send = (c - tau) * kClear;
  }
  // Room once: MinStepWithoutPruning lists up to two breakpoints a rank, and MinPrunes
  // up to one knapsack item a rank.
  breakpoints_.reserve(2 * static_cast<size_t>(problem_->num_ranks));
  knapsack_.Clear();
  knapsack_.Reserve(static_cast<size_t>(problem_->num_ranks));
  mandatory_.assign(problem_->num_ranks, 0);
  keep_from_.assign(problem_->num_ranks, 0);
  sender_end_.assign(problem_->num_ranks, 0);
  base_coverage_.assign(problem_->num_ranks, 0);
  base_coverage_at_ = kNoStep;
}

int64_t TransferSolver::Coverage(int32_t r, double t, int32_t z) const {
  const double f = problem_->fixed_seconds[r];
  if (problem_->cordoned[r])
    return Load(f, problem_->seconds_per_unit[r], problem_->tau, 0, problem_->owned[r] - z) <= t
               ? z
               : -1;
  const double c = problem_->seconds_per_unit[r], tau = problem_->tau;
  const int64_t n = problem_->owned[r], left = n - z;
  const RankLp& lp = lp_[r];
  const int64_t max_in = lp.max_in;
  // Whether an estimate kClear from an integer is exact (see RankLp::margin_keep).
  auto exact = [&](double margin) { return margin > 1e-12 * (t + lp.magnitude); };
  if (Load(f, c, tau, left, 0) <= t) {
    // Estimates, made exact by the loops: a product with the inverse, not a division.
    const double room = (t - f - c * static_cast<double>(left)) * lp.inverse_keep;
    if (room > 0 && room < static_cast<double>(max_in)) {
      // Clear of an integer, floor(room) passes the load test and one more unit fails it:
      // the loops below would end where they start.
      const int64_t x = static_cast<int64_t>(room);
      const double above = room - static_cast<double>(x);
      if (ClearOfAnInteger(above) && exact(lp.margin_keep)) return n + x;
    }
    int64_t x = room >= static_cast<double>(max_in)
                    ? max_in
                    : std::max<int64_t>(0, static_cast<int64_t>(room));
    while (x < max_in && Load(f, c, tau, left + x + 1, x + 1) <= t) ++x;
    while (x > 0 && Load(f, c, tau, left + x, x) > t) --x;
    return n + x;
  }
  if (!(c > tau)) return -1;  // sending costs it more than computing
  const double need = (c * static_cast<double>(left) - (t - f)) * lp.inverse_send;
  int64_t y = need >= static_cast<double>(left) ? left : std::max<int64_t>(1, CeilToInt(need));
  if (y > 1 && y < left) {
    // As above: ceil(need) passes the load test and one send fewer fails it.
    const double below = static_cast<double>(y) - need;
    if (ClearOfAnInteger(below) && exact(lp.margin_send)) return n - y;
  }
  while (y > 1 && Load(f, c, tau, left - (y - 1), y - 1) <= t) --y;
  while (y < left && Load(f, c, tau, left - y, y) > t) ++y;
  // Below `left` the loops have just seen y pass the load test; only sending everything
  // may still miss t.
  if (y >= left && Load(f, c, tau, left - y, y) > t) return -1;
  return n - y;
}

int64_t TransferSolver::MinPrunes(double t, std::vector<int32_t>* z) {
  int64_t sum_m = 0, covered = 0;
  base_coverage_at_ = kNoStep;  // until every rank's is in
  const double tau = problem_->tau;
  for (int32_t r = 0; r < problem_->num_ranks; ++r) {
    const int32_t n = problem_->owned[r], cap = problem_->prune_cap[r];
    const double f = problem_->fixed_seconds[r];
    // Nothing gets a rank under its own fixed cost.
    if (f > t) return kNoPlan;
    if (problem_->cordoned[r]) {
      mandatory_[r] = SmallestPrune(f, tau, inverse_tau_, n, t);
      if (mandatory_[r] > cap) return kNoPlan;
      sender_end_[r] = std::min(cap, n);
    } else {
      const int32_t keep = SmallestPrune(f, problem_->seconds_per_unit[r], lp_[r].inverse_c, n, t);
      keep_from_[r] = keep;
      mandatory_[r] = std::min(keep, SmallestPrune(f, tau, inverse_tau_, n, t));
      if (mandatory_[r] > cap) return kNoPlan;
      // Below `keep` prunes the rank must send: that is its sender stretch.
      sender_end_[r] = std::min(cap, keep);
    }
    base_coverage_[r] = Coverage(r, t, mandatory_[r]);
    sum_m += mandatory_[r];
    covered += base_coverage_[r];
  }
  base_coverage_at_ = t;
  if (sum_m > problem_->group_prune_cap) return kNoPlan;
  if (z != nullptr) z->assign(mandatory_.begin(), mandatory_.end());
  const int64_t deficit = problem_->num_units - covered;
  if (deficit <= 0) return sum_m;
  const int64_t budget = problem_->group_prune_cap - sum_m;
  if (budget <= 0) return kNoPlan;

  // Phase A: senders only.
  knapsack_.Clear();
  int64_t sender_gain = 0, sender_prunes = 0;
  for (int32_t r = 0; r < problem_->num_ranks; ++r) {
    if (sender_end_[r] <= mandatory_[r]) continue;
    sender_gain += Coverage(r, t, sender_end_[r]) - base_coverage_[r];
    sender_prunes += sender_end_[r] - mandatory_[r];
    knapsack_.Add(r);
  }
  if (sender_gain >= deficit) {
    int64_t extra;
    if (knapsack_.size() == 1) {
      // One sender (the usual straggler): the smallest prune count that covers the
      // deficit, by bisection on its monotone coverage.
      const int32_t r = knapsack_.item(0).rank;
      int32_t lo = mandatory_[r], hi = sender_end_[r];  // coverage(lo) short, coverage(hi) enough
      while (hi - lo > 1) {
        const int32_t mid = lo + (hi - lo) / 2;
        (Coverage(r, t, mid) - base_coverage_[r] >= deficit ? hi : lo) = mid;
      }
      extra = hi - mandatory_[r];
      if (extra > budget) return kNoPlan;
      if (z != nullptr) (*z)[r] = hi;
    } else {
      for (size_t i = 0; i < knapsack_.size(); ++i) {
        Item& item = knapsack_.item(i);
        FillSenderOptions(t, deficit, &item);
      }
      extra = knapsack_.Solve(deficit, budget, z);
      if (extra == kNoPlan) return kNoPlan;
    }
    return sum_m + extra;
  }

  // Phase B: senders saturated; the rest prunes to make room for what they still send.
  if (sender_prunes >= budget) return kNoPlan;
  const int64_t deficit_b = deficit - sender_gain;
  const int64_t budget_b = budget - sender_prunes;
  if (z != nullptr) {
    for (int32_t r = 0; r < problem_->num_ranks; ++r)
      (*z)[r] = std::max(mandatory_[r], sender_end_[r]);
  }
  knapsack_.Clear();
  for (int32_t r = 0; r < problem_->num_ranks; ++r) {
    if (problem_->cordoned[r]) continue;
    const int32_t start = std::max(mandatory_[r], sender_end_[r]);
    const int32_t end =
        static_cast<int32_t>(std::min<int64_t>(problem_->prune_cap[r], start + budget_b));
    if (end <= start) continue;
    Item& item = knapsack_.Add(r);
    FillReceiverOptions(t, start, end, deficit_b, &item);
    if (item.options.empty()) knapsack_.DropLast();
  }
  const int64_t extra_b = knapsack_.Solve(deficit_b, budget_b, z);
  if (extra_b == kNoPlan) return kNoPlan;
  return sum_m + sender_prunes + extra_b;
}

double TransferSolver::Balance(double t, const std::vector<int32_t>& z, std::vector<int64_t>* v) {
  v->resize(problem_->num_ranks);
  int64_t sum = 0;
  // After MinPrunes at this t, a rank left at its mandatory prunes has its coverage there.
  const bool known = t == base_coverage_at_;
  for (int32_t r = 0; r < problem_->num_ranks; ++r) {
    (*v)[r] = known && z[r] == mandatory_[r] ? base_coverage_[r] : Coverage(r, t, z[r]);
    sum += (*v)[r];
  }
  // Each rank's load if one of its units can be dropped, else -kInf: only the picked
  // rank's changes from one drop to the next.
  auto drop_load = [&](int32_t r) {
    if (problem_->cordoned[r] || (*v)[r] <= z[r]) return -kInf;
    const double now = LoadAt(r, (*v)[r], z[r]);
    // Only drop where it lowers the load: a rank with c <= tau gains nothing by
    // sending. Since sum v > N = sum n, some rank receives, and receivers qualify.
    return LoadAt(r, (*v)[r] - 1, z[r]) < now ? now : -kInf;
  };
  int64_t excess = sum - problem_->num_units;
  if (excess > 0) {
    drop_load_.resize(problem_->num_ranks);
    for (int32_t r = 0; r < problem_->num_ranks; ++r) drop_load_[r] = drop_load(r);
  }
  for (; excess > 0; --excess) {
    int32_t pick = -1;
    double pick_load = -1;
    for (int32_t r = 0; r < problem_->num_ranks; ++r) {
      if (drop_load_[r] > pick_load) {
        pick_load = drop_load_[r];
        pick = r;
      }
    }
    if (pick < 0) break;
    --(*v)[pick];
    drop_load_[pick] = drop_load(pick);
  }
  double max_load = 0;
  for (int32_t r = 0; r < problem_->num_ranks; ++r)
    max_load = std::max(max_load, LoadAt(r, (*v)[r], z[r]));
  return max_load;
}

double TransferSolver::LpPrunes(double t) {
  double sum_m = 0, covered = 0;
  const double tau = problem_->tau;
  for (RankLp& lp : lp_) {
    const double n = lp.n, cap = lp.cap, c = lp.c;
    // The rank's room under t after its fixed cost: the LP of a fixed-free rank at t - f.
    const double room = t - lp.fixed;
    if (room < 0) return kInf;
    double m = lp.low_positive ? std::max(0.0, n - room * lp.inverse_low) : 0.0;
    if (m > cap + 1e-9) return kInf;
    m = std::min(m, cap);
    sum_m += m;
    if (lp.cordoned) {
      covered += m;
      lp.send_length = std::max(0.0, std::min(cap, n) - m);
      lp.keep_length = 0;
      continue;
    }
    const double keep_from = n - room * lp.inverse_c;  // prunes from which it keeps all its units
    // A rank that takes no offloads covers its own units at most: its keep stretch is
    // flat (pruning there makes room it may not fill).
    if (lp.sends_cheaper && m < keep_from) {
      covered += m + (room - tau * (n - m)) * lp.inverse_send;
      lp.send_length = std::max(0.0, std::min(keep_from, cap) - m);
      lp.keep_length = lp.max_in > 0 ? std::max(0.0, cap - std::max(keep_from, m)) : 0.0;
    } else {
      covered += lp.max_in > 0 ? n + (room - c * (n - m)) * lp.inverse_keep : n;
      lp.send_length = 0;
      lp.keep_length = lp.max_in > 0 ? std::max(0.0, cap - m) : 0.0;
    }
  }
  const double group_cap = static_cast<double>(problem_->group_prune_cap);
  if (sum_m > group_cap + 1e-9) return kInf;
  double need = static_cast<double>(problem_->num_units) - covered;
  if (need <= 0) return sum_m;
  double used = 0;
  for (const Piece& piece : pieces_) {
    const double len = piece.send ? lp_[piece.rank].send_length : lp_[piece.rank].keep_length;
    if (len <= 0) continue;
    if (len * piece.slope >= need) {
      used += need / piece.slope;
      need = 0;
      break;
    }
    used += len;
    need -= len * piece.slope;
  }
  if (need > 1e-9 * (1.0 + static_cast<double>(problem_->num_units))) return kInf;
  return sum_m + used > group_cap + 1e-9 ? kInf : sum_m + used;
}

double TransferSolver::MinStepWithoutPruning(std::vector<int64_t>* v) {
  double floor_load = 0, step = 0;
  breakpoints_.clear();
  for (int32_t r = 0; r < problem_->num_ranks; ++r) {
    const double f = problem_->fixed_seconds[r], c = problem_->seconds_per_unit[r],
                 tau = problem_->tau;
    const int64_t n = problem_->owned[r];
    floor_load = std::max(floor_load, problem_->cordoned[r]
                                          ? Load(f, c, tau, 0, n)
                                          : std::min(Load(f, c, tau, n, 0), Load(f, c, tau, 0, n)));
    if (problem_->cordoned[r]) continue;
    step = std::max(step, c + tau);
    // Where the rank's relaxed coverage (RealCoverage) changes slope or jumps.
    if (c > tau) breakpoints_.push_back(Load(f, c, tau, 0, n));
    breakpoints_.push_back(Load(f, c, tau, n, 0));
  }
  // Every rank cordoned: ValidatePlannerInput refuses that (nobody could own the units),
  // so this only keeps the function total.
  if (breakpoints_.empty()) return Balance(0, std::vector<int32_t>(problem_->num_ranks, 0), v);
  // The least t with RealCoverage(t) >= N, which is non-decreasing and linear between
  // breakpoints: find the breakpoints around it, then solve the line.
  std::sort(breakpoints_.begin(), breakpoints_.end());
  const double units = static_cast<double>(problem_->num_units);
  const size_t first_enough =
      std::partition_point(breakpoints_.begin(), breakpoints_.end(),
                           [&](double b) { return RealCoverage(b) < units; }) -
      breakpoints_.begin();
  const bool past_all = first_enough == breakpoints_.size();
  double low = past_all ? breakpoints_.back() : breakpoints_[first_enough];
  if (first_enough > 0) {
    const double a = breakpoints_[first_enough - 1];
    const double width = past_all ? a + step : low - a;
    const double slope = (RealCoverage(a + 0.5 * width) - RealCoverage(a)) / (0.5 * width);
    const double crossing = a + (units - RealCoverage(a)) / slope;
    if (slope > 0) low = past_all ? crossing : std::min(low, crossing);
  }
  std::vector<int32_t> zero(problem_->num_ranks, 0);
  double t = std::max(low, floor_load) + step;
  while (true) {
    int64_t covered = 0;
    for (int32_t r = 0; r < problem_->num_ranks; ++r) covered += Coverage(r, t, 0);
    if (covered >= problem_->num_units) break;
    step *= 2;
    t += step;
  }
  return Balance(t, zero, v);
}

// Sum over ranks of the relaxed coverage at zero prunes (>= the integer coverage).
double TransferSolver::RealCoverage(double at) const {
  double sum = 0;
  for (int32_t r = 0; r < problem_->num_ranks; ++r) {
    if (problem_->cordoned[r]) continue;
    const double c = problem_->seconds_per_unit[r], tau = problem_->tau, n = problem_->owned[r];
    const double t = at - problem_->fixed_seconds[r];  // its room after its fixed cost
    // (A rank that takes no offloads covers its own units at most; this bound lets it
    // receive as the others do. Still above the integer coverage, it only starts
    // MinStepWithoutPruning's walk lower; the cap cost this function a fifth more
    // instructions on the planner benchmark, where no rank has one.)
    if (c > tau) {
      if (t < tau * n) continue;
      sum += t <= c * n ? (t - tau * n) / (c - tau) : n + (t - c * n) / (c + tau);
    } else if (t >= c * n) {
      sum += n + (t - c * n) / (c + tau);
    }
  }
  return sum;
}

// Options of a sender at MinPrunes' t: every prune beyond its mandatory ones (up to
// sender_end_) raises its coverage, by at least one unit; stop once the gain reaches
// `target`. While it still sends, its least send count
// y(z) = ceil((c (n - z) - t) / (c - tau)) falls by c / (c - tau) per prune, so it is
// tracked incrementally; its ceiling is checked against the load formula only where
// rounding could make them disagree.
void TransferSolver::FillSenderOptions(double t, int64_t target, Item* item) const {
  const int32_t r = item->rank;
  const int32_t start = mandatory_[r], end = sender_end_[r];
  const int64_t base = base_coverage_[r];  // Coverage(r, t, start)
  if (problem_->cordoned[r]) {             // a pruned unit is one unit it need not send
    for (int32_t zz = start + 1; zz <= end && zz - start <= target; ++zz) {
      item->options.push_back({zz - start, zz - start});
    }
    return;
  }
  const double f = problem_->fixed_seconds[r], c = problem_->seconds_per_unit[r],
               tau = problem_->tau;
  const int64_t n = problem_->owned[r];
  const double step = c / (c - tau);
  double q = (c * static_cast<double>(n - start) - (t - f)) / (c - tau);
  // The fix-ups below make y exact against the load formula, as Coverage does. They can
  // be skipped where q is at least kClear from an integer: then ceil(q) passes the load
  // check and ceil(q) - 1 fails it, each by (c - tau) * (kClear - q's error) or more.
  // `clear` asks that margin to dwarf the loads' rounding (a few ulps of `magnitude`;
  // 1e-12 of it is over 4,000 of them) and q's error: its first clause bounds the
  // cancellation in q's start (magnitude / (c - tau) < 1e6, so under 1e-9), q_error the
  // rounding summed over its steps (under a hundredth of kClear). On the planner
  // benchmark that is nearly every option.
  const double magnitude = (c + tau) * static_cast<double>(n) + t + f;
  const double span = end - start;
  const double q_error = (std::abs(q) + step * span) * (span + 2) * 0x1p-50;
  const bool clear = (c - tau) * kClear > 1e-12 * magnitude && q_error < 1e-2 * kClear;
  // From `keep` prunes on it computes all it owns (c (n - z) <= t: Load's test with
  // nothing sent) and may take units; below, it sends. MinPrunes found it at this t.
  const int32_t keep = keep_from_[r];
  // One allocation for the item's options (it is reused across solves), not a doubling
  // series each time the solver is made.
  item->options.reserve(static_cast<size_t>(std::min<int64_t>(end - start, target)));
  int64_t last = 0;
  for (int32_t zz = start + 1; zz <= std::min(end, keep - 1); ++zz) {
    const int64_t left = n - zz;
    q -= step;
    int64_t y = CeilToInt(q);
    const double slack = static_cast<double>(y) - q;
    if (!(clear && y > 1 && y < left && ClearOfAnInteger(slack))) {
      y = std::clamp<int64_t>(y, 1, left);
      while (y > 1 && Load(f, c, tau, left - (y - 1), y - 1) <= t) --y;
      while (y < left && Load(f, c, tau, left - y, y) > t) ++y;
    }
    const int64_t gain = n - y - base;
    if (gain <= last) continue;
    item->options.push_back({zz - start, gain});
    last = gain;
    if (gain >= target) return;
  }
  for (int32_t zz = std::max(start + 1, keep); zz <= end; ++zz) {
    const int64_t gain = Coverage(r, t, zz) - base;
    if (gain <= last) continue;
    item->options.push_back({zz - start, gain});
    last = gain;
    if (gain >= target) return;
  }
}

// Options of a rank that keeps all its units from `start` prunes on: the g-th extra unit
// it can take needs the smallest z with c (n - z + x) + tau x <= t, x its units received;
// found directly for each g rather than by scanning z.
void TransferSolver::FillReceiverOptions(double t, int32_t start, int32_t end, int64_t target,
                                         Item* item) const {
  const int32_t r = item->rank;
  const double f = problem_->fixed_seconds[r], c = problem_->seconds_per_unit[r],
               tau = problem_->tau;
  const int64_t n = problem_->owned[r];
  const int64_t max_in = lp_[r].max_in;
  const int64_t x0 = Coverage(r, t, start) - n;
  auto fits = [&](int64_t zz, int64_t x) { return Load(f, c, tau, n - zz + x, x) <= t; };
  for (int64_t g = 1; g <= target && x0 + g <= max_in; ++g) {
    const int64_t x = x0 + g;
    const int64_t estimate = CeilToInt(static_cast<double>(n + x) - (t - f - tau * x) / c);
    int64_t zz = std::clamp<int64_t>(estimate, start + 1, int64_t{end} + 1);
    while (zz - 1 > start && fits(zz - 1, x)) --zz;
    while (zz <= end && !fits(zz, x)) ++zz;
    if (zz > end) break;
    const int32_t cost = static_cast<int32_t>(zz - start);
    // One prune never adds two units here (c / (c + tau) < 1), except by rounding.
    if (!item->options.empty() && item->options.back().cost >= cost) item->options.pop_back();
    item->options.push_back({cost, g});
  }
}

}  // namespace ballast::coordinator::planner_internal
