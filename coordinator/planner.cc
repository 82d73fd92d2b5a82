#include "coordinator/planner.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iterator>
#include <limits>
#include <queue>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

// How the optimum is found (exactly, at unit granularity).
//
// Coverage. Call v_r = u_r + z_r the units rank r accounts for (computes or prunes). In an
// optimum no rank both sends and receives (dropping one of each saves 2 tau and changes
// nothing else), so r transfers |n_r - v_r| units and
//   load_r = c_r * (v_r - z_r) + tau * |n_r - v_r|,
// and a plan is feasible iff sum_r v_r = N. For a step time t and prunes z_r, the v_r with
// load_r <= t form an interval whose top Vmax_r(t, z_r) has a closed form; t is reachable
// with prunes z iff every rank can get under t and sum_r Vmax_r(t, z_r) >= N.
//
// Fixed t (MinPrunes). The fewest prunes with which t is reachable. Each rank needs some
// mandatory prunes m_r to get under t at all. Beyond that a prune on a rank that must send
// ("sender": c_r (n_r - z_r) > t) raises its coverage by at least one unit (it sends at
// least one unit fewer), while a prune on any other rank raises it by 0 or 1. So, by an
// exchange argument, some optimum prunes beyond m_r on non-senders only once every sender
// is saturated (at its budget or no longer sending). Phase A solves a small knapsack over
// the senders (one sender, the usual straggler, is a bisection); only if saturating them
// is not enough does phase B solve one over the others. Both knapsacks are exact DPs over
// "coverage gained" whose states are cut by an LP bound (see Knapsack); the DP is skipped
// when the LP's own solution, rounded up to whole options, already costs ceil(LP), which
// proves it optimal (the usual case).
//
// Over t. MinPrunes(t) is a non-increasing step function that changes only at load values
// c_r u + tau w, and the objective t + lambda MinPrunes(t) is minimised at the left end of
// one of its steps. Resize-only has a direct scan, migrate-only is the N-th smallest
// "coverage slot" (MinStepWithoutPruning). Auto runs a best-first branch and bound over
// intervals (a, b) of t: one whose right end needs k_b prunes can hold nothing better than
// a + lambda * max(k_b [+1 if b is known to start its step], ceil(LP(b))), where LP is the
// linear relaxation of MinPrunes (fractional prunes and coverage, a greedy over concave
// pieces). An interval is split at its midpoint, whose min-prune plan is re-balanced to
// its true max load (snapping the split to where that plan's step region begins). When an
// interval can hold only a step or two, the search instead looks at the double just below
// b: MinPrunes is constant between consecutive load values, so that settles whether b
// starts its step. Every plan seen is a candidate and an interval is dropped only when its
// bound cannot beat the best, so the result is the optimum (to 1e-12 relative).

namespace ballast::coordinator {
namespace {

constexpr int64_t kNoPlan = std::numeric_limits<int64_t>::max();
constexpr double kInf = std::numeric_limits<double>::infinity();
// Objectives this close (relative) are equal: far below anything measurable.
constexpr double kRelTol = 1e-12;

// The one load formula. Every threshold the solver compares against and every reported
// step time comes from it, so a predicted T is the same double the plan recomputes to.
inline double Load(double c, double tau, int64_t computed, int64_t transferred) {
  return c * static_cast<double>(computed) + tau * static_cast<double>(transferred);
}

bool PrunesAllowed(BalanceMode mode) { return mode != BalanceMode::kMigrate; }
bool TransfersAllowed(BalanceMode mode) { return mode != BalanceMode::kResize; }
// Off and observe compute what auto would do (to explain it), and push all-local.
BalanceMode PlanningMode(BalanceMode mode) {
  return (mode == BalanceMode::kOff || mode == BalanceMode::kObserve) ? BalanceMode::kAuto : mode;
}

// One block under one ownership and policy, in the solver's terms.
struct Problem {
  int32_t p = 0;
  int64_t total = 0;  // N
  std::vector<double> c;
  std::vector<int32_t> owned;
  std::vector<char> cordoned;
  std::vector<int32_t> prune_cap;  // 0 when the mode forbids pruning
  int64_t group_cap = 0;
  double tau = 0;
  double lambda = 0;  // accuracy weight per pruned unit: w / N
};

Problem MakeProblem(const PlannerInput& input, const std::vector<int32_t>& owned,
                    const JobPolicy& policy, BalanceMode mode) {
  Problem pb;
  pb.p = static_cast<int32_t>(input.ranks.size());
  pb.tau = input.transfer_seconds_per_unit;
  for (int32_t r = 0; r < pb.p; ++r) {
    pb.c.push_back(input.ranks[r].seconds_per_unit);
    pb.owned.push_back(owned[r]);
    pb.cordoned.push_back(input.ranks[r].cordoned ? 1 : 0);
    pb.total += owned[r];
  }
  const bool prune = PrunesAllowed(mode);
  for (int32_t r = 0; r < pb.p; ++r) {
    pb.prune_cap.push_back(
        prune ? static_cast<int32_t>(PruneBudget(policy.max_pruned_fraction_rank, owned[r])) : 0);
  }
  pb.group_cap = prune ? PruneBudget(policy.max_pruned_fraction_group, pb.total) : 0;
  pb.lambda = pb.total > 0 ? policy.accuracy_weight_seconds / static_cast<double>(pb.total) : 0;
  return pb;
}

// A plan in counts: per rank pruned, offloaded out, computed for others.
struct Solution {
  bool feasible = false;
  std::string reason;  // when infeasible
  std::vector<int32_t> z, y, x;
  double step = 0;
  double objective = 0;
};

// Prices counts with the model's formula (the same one tests re-derive).
void Price(const Problem& pb, Solution* s) {
  double t = 0;
  int64_t pruned = 0;
  for (int32_t r = 0; r < pb.p; ++r) {
    const int64_t u = int64_t{pb.owned[r]} - s->z[r] - s->y[r] + s->x[r];
    t = std::max(t, Load(pb.c[r], pb.tau, u, int64_t{s->y[r]} + s->x[r]));
    pruned += s->z[r];
  }
  s->step = t;
  s->objective = t + pb.lambda * static_cast<double>(pruned);
}

// Smallest z in [0, n] with coef * (n - z) <= t (t >= 0; z = n always qualifies).
int32_t SmallestPrune(double coef, int32_t n, double t) {
  if (coef * static_cast<double>(n) <= t) return 0;
  const double keep = std::floor(t / coef);
  int64_t z = keep >= n ? 0 : n - static_cast<int64_t>(keep);
  z = std::clamp<int64_t>(z, 0, n);
  while (z > 0 && coef * static_cast<double>(n - z + 1) <= t) --z;
  while (z < n && coef * static_cast<double>(n - z) > t) ++z;
  return static_cast<int32_t>(z);
}

// ---------------------------------------------------------------------------------------
// Resize only: no transfers, so rank r needs z_r = ceil(n_r - T / c_r) prunes for a step
// time T. Lowering T one step at a time (prune the most loaded rank) visits every T at
// which the prune count changes, with the fewest prunes for it.
Solution SolveResize(const Problem& pb) {
  Solution s;
  s.z.assign(pb.p, 0);
  s.y.assign(pb.p, 0);
  s.x.assign(pb.p, 0);
  int64_t pruned = 0;
  for (int32_t r = 0; r < pb.p; ++r) {
    if (!pb.cordoned[r]) continue;
    if (pb.owned[r] > pb.prune_cap[r]) {
      s.reason =
          absl::StrCat("cordoned rank ", r, " owns ", pb.owned[r], " units but may prune at most ",
                       pb.prune_cap[r], " (max_pruned_fraction_rank)");
      return s;
    }
    s.z[r] = pb.owned[r];
    pruned += pb.owned[r];
  }
  if (pruned > pb.group_cap) {
    s.reason =
        absl::StrCat("cordoned ranks own ", pruned, " units but the group may prune at most ",
                     pb.group_cap, " (max_pruned_fraction_group)");
    return s;
  }
  std::vector<double> load(pb.p, 0.0);
  for (int32_t r = 0; r < pb.p; ++r) {
    load[r] = pb.cordoned[r] ? 0.0 : Load(pb.c[r], pb.tau, pb.owned[r], 0);
  }
  std::vector<int32_t> z = s.z;
  double best = kInf;
  while (true) {
    int32_t top = 0;
    for (int32_t r = 1; r < pb.p; ++r) {
      if (load[r] > load[top]) top = r;
    }
    const double obj = load[top] + pb.lambda * static_cast<double>(pruned);
    // Strictly better only: on ties keep the plan with fewer prunes (less accuracy risk).
    if (best == kInf || obj < best - kRelTol * best) {
      best = obj;
      s.z = z;
    }
    if (pb.cordoned[top] || z[top] >= pb.prune_cap[top] || pruned >= pb.group_cap) break;
    // The objective is at least lambda * pruned; once that alone loses, stop.
    if (pb.lambda * static_cast<double>(pruned + 1) >= best) break;
    ++z[top];
    ++pruned;
    load[top] = Load(pb.c[top], pb.tau, pb.owned[top] - z[top], 0);
  }
  s.feasible = true;
  Price(pb, &s);
  return s;
}

// ---------------------------------------------------------------------------------------
// Plans with transfers (migrate, auto).
class TransferSolver {
 public:
  explicit TransferSolver(const Problem& pb) : pb_(pb) {
    // The LP's concave pieces, steepest first: a prune on a sender covers
    // c / (c - tau) units, on a cordoned rank 1, on any other rank c / (c + tau).
    for (int32_t r = 0; r < pb_.p; ++r) {
      if (pb_.cordoned[r]) {
        pieces_.push_back({1.0, r, true});
        continue;
      }
      if (pb_.c[r] > pb_.tau) pieces_.push_back({pb_.c[r] / (pb_.c[r] - pb_.tau), r, true});
      pieces_.push_back({pb_.c[r] / (pb_.c[r] + pb_.tau), r, false});
    }
    std::stable_sort(pieces_.begin(), pieces_.end(),
                     [](const Piece& a, const Piece& b) { return a.slope > b.slope; });
    len_send_.assign(pb_.p, 0.0);
    len_keep_.assign(pb_.p, 0.0);
    m_.assign(pb_.p, 0);
    e_.assign(pb_.p, 0);
    base_.assign(pb_.p, 0);
  }

  // Largest coverage rank r can have with z of its own units pruned and load <= t, or -1
  // when it cannot get under t at all. Cordoned ranks cover exactly their prunes.
  int64_t Coverage(int32_t r, double t, int32_t z) const {
    if (pb_.cordoned[r]) return Load(pb_.c[r], pb_.tau, 0, pb_.owned[r] - z) <= t ? z : -1;
    const double c = pb_.c[r], tau = pb_.tau;
    const int64_t n = pb_.owned[r], left = n - z;
    // Receiving more than the others own never helps.
    const int64_t max_in = std::max<int64_t>(0, pb_.total - n);
    if (Load(c, tau, left, 0) <= t) {
      const double room = (t - c * static_cast<double>(left)) / (c + tau);
      int64_t x = room >= static_cast<double>(max_in)
                      ? max_in
                      : std::max<int64_t>(0, static_cast<int64_t>(room));
      while (x < max_in && Load(c, tau, left + x + 1, x + 1) <= t) ++x;
      while (x > 0 && Load(c, tau, left + x, x) > t) --x;
      return n + x;
    }
    if (!(c > tau)) return -1;  // sending costs it more than computing
    const double need = (c * static_cast<double>(left) - t) / (c - tau);
    int64_t y = need >= static_cast<double>(left)
                    ? left
                    : std::max<int64_t>(1, static_cast<int64_t>(std::ceil(need)));
    while (y > 1 && Load(c, tau, left - (y - 1), y - 1) <= t) --y;
    while (y < left && Load(c, tau, left - y, y) > t) ++y;
    if (Load(c, tau, left - y, y) > t) return -1;
    return n - y;
  }

  // The fewest prunes with which every rank gets under t and all units are covered, or
  // kNoPlan. Fills z (per-rank prunes) when non-null.
  int64_t MinPrunes(double t, std::vector<int32_t>* z) {
    int64_t sum_m = 0, covered = 0;
    for (int32_t r = 0; r < pb_.p; ++r) {
      const int32_t n = pb_.owned[r], cap = pb_.prune_cap[r];
      if (pb_.cordoned[r]) {
        m_[r] = SmallestPrune(pb_.tau, n, t);
        if (m_[r] > cap) return kNoPlan;
        e_[r] = std::min(cap, n);
      } else {
        const int32_t keep = SmallestPrune(pb_.c[r], n, t);
        m_[r] = std::min(keep, SmallestPrune(pb_.tau, n, t));
        if (m_[r] > cap) return kNoPlan;
        // Below `keep` prunes the rank must send: that is its sender stretch.
        e_[r] = std::min(cap, keep);
      }
      base_[r] = Coverage(r, t, m_[r]);
      sum_m += m_[r];
      covered += base_[r];
    }
    if (sum_m > pb_.group_cap) return kNoPlan;
    if (z != nullptr) z->assign(m_.begin(), m_.end());
    const int64_t deficit = pb_.total - covered;
    if (deficit <= 0) return sum_m;
    const int64_t budget = pb_.group_cap - sum_m;
    if (budget <= 0) return kNoPlan;

    // Phase A: senders only.
    num_items_ = 0;
    int64_t sender_gain = 0, sender_prunes = 0;
    for (int32_t r = 0; r < pb_.p; ++r) {
      if (e_[r] <= m_[r]) continue;
      sender_gain += Coverage(r, t, e_[r]) - base_[r];
      sender_prunes += e_[r] - m_[r];
      AddItem(r);
    }
    if (sender_gain >= deficit) {
      int64_t extra;
      if (num_items_ == 1) {
        // One sender (the usual straggler): the smallest prune count that covers the
        // deficit, by bisection on its monotone coverage.
        const int32_t r = items_[0].rank;
        int32_t lo = m_[r], hi = e_[r];  // coverage(lo) short, coverage(hi) enough
        while (hi - lo > 1) {
          const int32_t mid = lo + (hi - lo) / 2;
          (Coverage(r, t, mid) - base_[r] >= deficit ? hi : lo) = mid;
        }
        extra = hi - m_[r];
        if (extra > budget) return kNoPlan;
        if (z != nullptr) (*z)[r] = hi;
      } else {
        for (size_t i = 0; i < num_items_; ++i) {
          Item& item = items_[i];
          FillSenderOptions(t, m_[item.rank], e_[item.rank], deficit, &item);
        }
        extra = Knapsack(deficit, budget, z);
        if (extra == kNoPlan) return kNoPlan;
      }
      return sum_m + extra;
    }

    // Phase B: senders saturated; the rest prunes to make room for what they still send.
    if (sender_prunes >= budget) return kNoPlan;
    const int64_t deficit_b = deficit - sender_gain;
    const int64_t budget_b = budget - sender_prunes;
    if (z != nullptr) {
      for (int32_t r = 0; r < pb_.p; ++r) (*z)[r] = std::max(m_[r], e_[r]);
    }
    num_items_ = 0;
    for (int32_t r = 0; r < pb_.p; ++r) {
      if (pb_.cordoned[r]) continue;
      const int32_t start = std::max(m_[r], e_[r]);
      const int32_t end =
          static_cast<int32_t>(std::min<int64_t>(pb_.prune_cap[r], start + budget_b));
      if (end <= start) continue;
      Item& item = AddItem(r);
      FillReceiverOptions(t, start, end, deficit_b, &item);
      if (item.options.empty()) --num_items_;
    }
    const int64_t extra_b = Knapsack(deficit_b, budget_b, z);
    if (extra_b == kNoPlan) return kNoPlan;
    return sum_m + sender_prunes + extra_b;
  }

  // Given prunes z that reach t, the coverage that minimises the max load: start from
  // every rank's Vmax and drop the costliest droppable unit of coverage until exactly N
  // remain, which keeps the N cheapest "slots". Returns that max load (<= t).
  double Balance(double t, const std::vector<int32_t>& z, std::vector<int64_t>* v) {
    v->resize(pb_.p);
    int64_t sum = 0;
    for (int32_t r = 0; r < pb_.p; ++r) {
      (*v)[r] = Coverage(r, t, z[r]);
      sum += (*v)[r];
    }
    for (int64_t excess = sum - pb_.total; excess > 0; --excess) {
      int32_t pick = -1;
      double pick_load = -1;
      for (int32_t r = 0; r < pb_.p; ++r) {
        if (pb_.cordoned[r] || (*v)[r] <= z[r]) continue;
        const double now = LoadAt(r, (*v)[r], z[r]);
        // Only drop where it lowers the load: a rank with c <= tau gains nothing by
        // sending. Since sum v > N = sum n, some rank receives, and receivers qualify.
        if (!(LoadAt(r, (*v)[r] - 1, z[r]) < now)) continue;
        if (now > pick_load) {
          pick_load = now;
          pick = r;
        }
      }
      if (pick < 0) break;
      --(*v)[pick];
    }
    double max_load = 0;
    for (int32_t r = 0; r < pb_.p; ++r) max_load = std::max(max_load, LoadAt(r, (*v)[r], z[r]));
    return max_load;
  }

  // Linear relaxation of MinPrunes(t): a lower bound, kInf where even it is infeasible.
  double LpPrunes(double t) {
    double sum_m = 0, covered = 0;
    for (int32_t r = 0; r < pb_.p; ++r) {
      const double n = pb_.owned[r], cap = pb_.prune_cap[r], c = pb_.c[r], tau = pb_.tau;
      const double low = pb_.cordoned[r] ? tau : std::min(c, tau);
      double m = low > 0 ? std::max(0.0, n - t / low) : 0.0;
      if (m > cap + 1e-9) return kInf;
      m = std::min(m, cap);
      sum_m += m;
      if (pb_.cordoned[r]) {
        covered += m;
        len_send_[r] = std::max(0.0, std::min(cap, n) - m);
        len_keep_[r] = 0;
        continue;
      }
      const double keep_from = n - t / c;  // prunes from which it keeps all its units
      if (c > tau && m < keep_from) {
        covered += m + (t - tau * (n - m)) / (c - tau);
        len_send_[r] = std::max(0.0, std::min(keep_from, cap) - m);
        len_keep_[r] = std::max(0.0, cap - std::max(keep_from, m));
      } else {
        covered += n + (t - c * (n - m)) / (c + tau);
        len_send_[r] = 0;
        len_keep_[r] = std::max(0.0, cap - m);
      }
    }
    const double group_cap = static_cast<double>(pb_.group_cap);
    if (sum_m > group_cap + 1e-9) return kInf;
    double need = static_cast<double>(pb_.total) - covered;
    if (need <= 0) return sum_m;
    double used = 0;
    for (const Piece& piece : pieces_) {
      const double len = piece.send ? len_send_[piece.rank] : len_keep_[piece.rank];
      if (len <= 0) continue;
      if (len * piece.slope >= need) {
        used += need / piece.slope;
        need = 0;
        break;
      }
      used += len;
      need -= len * piece.slope;
    }
    if (need > 1e-9 * (1.0 + static_cast<double>(pb_.total))) return kInf;
    return sum_m + used > group_cap + 1e-9 ? kInf : sum_m + used;
  }

  // The exact least max load with no pruning: the N-th cheapest coverage slot over all
  // ranks (and no less than what each rank must bear anyway). A fractional water level
  // gets close first so that Balance only drops a handful of slots.
  double MinStepWithoutPruning(std::vector<int64_t>* v) {
    double floor_load = 0, top = 0, step = 0;
    for (int32_t r = 0; r < pb_.p; ++r) {
      const double c = pb_.c[r], tau = pb_.tau;
      const int64_t n = pb_.owned[r];
      floor_load =
          std::max(floor_load, pb_.cordoned[r] ? Load(c, tau, 0, n)
                                               : std::min(Load(c, tau, n, 0), Load(c, tau, 0, n)));
      if (pb_.cordoned[r]) continue;
      top = std::max(top, Load(c, tau, pb_.total, pb_.total - n));  // it alone covers N
      step = std::max(step, c + tau);
    }
    double lo = 0, hi = top;
    for (int i = 0; i < 60 && hi - lo > 1e-15 * hi; ++i) {
      const double mid = 0.5 * (lo + hi);
      (RealCoverage(mid) >= static_cast<double>(pb_.total) ? hi : lo) = mid;
    }
    std::vector<int32_t> zero(pb_.p, 0);
    double t = std::max(hi, floor_load) + step;
    while (true) {
      int64_t covered = 0;
      for (int32_t r = 0; r < pb_.p; ++r) covered += Coverage(r, t, 0);
      if (covered >= pb_.total) break;
      step *= 2;
      t += step;
    }
    return Balance(t, zero, v);
  }

 private:
  struct Piece {
    double slope;
    int32_t rank;
    bool send;  // the sender (or cordoned) stretch, else the keep-everything stretch
  };
  struct Option {
    int32_t cost;  // extra prunes
    int64_t gain;  // extra coverage
  };
  struct Item {
    int32_t rank;
    std::vector<Option> options;
  };
  struct Segment {
    double cost;
    double gain;
    size_t item = 0;  // hull segments only: the index into items_ it belongs to
  };

  double LoadAt(int32_t r, int64_t v, int32_t z) const {
    const int64_t n = pb_.owned[r];
    return Load(pb_.c[r], pb_.tau, v - z, v >= n ? v - n : n - v);
  }

  // Sum over ranks of the relaxed coverage at zero prunes (>= the integer coverage).
  double RealCoverage(double t) const {
    double sum = 0;
    for (int32_t r = 0; r < pb_.p; ++r) {
      if (pb_.cordoned[r]) continue;
      const double c = pb_.c[r], tau = pb_.tau, n = pb_.owned[r];
      if (c > tau) {
        if (t < tau * n) continue;
        sum += t <= c * n ? (t - tau * n) / (c - tau) : n + (t - c * n) / (c + tau);
      } else if (t >= c * n) {
        sum += n + (t - c * n) / (c + tau);
      }
    }
    return sum;
  }

  Item& AddItem(int32_t r) {
    if (num_items_ == items_.size()) items_.emplace_back();
    Item& item = items_[num_items_++];
    item.rank = r;
    item.options.clear();  // keeps its capacity: the search calls this a lot
    return item;
  }

  // Options of a sender: every prune beyond `start` (up to `end`) raises its coverage, by
  // at least one unit; stop once the gain reaches `target`. While it still sends, its
  // least send count y(z) = ceil((c (n - z) - t) / (c - tau)) falls by c / (c - tau) per
  // prune, so it is tracked incrementally and only checked against the load formula.
  void FillSenderOptions(double t, int32_t start, int32_t end, int64_t target, Item* item) const {
    const int32_t r = item->rank;
    const int64_t base = Coverage(r, t, start);
    if (pb_.cordoned[r]) {  // a pruned unit is one unit it need not send
      for (int32_t zz = start + 1; zz <= end && zz - start <= target; ++zz) {
        item->options.push_back({zz - start, zz - start});
      }
      return;
    }
    const double c = pb_.c[r], tau = pb_.tau;
    const int64_t n = pb_.owned[r];
    const double step = c / (c - tau);
    double q = (c * static_cast<double>(n - start) - t) / (c - tau);
    int64_t last = 0;
    for (int32_t zz = start + 1; zz <= end; ++zz) {
      const int64_t left = n - zz;
      int64_t gain;
      if (Load(c, tau, left, 0) <= t) {
        gain = Coverage(r, t, zz) - base;  // keeps everything from here on
      } else {
        q -= step;
        int64_t y = std::clamp<int64_t>(static_cast<int64_t>(std::ceil(q)), 1, left);
        while (y > 1 && Load(c, tau, left - (y - 1), y - 1) <= t) --y;
        while (y < left && Load(c, tau, left - y, y) > t) ++y;
        gain = n - y - base;
      }
      if (gain <= last) continue;
      item->options.push_back({zz - start, gain});
      last = gain;
      if (gain >= target) break;
    }
  }

  // Options of a rank that keeps all its units from `start` prunes on: the g-th extra unit
  // it can take needs the smallest z with c (n - z + x) + tau x <= t, x its units received;
  // found directly for each g rather than by scanning z.
  void FillReceiverOptions(double t, int32_t start, int32_t end, int64_t target, Item* item) const {
    const int32_t r = item->rank;
    const double c = pb_.c[r], tau = pb_.tau;
    const int64_t n = pb_.owned[r];
    const int64_t max_in = std::max<int64_t>(0, pb_.total - n);
    const int64_t x0 = Coverage(r, t, start) - n;
    auto fits = [&](int64_t zz, int64_t x) { return Load(c, tau, n - zz + x, x) <= t; };
    for (int64_t g = 1; g <= target && x0 + g <= max_in; ++g) {
      const int64_t x = x0 + g;
      const double estimate = std::ceil(static_cast<double>(n + x) - (t - tau * x) / c);
      int64_t zz = std::clamp<int64_t>(static_cast<int64_t>(std::max(estimate, 0.0)), start + 1,
                                       int64_t{end} + 1);
      while (zz - 1 > start && fits(zz - 1, x)) --zz;
      while (zz <= end && !fits(zz, x)) ++zz;
      if (zz > end) break;
      const int32_t cost = static_cast<int32_t>(zz - start);
      // One prune never adds two units here (c / (c + tau) < 1), except by rounding.
      if (!item->options.empty() && item->options.back().cost >= cost) item->options.pop_back();
      item->options.push_back({cost, g});
    }
  }

  // Fewest total extra prunes (<= budget) whose gains sum to >= target over items_; each
  // item takes at most one option. Adds the chosen prunes to z when non-null. First tries
  // the LP's rounded solution (RoundLp): when it costs no more than ceil(LP) it is optimal.
  //
  // A DP over "coverage gained so far" (which can run to hundreds of units when many ranks
  // prune many units), pruned: a state is expanded only if its cost plus an LP bound for
  // the items still to come (their options' concave hulls, filled steepest first) fits
  // under a limit. Limits are tried from the LP bound up to a greedy solution's cost; the
  // LP-to-integer gap is a few prunes, so only states near the LP's path survive, and the
  // first limit that admits a solution yields the exact optimum.
  int64_t Knapsack(int64_t target, int64_t budget, std::vector<int32_t>* z) {
    const int64_t cap = std::min(budget, PrepareBounds(target));
    const double root = RestBound(0, target);
    if (!std::isfinite(root)) return kNoPlan;
    // Tight limits first: few states survive them, and the first limit that succeeds gives
    // the exact optimum, since no state on an optimal path is ever cut.
    int64_t limit = std::max<int64_t>(0, static_cast<int64_t>(std::ceil(root - 1e-7)));
    // Usually the LP's own solution, rounded up to whole options, already costs no more
    // than that first limit. It is feasible, so it is then optimal and the DP can be
    // skipped: the DP at that limit could find nothing cheaper (no integer solution costs
    // less than the LP), which is exactly the test it would pass.
    if (limit <= budget) {
      const int64_t rounded = RoundLp(target);
      if (rounded <= limit) {
        if (z != nullptr) {
          for (size_t i = 0; i < num_items_; ++i) {
            if (chosen_[i] >= 0) (*z)[items_[i].rank] += items_[i].options[chosen_[i]].cost;
          }
        }
        return rounded;
      }
    }
    FillDense(target);
    for (int64_t step = 1;; step *= 2) {
      if (limit >= cap) return RunDp(target, cap, z);
      const int64_t got = RunDp(target, limit, z);
      if (got != kNoPlan) return got;
      limit += step;
    }
  }

  // A feasible solution read off the LP (call after PrepareBounds): the LP fills the items'
  // hull segments steepest first, so each item gets a prefix of its hull, ending at one of
  // its options, except the last segment, taken in part; take that one whole. Then, item
  // by item, drop to the cheapest option that still keeps the total gain >= target.
  // Leaves the chosen option per item in chosen_ (-1: none); returns the cost (kNoPlan if
  // even the whole LP falls short).
  int64_t RoundLp(int64_t target) {
    const size_t k = num_items_;
    chosen_.assign(k, -1);
    took_gain_.assign(k, 0);
    int64_t gained = 0;
    for (const Segment& seg : segments_) {  // after PrepareBounds: all items, steepest first
      if (gained >= target) break;
      const int64_t g = std::llround(seg.gain);
      took_gain_[seg.item] += g;
      gained += g;
    }
    if (gained < target) return kNoPlan;
    int64_t cost = 0;
    for (size_t i = 0; i < k; ++i) {
      if (took_gain_[i] == 0) continue;
      const std::vector<Option>& options = items_[i].options;
      const int64_t want = took_gain_[i] - (gained - target);  // what it must still give
      int32_t pick = -1;
      if (want > 0) {
        for (size_t j = 0; j < options.size(); ++j) {
          if (options[j].gain >= want) {
            pick = static_cast<int32_t>(j);
            break;
          }
        }
        if (pick < 0) return kNoPlan;  // cannot happen: its hull vertex is an option
      }
      const int64_t gives = pick < 0 ? 0 : options[pick].gain;
      gained += gives - took_gain_[i];
      chosen_[i] = pick;
      if (pick >= 0) cost += options[pick].cost;
    }
    return cost;
  }

  // The DP itself, keeping only states whose cost plus LP completion fits under `upper`.
  int64_t RunDp(int64_t target, int64_t upper, std::vector<int32_t>* z) {
    constexpr int32_t kBig = std::numeric_limits<int32_t>::max() / 2;
    const size_t width = static_cast<size_t>(target) + 1;
    const size_t k = num_items_;
    // Bounds compare a fractional LP cost with integer costs; the slack absorbs rounding.
    const double limit = static_cast<double>(upper) + 1e-7;
    const bool track = z != nullptr;
    if (track && pick_.size() < k * width) {
      pick_.resize(k * width);
      prev_.resize(k * width);
      stamp_.resize(k * width, 0);
    }
    ++epoch_;
    // In place, over the live states only, largest first: an option only raises the
    // state, so nothing written for this item is expanded again by it.
    dp_.assign(width, kBig);
    dp_[0] = 0;
    live_.assign(1, 0);
    listed_.assign(width, 0);  // in live_ or fresh_: each state is expanded once per item
    listed_[0] = 1;
    for (size_t i = 0; i < k; ++i) {
      std::sort(live_.begin(), live_.end(), std::greater<>());
      fresh_.clear();
      const std::vector<Option>& options = items_[order_[i]].options;
      for (const int32_t g : live_) {
        const int32_t here = dp_[g];
        if (here + RestBound(i, target - g) > limit) {
          dp_[g] = kBig;  // cannot finish within `upper`
          continue;
        }
        for (size_t j = 0; j < options.size(); ++j) {
          const int64_t cost = int64_t{here} + options[j].cost;
          if (cost > upper) break;  // options grow in cost
          const int32_t ng = static_cast<int32_t>(std::min<int64_t>(target, g + options[j].gain));
          if (cost >= dp_[ng]) continue;
          if (static_cast<double>(cost) + RestBound(i + 1, target - ng) > limit) continue;
          if (!listed_[ng]) {
            listed_[ng] = 1;
            fresh_.push_back(ng);
          }
          dp_[ng] = static_cast<int32_t>(cost);
          if (track) {
            const size_t at = i * width + static_cast<size_t>(ng);
            stamp_[at] = epoch_;
            pick_[at] = static_cast<int32_t>(j);
            prev_[at] = g;
          }
        }
      }
      live_.erase(std::remove_if(live_.begin(), live_.end(),
                                 [&](int32_t g) {
                                   if (dp_[g] < kBig) return false;
                                   listed_[g] = 0;
                                   return true;
                                 }),
                  live_.end());
      live_.insert(live_.end(), fresh_.begin(), fresh_.end());
    }
    if (dp_[width - 1] >= kBig) return kNoPlan;
    if (track) {
      size_t g = width - 1;
      for (size_t i = k; i-- > 0;) {
        const size_t at = i * width + g;
        if (stamp_[at] != epoch_) continue;  // this item added nothing on the path
        const Item& item = items_[order_[i]];
        (*z)[item.rank] += item.options[pick_[at]].cost;
        g = static_cast<size_t>(prev_[at]);
      }
    }
    return dp_[width - 1];
  }

  // Least fractional cost to gain h from items i.. on (kInf if they cannot).
  double RestBound(size_t i, int64_t h) const {
    if (h <= 0) return 0;
    if (!dense_.empty()) return dense_[i * dense_width_ + static_cast<size_t>(h)];
    const size_t from = rest_begin_[i], to = rest_end_[i];
    const double want = static_cast<double>(h);
    // First cumulative point that reaches h.
    size_t lo = from, hi = to;
    while (lo < hi) {
      const size_t mid = (lo + hi) / 2;
      if (rest_[mid].gain >= want) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    if (lo == to) return kInf;
    const double gain0 = lo == from ? 0.0 : rest_[lo - 1].gain;
    const double cost0 = lo == from ? 0.0 : rest_[lo - 1].cost;
    return cost0 + (want - gain0) * (rest_[lo].cost - cost0) / (rest_[lo].gain - gain0);
  }

  // RestBound as a table, for the DP: small tables are cheaper to fill (one walk per
  // suffix) than to search pair by pair. Call after PrepareBounds.
  void FillDense(int64_t target) {
    const size_t k = num_items_;
    const size_t width = static_cast<size_t>(target) + 1;
    if ((k + 1) * width <= 1024) {
      dense_.assign((k + 1) * width, kInf);
      for (size_t i = 0; i <= k; ++i) {
        double* row = &dense_[i * width];
        row[0] = 0;
        size_t at = rest_begin_[i];
        for (size_t h = 1; h < width; ++h) {
          const double want = static_cast<double>(h);
          while (at < rest_end_[i] && rest_[at].gain < want) ++at;
          if (at == rest_end_[i]) break;  // the rest stay kInf
          const double gain0 = at == rest_begin_[i] ? 0.0 : rest_[at - 1].gain;
          const double cost0 = at == rest_begin_[i] ? 0.0 : rest_[at - 1].cost;
          row[h] = cost0 + (want - gain0) * (rest_[at].cost - cost0) / (rest_[at].gain - gain0);
        }
      }
      dense_width_ = width;
    }
  }

  // For the knapsack: orders the items by efficiency (order_), builds the suffix
  // LP bounds (rest_: the cumulative hull points of items order_[i..] merged by slope) and
  // returns a greedy solution's cost (kNoPlan if the greedy finds none).
  int64_t PrepareBounds(int64_t target) {
    const size_t k = num_items_;
    order_.resize(k);
    for (size_t i = 0; i < k; ++i) order_[i] = i;
    // Upper concave hull of each item's (cost, gain) points from the origin: few segments,
    // since the gains are floors of a line. A monotone chain over the integer points (the
    // cross products are exact in int64), then cut into segments.
    if (hulls_.size() < k) hulls_.resize(k);
    for (size_t i = 0; i < k; ++i) {
      const std::vector<Option>& options = items_[i].options;
      chain_.resize(options.size() + 1);
      size_t top = 0;
      chain_[top++] = {0, 0};
      for (const Option& o : options) {
        // Drop the last vertex while o is at least as steep from the one before it.
        while (top >= 2) {
          const Option& v0 = chain_[top - 2];
          const Option& v1 = chain_[top - 1];
          if ((o.gain - v1.gain) * int64_t{v1.cost - v0.cost} <
              (v1.gain - v0.gain) * int64_t{o.cost - v1.cost}) {
            break;
          }
          --top;
        }
        chain_[top++] = o;
      }
      std::vector<Segment>& hull = hulls_[i];
      hull.resize(top - 1);
      for (size_t j = 1; j < top; ++j) {
        hull[j - 1] = {static_cast<double>(chain_[j].cost - chain_[j - 1].cost),
                       static_cast<double>(chain_[j].gain - chain_[j - 1].gain), i};
      }
    }
    // Most efficient item first, so that the bound bites early.
    auto first_slope = [&](size_t i) {
      return hulls_[i].empty() ? 0.0 : hulls_[i][0].gain / hulls_[i][0].cost;
    };
    std::stable_sort(order_.begin(), order_.end(),
                     [&](size_t a, size_t b) { return first_slope(a) > first_slope(b); });
    // Suffixes from the last item backwards, merging each hull into the running
    // slope-sorted list and appending its cumulative points to rest_.
    auto steeper = [](const Segment& a, const Segment& b) {
      return a.gain * b.cost > b.gain * a.cost;
    };
    rest_.clear();
    rest_begin_.assign(k + 1, 0);
    rest_end_.assign(k + 1, 0);
    segments_.clear();
    for (size_t i = k; i-- > 0;) {
      const std::vector<Segment>& hull = hulls_[order_[i]];
      merged_.clear();
      std::merge(segments_.begin(), segments_.end(), hull.begin(), hull.end(),
                 std::back_inserter(merged_), steeper);
      std::swap(segments_, merged_);
      rest_begin_[i] = rest_.size();
      double cost = 0, gain = 0;
      for (const Segment& seg : segments_) {
        cost += seg.cost;
        gain += seg.gain;
        rest_.push_back({cost, gain, 0});
      }
      rest_end_[i] = rest_.size();
    }
    dense_.clear();  // FillDense builds it, once the DP is needed

    // Greedy: most efficient items first, each the cheapest option that finishes, else
    // its largest.
    int64_t cost = 0, left = target;
    for (size_t i = 0; i < k; ++i) {
      const std::vector<Option>& options = items_[order_[i]].options;
      if (options.empty()) continue;
      const Option* finish = nullptr;
      for (const Option& o : options) {
        if (o.gain >= left) {
          finish = &o;
          break;
        }
      }
      const Option& take = finish != nullptr ? *finish : options.back();
      cost += take.cost;
      left -= take.gain;
      if (left <= 0) return cost;
    }
    return kNoPlan;
  }

  const Problem& pb_;
  std::vector<Piece> pieces_;
  // Scratch, reused across calls so that the search allocates almost nothing.
  std::vector<double> len_send_, len_keep_;
  std::vector<int32_t> m_, e_;
  std::vector<int64_t> base_;
  std::vector<Item> items_;  // the first num_items_ are in use
  size_t num_items_ = 0;
  std::vector<int32_t> dp_, live_, fresh_, pick_, prev_;
  std::vector<char> listed_;
  std::vector<uint64_t> stamp_;
  uint64_t epoch_ = 0;
  std::vector<std::vector<Segment>> hulls_;
  std::vector<Segment> segments_, merged_, rest_;
  std::vector<size_t> rest_begin_, rest_end_;
  std::vector<double> dense_;  // RestBound(i, h) at [i * dense_width_ + h], when small
  size_t dense_width_ = 0;
  std::vector<size_t> order_;
  std::vector<Option> chain_;       // PrepareBounds' hull scratch
  std::vector<int32_t> chosen_;     // RoundLp's option per item
  std::vector<int64_t> took_gain_;  // RoundLp's scratch
};

Solution FromCoverage(const Problem& pb, const std::vector<int32_t>& z,
                      const std::vector<int64_t>& v) {
  Solution s;
  s.feasible = true;
  s.z = z;
  s.y.assign(pb.p, 0);
  s.x.assign(pb.p, 0);
  for (int32_t r = 0; r < pb.p; ++r) {
    if (v[r] < pb.owned[r]) s.y[r] = static_cast<int32_t>(pb.owned[r] - v[r]);
    if (v[r] > pb.owned[r]) s.x[r] = static_cast<int32_t>(v[r] - pb.owned[r]);
  }
  Price(pb, &s);
  return s;
}

Solution SolveMigrate(const Problem& pb, TransferSolver& solver) {
  std::vector<int64_t> v;
  solver.MinStepWithoutPruning(&v);
  return FromCoverage(pb, std::vector<int32_t>(pb.p, 0), v);
}

// Best-first branch and bound over the step time (see the comment at the top). `seed` is
// the best plan known (migrate, or resize if better); returns the optimum.
Solution SolveAuto(const Problem& pb, TransferSolver& solver, const Solution& migrate,
                   const Solution& resize) {
  int64_t resize_pruned = 0;
  if (resize.feasible) {
    for (int32_t zr : resize.z) resize_pruned += zr;
  }
  struct Best {
    double t;
    int64_t k;
    double objective;
    int source;  // 0 migrate, 1 resize, 2 searched
  } best{migrate.step, 0, migrate.objective, 0};
  if (resize.feasible && resize.objective < best.objective - kRelTol * best.objective) {
    best = {resize.step, resize_pruned, resize.objective, 1};
  }
  auto consider = [&](double t, int64_t k) {
    const double obj = t + pb.lambda * static_cast<double>(k);
    const double tol = kRelTol * best.objective;
    if (obj < best.objective - tol || (obj <= best.objective + tol && k < best.k)) {
      best = {t, k, obj, 2};
    }
  };

  bool can_prune = pb.group_cap > 0;
  if (can_prune) {
    can_prune = false;
    for (int32_t cap : pb.prune_cap) can_prune = can_prune || cap > 0;
  }
  if (can_prune) {
    // (a, b): step-time interval; ka = prunes needed at a (-1: not evaluated); kb at b;
    // exact: b is the left end of its step (fewer than kb prunes cannot reach below b).
    struct Node {
      double a;
      int64_t ka;
      double b;
      int64_t kb;
      bool exact;
      double lp_b;  // LpPrunes(b) or a smaller lower bound on prunes below b
      double bound;
    };
    auto bound_of = [&](double a, int64_t kb, bool exact, double lp_b) {
      if (!std::isfinite(lp_b)) return kInf;
      const double lp_k = std::ceil(lp_b * (1 - 1e-12) - 1e-9);
      const double k = std::max(static_cast<double>(kb) + (exact ? 1.0 : 0.0), lp_k);
      return a + pb.lambda * k;
    };
    auto cmp = [](const Node& x, const Node& y) { return x.bound > y.bound; };
    std::priority_queue<Node, std::vector<Node>, decltype(cmp)> open(cmp);
    auto push = [&](double a, int64_t ka, double b, int64_t kb, bool exact, double lp_b) {
      const double bound = bound_of(a, kb, exact, lp_b);
      if (bound >= best.objective - kRelTol * best.objective) return;
      open.push({a, ka, b, kb, exact, lp_b, bound});
    };
    push(0.0, -1, migrate.step, 0, true, solver.LpPrunes(migrate.step));
    std::vector<int32_t> z;
    std::vector<int64_t> v;
    while (!open.empty()) {
      const Node node = open.top();
      open.pop();
      if (node.bound >= best.objective - kRelTol * best.objective) break;  // best-first
      // Steps starting inside (a, b) need fewer prunes than at a: none if ka is too small.
      if (node.ka >= 0 && node.ka <= node.kb + (node.exact ? 1 : 0)) continue;
      if (node.b - node.a <= kRelTol * node.b) continue;
      if ((node.ka >= 0 && node.ka <= node.kb + 2) || node.b - node.a <= 1e-6 * node.b) {
        // At most a step or two can start in (a, b), or it is tiny: rather than halving down
        // to rounding, look just below b. Every load value is a double, so MinPrunes at the
        // double below b is its value on the whole step left of b: either b is where its
        // step starts, or the search moves to a lower plan.
        const double below = std::nextafter(node.b, 0.0);
        if (!(below > node.a)) continue;
        const int64_t kp = solver.MinPrunes(below, &z);
        if (kp == kNoPlan) continue;  // nor anything below it
        const double reached = solver.Balance(below, z, &v);
        consider(reached, kp);
        push(node.a, node.ka, reached, kp, false, node.lp_b);
        continue;
      }
      const double mid = 0.5 * (node.a + node.b);
      if (!(mid > node.a && mid < node.b)) continue;
      const double lp_mid = solver.LpPrunes(mid);
      // Anything in (a, mid] needs at least kb prunes (more if b starts its step) and at
      // least LP(mid).
      const double left_bound = bound_of(node.a, node.kb, node.exact, lp_mid);
      if (left_bound >= best.objective - kRelTol * best.objective) {
        push(mid, -1, node.b, node.kb, node.exact, node.lp_b);
        continue;
      }
      const int64_t km = solver.MinPrunes(mid, &z);
      if (km == kNoPlan) {
        push(mid, kNoPlan, node.b, node.kb, node.exact, node.lp_b);
        continue;
      }
      // The best plan with km prunes reaches `reached` <= mid, so km prunes suffice on
      // [reached, mid] and steps left of it start at or below `reached`.
      const double reached = solver.Balance(mid, z, &v);
      consider(reached, km);
      push(node.a, node.ka, reached, km, false, lp_mid);
      push(mid, km, node.b, node.kb, node.exact, node.lp_b);
    }
  }

  if (best.source == 0) return migrate;
  if (best.source == 1) return resize;
  std::vector<int32_t> z;
  std::vector<int64_t> v;
  solver.MinPrunes(best.t, &z);
  solver.Balance(best.t, z, &v);
  return FromCoverage(pb, z, v);
}

// Owners and helpers matched in rank order: deterministic, and each pair appears once.
std::vector<Offload> PairOffloads(const std::vector<int32_t>& y, const std::vector<int32_t>& x) {
  std::vector<Offload> out;
  size_t o = 0, h = 0;
  int32_t left_o = y.empty() ? 0 : y[0], left_h = x.empty() ? 0 : x[0];
  while (true) {
    while (o < y.size() && left_o == 0) {
      if (++o < y.size()) left_o = y[o];
    }
    while (h < x.size() && left_h == 0) {
      if (++h < x.size()) left_h = x[h];
    }
    if (o >= y.size() || h >= x.size()) break;
    const int32_t units = std::min(left_o, left_h);
    out.push_back({RankId(static_cast<int32_t>(o)), RankId(static_cast<int32_t>(h)), units});
    left_o -= units;
    left_h -= units;
  }
  return out;
}

PlanCandidate MakeCandidate(CandidateKind kind, BlockId block, const Problem& pb,
                            const Solution& s) {
  PlanCandidate cand;
  cand.kind = kind;
  cand.plan.block = block;
  cand.feasible = s.feasible;
  if (!s.feasible) {
    cand.note = s.reason;
    return cand;
  }
  bool any_pruned = false;
  for (int32_t zr : s.z) any_pruned = any_pruned || zr > 0;
  if (any_pruned) cand.plan.pruned_units = s.z;
  cand.plan.offloads = PairOffloads(s.y, s.x);
  cand.cost.step_seconds = s.step;
  cand.cost.objective = s.objective;
  cand.cost.rank_seconds.resize(pb.p);
  for (int32_t r = 0; r < pb.p; ++r) {
    cand.cost.pruned_units += s.z[r];
    cand.cost.offloaded_units += s.y[r];
    cand.cost.rank_seconds[r] = Load(
        pb.c[r], pb.tau, int64_t{pb.owned[r]} - s.z[r] - s.y[r] + s.x[r], int64_t{s.y[r]} + s.x[r]);
  }
  return cand;
}

// The best plans for `mode` on the ownership `owned`. For auto: resize-only, migrate-only
// and the joint optimum; otherwise the one technique.
struct ModePlans {
  Solution resize, migrate, joint;
  Solution& best(BalanceMode mode) {
    return mode == BalanceMode::kResize ? resize : mode == BalanceMode::kMigrate ? migrate : joint;
  }
};

ModePlans SolveMode(const PlannerInput& input, const std::vector<int32_t>& owned,
                    const JobPolicy& policy, BalanceMode mode) {
  ModePlans out;
  const Problem pb = MakeProblem(input, owned, policy, mode);
  if (PrunesAllowed(mode)) out.resize = SolveResize(pb);
  if (TransfersAllowed(mode)) {
    // Migrate-only must not prune: solve it on a copy with no prune budget.
    Problem no_prune = pb;
    no_prune.prune_cap.assign(pb.p, 0);
    no_prune.group_cap = 0;
    TransferSolver migrate_solver(no_prune);
    out.migrate = SolveMigrate(no_prune, migrate_solver);
    if (mode == BalanceMode::kAuto) {
      TransferSolver solver(pb);
      out.joint = SolveAuto(pb, solver, out.migrate, out.resize);
    }
  }
  return out;
}

std::vector<int32_t> OwnedCounts(const PlannerInput& input) {
  std::vector<int32_t> owned;
  for (const PlannerRank& r : input.ranks) owned.push_back(r.owned_units);
  return owned;
}

std::string Num(double v) { return absl::StrFormat("%.6g", v); }

// "prune 7:32; offload 7->0:4 7->1:4; reshard to 68,68,34 (moves 30)".
std::string DescribePlan(const BlockPlan& plan, int32_t ranks) {
  std::vector<std::string> parts;
  if (!plan.pruned_units.empty()) {
    std::string part = "prune";
    for (size_t r = 0; r < plan.pruned_units.size(); ++r) {
      if (plan.pruned_units[r] > 0) absl::StrAppend(&part, " ", r, ":", plan.pruned_units[r]);
    }
    parts.push_back(std::move(part));
  }
  if (!plan.offloads.empty()) {
    std::string part = "offload";
    for (const Offload& o : plan.offloads) {
      absl::StrAppend(&part, " ", o.owner.value(), "->", o.helper.value(), ":", o.units);
    }
    parts.push_back(std::move(part));
  }
  if (!plan.owner_of_unit.empty()) {
    std::vector<int32_t> counts(ranks, 0);
    for (RankId r : plan.owner_of_unit) {
      if (r.value() >= 0 && r.value() < ranks) ++counts[r.value()];
    }
    parts.push_back(absl::StrCat("reshard to ", absl::StrJoin(counts, ",")));
  }
  return parts.empty() ? "all local" : absl::StrJoin(parts, "; ");
}

}  // namespace

absl::string_view CandidateKindName(CandidateKind kind) {
  switch (kind) {
    case CandidateKind::kAllLocal:
      return "all-local";
    case CandidateKind::kResize:
      return "resize";
    case CandidateKind::kMigrate:
      return "migrate";
    case CandidateKind::kAuto:
      return "auto";
    case CandidateKind::kReshard:
      return "reshard";
    case CandidateKind::kCurrent:
      return "current";
  }
  return "unknown";
}

int64_t PruneBudget(double fraction, int64_t units) {
  return static_cast<int64_t>(std::floor(fraction * static_cast<double>(units) + 1e-9));
}

absl::Status ValidatePlannerInput(const PlannerInput& input) {
  const size_t p = input.ranks.size();
  if (p == 0) return absl::InvalidArgumentError("ranks is empty");
  bool any_active = false;
  for (size_t r = 0; r < p; ++r) {
    const PlannerRank& rank = input.ranks[r];
    if (!std::isfinite(rank.seconds_per_unit) || rank.seconds_per_unit <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ranks[", r, "].seconds_per_unit ", rank.seconds_per_unit, " must be finite and > 0"));
    }
    if (rank.owned_units < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("ranks[", r, "].owned_units ", rank.owned_units, " must be >= 0"));
    }
    any_active = any_active || !rank.cordoned;
  }
  if (!any_active) {
    return absl::InvalidArgumentError(
        absl::StrCat("ranks: all ", p, " ranks are cordoned; at least one must compute"));
  }
  const double tau = input.transfer_seconds_per_unit;
  if (!std::isfinite(tau) || tau < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("transfer_seconds_per_unit ", tau, " must be finite and >= 0"));
  }
  std::vector<int64_t> counted(p, 0);
  for (size_t u = 0; u < input.owner_of_unit.size(); ++u) {
    const int32_t owner = input.owner_of_unit[u].value();
    if (owner < 0 || static_cast<size_t>(owner) >= p) {
      return absl::InvalidArgumentError(
          absl::StrCat("owner_of_unit[", u, "] = ", owner, " out of range [0, ", p, ")"));
    }
    ++counted[owner];
  }
  for (size_t r = 0; r < p; ++r) {
    if (counted[r] != input.ranks[r].owned_units) {
      return absl::InvalidArgumentError(
          absl::StrCat("ranks[", r, "].owned_units ", input.ranks[r].owned_units,
                       " but owner_of_unit gives rank ", r, " ", counted[r], " units"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> WaterFillCounts(const std::vector<PlannerRank>& ranks,
                                                     int32_t num_units) {
  if (num_units < 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_units ", num_units, " must be >= 0"));
  }
  double inverse_sum = 0;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const double c = ranks[r].seconds_per_unit;
    if (!std::isfinite(c) || c <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("ranks[", r, "].seconds_per_unit ", c, " must be finite and > 0"));
    }
    if (!ranks[r].cordoned) inverse_sum += 1 / c;
  }
  if (inverse_sum == 0) {
    return absl::InvalidArgumentError("ranks: all ranks are cordoned; nobody can own units");
  }
  // The greedy hands out the N cheapest "levels" c_r * j (j-th unit of rank r), ties to
  // the lower rank. Every level strictly below the fractional water level is among them,
  // so take those at once and hand out the few remaining units one by one.
  const double level = static_cast<double>(num_units) / inverse_sum * (1 - 1e-9);
  std::vector<int32_t> counts(ranks.size(), 0);
  int64_t assigned = 0;
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (ranks[r].cordoned) continue;
    const double c = ranks[r].seconds_per_unit;
    int64_t j = static_cast<int64_t>(std::min(level / c, static_cast<double>(num_units)));
    while (j > 0 && !(c * static_cast<double>(j) < level)) --j;
    counts[r] = static_cast<int32_t>(j);
    assigned += j;
  }
  if (assigned > num_units) {  // cannot happen; fall back to the plain greedy
    std::fill(counts.begin(), counts.end(), 0);
    assigned = 0;
  }
  for (; assigned < num_units; ++assigned) {
    size_t pick = ranks.size();
    double pick_level = kInf;
    for (size_t r = 0; r < ranks.size(); ++r) {
      if (ranks[r].cordoned) continue;
      const double next = ranks[r].seconds_per_unit * static_cast<double>(counts[r] + 1);
      if (next < pick_level) {
        pick_level = next;
        pick = r;
      }
    }
    ++counts[pick];
  }
  return counts;
}

std::vector<RankId> MoveUnits(const std::vector<RankId>& owner_of_unit,
                              const std::vector<int32_t>& new_counts) {
  const size_t p = new_counts.size();
  std::vector<RankId> out = owner_of_unit;
  std::vector<int32_t> kept(p, 0), old_counts(p, 0);
  for (RankId r : owner_of_unit) ++old_counts[r.value()];
  std::vector<size_t> freed;
  for (size_t u = 0; u < owner_of_unit.size(); ++u) {
    const int32_t r = owner_of_unit[u].value();
    if (kept[r] < std::min(old_counts[r], new_counts[r])) {
      ++kept[r];
    } else {
      freed.push_back(u);
    }
  }
  size_t next = 0;
  for (size_t r = 0; r < p; ++r) {
    for (int32_t i = kept[r]; i < new_counts[r] && next < freed.size(); ++i) {
      out[freed[next++]] = RankId(static_cast<int32_t>(r));
    }
  }
  return out;
}

absl::StatusOr<PlanCost> EvaluatePlan(const PlannerInput& input, const JobPolicy& policy,
                                      const BlockPlan& plan) {
  BALLAST_RETURN_IF_ERROR(ValidatePlannerInput(input));
  if (absl::Status s = ValidatePolicy(policy); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("policy: ", s.message()));
  }
  const int32_t p = static_cast<int32_t>(input.ranks.size());
  const size_t total = input.owner_of_unit.size();
  std::vector<int32_t> owned = OwnedCounts(input);
  PlanCost cost;
  if (!plan.owner_of_unit.empty()) {
    if (plan.owner_of_unit.size() != total) {
      return absl::InvalidArgumentError(absl::StrCat("plan.owner_of_unit has ",
                                                     plan.owner_of_unit.size(),
                                                     " entries, block has ", total, " units"));
    }
    std::fill(owned.begin(), owned.end(), 0);
    for (size_t u = 0; u < total; ++u) {
      const int32_t r = plan.owner_of_unit[u].value();
      if (r < 0 || r >= p) {
        return absl::InvalidArgumentError(
            absl::StrCat("plan.owner_of_unit[", u, "] = ", r, " out of range [0, ", p, ")"));
      }
      ++owned[r];
      if (plan.owner_of_unit[u] != input.owner_of_unit[u]) ++cost.moved_units;
    }
  }
  std::vector<int64_t> z(p, 0), y(p, 0), x(p, 0);
  if (!plan.pruned_units.empty()) {
    if (plan.pruned_units.size() != static_cast<size_t>(p)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "plan.pruned_units has ", plan.pruned_units.size(), " entries, group has ", p, " ranks"));
    }
    for (int32_t r = 0; r < p; ++r) {
      if (plan.pruned_units[r] < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("plan.pruned_units[", r, "] = ", plan.pruned_units[r], " must be >= 0"));
      }
      z[r] = plan.pruned_units[r];
    }
  }
  for (size_t i = 0; i < plan.offloads.size(); ++i) {
    const Offload& o = plan.offloads[i];
    const int32_t owner = o.owner.value(), helper = o.helper.value();
    if (owner < 0 || owner >= p || helper < 0 || helper >= p || owner == helper || o.units <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("plan.offloads[", i, "] ", owner, "->", helper,
                                                     " x", o.units, " is malformed"));
    }
    for (size_t j = 0; j < i; ++j) {
      if (plan.offloads[j].owner == o.owner && plan.offloads[j].helper == o.helper) {
        return absl::InvalidArgumentError(
            absl::StrCat("plan.offloads[", i, "] repeats ", owner, "->", helper));
      }
    }
    y[owner] += o.units;
    x[helper] += o.units;
  }
  for (int32_t r = 0; r < p; ++r) {
    if (z[r] + y[r] > owned[r]) {
      return absl::InvalidArgumentError(absl::StrCat("plan: rank ", r, " prunes ", z[r],
                                                     " and offloads ", y[r], " units but owns ",
                                                     owned[r]));
    }
  }
  const BalanceMode mode = PlanningMode(policy.mode);
  if (!TransfersAllowed(mode) && (!plan.offloads.empty() || !plan.owner_of_unit.empty())) {
    return absl::FailedPreconditionError("mode resize: the plan offloads or reshards");
  }
  const int64_t group_cap =
      PrunesAllowed(mode) ? PruneBudget(policy.max_pruned_fraction_group, total) : 0;
  int64_t pruned = 0;
  for (int32_t r = 0; r < p; ++r) {
    const int64_t cap =
        PrunesAllowed(mode) ? PruneBudget(policy.max_pruned_fraction_rank, owned[r]) : 0;
    if (z[r] > cap) {
      return absl::FailedPreconditionError(
          absl::StrCat("plan.pruned_units[", r, "] = ", z[r], " exceeds the budget ", cap,
                       " (mode ", BalanceModeName(policy.mode), ", max_pruned_fraction_rank ",
                       policy.max_pruned_fraction_rank, " of ", owned[r], " units)"));
    }
    pruned += z[r];
  }
  if (pruned > group_cap) {
    return absl::FailedPreconditionError(
        absl::StrCat("plan prunes ", pruned, " units, over the group budget ", group_cap,
                     " (max_pruned_fraction_group ", policy.max_pruned_fraction_group, ")"));
  }
  const double tau = input.transfer_seconds_per_unit;
  cost.rank_seconds.resize(p);
  for (int32_t r = 0; r < p; ++r) {
    const int64_t u = owned[r] - z[r] - y[r] + x[r];
    if (input.ranks[r].cordoned && (u != 0 || x[r] != 0)) {
      return absl::FailedPreconditionError(
          absl::StrCat("rank ", r, " is cordoned but the plan has it compute ", u, " units"));
    }
    cost.rank_seconds[r] = Load(input.ranks[r].seconds_per_unit, tau, u, y[r] + x[r]);
    cost.step_seconds = std::max(cost.step_seconds, cost.rank_seconds[r]);
    cost.offloaded_units += static_cast<int32_t>(y[r]);
  }
  cost.pruned_units = static_cast<int32_t>(pruned);
  const double lambda =
      total > 0 ? policy.accuracy_weight_seconds / static_cast<double>(total) : 0.0;
  cost.objective = cost.step_seconds + lambda * static_cast<double>(pruned);
  return cost;
}

absl::StatusOr<PlanCandidate> BestPlan(const PlannerInput& input, const JobPolicy& policy) {
  BALLAST_RETURN_IF_ERROR(ValidatePlannerInput(input));
  if (absl::Status s = ValidatePolicy(policy); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("policy: ", s.message()));
  }
  const BalanceMode mode = PlanningMode(policy.mode);
  const std::vector<int32_t> owned = OwnedCounts(input);
  ModePlans plans = SolveMode(input, owned, policy, mode);
  const Problem pb = MakeProblem(input, owned, policy, mode);
  const CandidateKind kind = mode == BalanceMode::kResize    ? CandidateKind::kResize
                             : mode == BalanceMode::kMigrate ? CandidateKind::kMigrate
                                                             : CandidateKind::kAuto;
  PlanCandidate cand = MakeCandidate(kind, input.block, pb, plans.best(mode));
  if (!cand.feasible) {
    return absl::FailedPreconditionError(
        absl::StrCat("mode ", BalanceModeName(policy.mode), ": ", cand.note));
  }
  return cand;
}

absl::StatusOr<BlockDecision> PlanBlock(const PlannerInput& input, const JobPolicy& policy,
                                        const BlockPlan* current) {
  BALLAST_RETURN_IF_ERROR(ValidatePlannerInput(input));
  if (absl::Status s = ValidatePolicy(policy); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("policy: ", s.message()));
  }
  const BalanceMode mode = PlanningMode(policy.mode);
  const std::vector<int32_t> owned = OwnedCounts(input);
  const Problem pb = MakeProblem(input, owned, policy, mode);

  BlockDecision d;
  double inverse_sum = 0;
  bool cordoned_owner = false, reshard_worth_pricing = false, any_cordoned = false;
  for (int32_t r = 0; r < pb.p; ++r) {
    const PlannerRank& rank = input.ranks[r];
    if (!rank.cordoned) inverse_sum += 1 / rank.seconds_per_unit;
    any_cordoned = any_cordoned || rank.cordoned;
    cordoned_owner = cordoned_owner || (rank.cordoned && rank.owned_units > 0);
    reshard_worth_pricing = reshard_worth_pricing || rank.cordoned || rank.chronic;
    d.all_local_step_seconds =
        std::max(d.all_local_step_seconds, Load(pb.c[r], pb.tau, rank.owned_units, 0));
  }
  d.ideal_step_seconds = static_cast<double>(pb.total) / inverse_sum;

  Solution all_local;
  all_local.feasible = true;
  all_local.z.assign(pb.p, 0);
  all_local.y.assign(pb.p, 0);
  all_local.x.assign(pb.p, 0);
  Price(pb, &all_local);
  d.candidates.push_back(MakeCandidate(CandidateKind::kAllLocal, input.block, pb, all_local));
  if (cordoned_owner) {
    d.candidates.back().feasible = false;
    d.candidates.back().note = "a cordoned rank would compute its units";
  }

  ModePlans plans = SolveMode(input, owned, policy, mode);
  if (PrunesAllowed(mode)) {
    d.candidates.push_back(MakeCandidate(CandidateKind::kResize, input.block, pb, plans.resize));
  }
  if (TransfersAllowed(mode)) {
    d.candidates.push_back(MakeCandidate(CandidateKind::kMigrate, input.block, pb, plans.migrate));
  }
  if (mode == BalanceMode::kAuto) {
    d.candidates.push_back(MakeCandidate(CandidateKind::kAuto, input.block, pb, plans.joint));
  }
  PlanCandidate best = d.candidates.back();
  if (!best.feasible) {
    return absl::FailedPreconditionError(
        absl::StrCat("block ", input.block.value(), " mode ", BalanceModeName(policy.mode), ": ",
                     best.note, "; allow migration (mode auto or migrate) or raise the budget"));
  }

  // Resharding pays one transfer plus optimizer state, so it is priced only for
  // persistent imbalance (a chronic straggler or a cordon), and chosen only when it beats
  // the best plan on the current ownership by the hysteresis, and, unless a rank is
  // cordoned, by as much as the straggler threshold: estimates differ by that much in
  // noise, and a split resharded on noise moves units back and forth (measured: one to
  // five units every 2 s dwell on a shaped link, tests/integration/learned_link_test.sh).
  if (TransfersAllowed(mode) && reshard_worth_pricing) {
    BALLAST_ASSIGN_OR_RETURN(std::vector<int32_t> filled,
                             WaterFillCounts(input.ranks, static_cast<int32_t>(pb.total)));
    PlanCandidate reshard;
    reshard.kind = CandidateKind::kReshard;
    reshard.plan.block = input.block;
    if (filled == owned) {
      reshard.note = "the water-filled ownership is the current one";
    } else {
      ModePlans moved = SolveMode(input, filled, policy, mode);
      const Problem moved_pb = MakeProblem(input, filled, policy, mode);
      reshard = MakeCandidate(CandidateKind::kReshard, input.block, moved_pb, moved.best(mode));
      reshard.plan.owner_of_unit = MoveUnits(input.owner_of_unit, filled);
      for (size_t u = 0; u < input.owner_of_unit.size(); ++u) {
        reshard.cost.moved_units += reshard.plan.owner_of_unit[u] != input.owner_of_unit[u];
      }
    }
    // A threshold t on speeds is t / (1 + t) on the objective, below 1 for any t. A cordon
    // is no estimate: draining it needs only the hysteresis.
    const double margin =
        any_cordoned ? policy.hysteresis
                     : std::max(policy.hysteresis,
                                policy.straggler_threshold / (1 + policy.straggler_threshold));
    const double needed = (1 - margin) * best.cost.objective;
    if (reshard.feasible && !(reshard.cost.objective < needed)) {
      reshard.note = absl::StrCat("not chosen: must beat ", Num(needed), " (by ", Num(margin),
                                  ": the hysteresis or the straggler threshold)");
    }
    d.candidates.push_back(reshard);
    if (reshard.feasible && reshard.cost.objective < needed) best = reshard;
  }
  d.recommended = best;

  // Calm ranks compute alike, so all-local is as good as the ownership is even: after a
  // reshard for a straggler that has since recovered it is not, and the planner balances.
  // Units that do not divide evenly leave one more on some ranks: that is still even.
  const int32_t most_owned =
      pb.p == 0 ? 0 : *std::max_element(pb.owned.begin(), pb.owned.end());
  const double share = pb.p == 0 ? 0 : static_cast<double>(pb.total) / pb.p;
  const bool even =
      most_owned <= std::max(std::ceil(share), (1 + policy.straggler_threshold) * share);
  d.calm = input.calm && !any_cordoned && even;
  if (policy.mode == BalanceMode::kOff || policy.mode == BalanceMode::kObserve || d.calm) {
    // Leaving a plan for a calm group skips the hysteresis: the plan was for a straggler
    // that is gone, and all-local moves no data.
    const PlanCandidate& local = d.candidates.front();
    d.plan = local.plan;
    d.predicted_step_seconds = local.cost.step_seconds;
    d.objective = local.cost.objective;
    d.chosen = CandidateKind::kAllLocal;
  } else {
    d.plan = best.plan;
    d.predicted_step_seconds = best.cost.step_seconds;
    d.objective = best.cost.objective;
    d.chosen = best.kind;
    if (current != nullptr) {
      PlanCandidate cur;
      cur.kind = CandidateKind::kCurrent;
      cur.plan = *current;
      cur.plan.block = input.block;
      // A reshard already applied is just the ownership now: do not re-send it.
      if (cur.plan.owner_of_unit == input.owner_of_unit) cur.plan.owner_of_unit.clear();
      absl::StatusOr<PlanCost> cost = EvaluatePlan(input, policy, cur.plan);
      if (cost.ok()) {
        cur.feasible = true;
        cur.cost = *std::move(cost);
        // Flapping between near-equal plans costs transfers and re-layouts for nothing.
        if (!(best.cost.objective < (1 - policy.hysteresis) * cur.cost.objective)) {
          d.plan = cur.plan;
          d.predicted_step_seconds = cur.cost.step_seconds;
          d.objective = cur.cost.objective;
          d.chosen = CandidateKind::kCurrent;
          d.kept_current = true;
        }
      } else {
        cur.note = std::string(cost.status().message());
      }
      d.candidates.push_back(std::move(cur));
    }
  }
  d.explanation = ExplainDecision(input, policy, d);
  return d;
}

std::string ExplainDecision(const PlannerInput& input, const JobPolicy& policy,
                            const BlockDecision& d) {
  std::string out = absl::StrCat(
      "block ", input.block.value(), " mode ", BalanceModeName(policy.mode), ": ",
      input.ranks.size(), " ranks, ", input.owner_of_unit.size(), " units, transfer ",
      Num(input.transfer_seconds_per_unit), " s/unit, accuracy weight ",
      Num(policy.accuracy_weight_seconds), " s, prune budget ",
      Num(policy.max_pruned_fraction_rank), "/rank ", Num(policy.max_pruned_fraction_group),
      "/group, hysteresis ", Num(policy.hysteresis), "\n  s/unit x units:");
  for (size_t r = 0; r < input.ranks.size(); ++r) {
    const PlannerRank& rank = input.ranks[r];
    absl::StrAppend(&out, " ", r, ":", Num(rank.seconds_per_unit), "x", rank.owned_units,
                    rank.cordoned ? "(cordoned)" : "", rank.chronic ? "(chronic)" : "");
  }
  absl::StrAppend(&out, "\n  all-local ", Num(d.all_local_step_seconds), " s, ideal ",
                  Num(d.ideal_step_seconds), " s");
  if (input.calm && !d.calm) {
    absl::StrAppend(&out, "\n  no rank straggles, but a rank is cordoned or owns more than its "
                          "share: balancing");
  }
  absl::StrAppend(&out, "\n  candidates:");
  const int32_t p = static_cast<int32_t>(input.ranks.size());
  for (size_t i = 0; i < d.candidates.size(); ++i) {
    const PlanCandidate& c = d.candidates[i];
    absl::StrAppend(&out, "\n    ", CandidateKindName(c.kind), ": ");
    if (!c.feasible) {
      absl::StrAppend(&out, c.note.empty() ? "infeasible" : c.note);
      continue;
    }
    if (c.kind == CandidateKind::kAuto && i > 0 && d.candidates[i - 1].plan == c.plan) {
      absl::StrAppend(&out, "same as ", CandidateKindName(d.candidates[i - 1].kind));
      continue;
    }
    absl::StrAppend(&out, "step ", Num(c.cost.step_seconds), " s, objective ",
                    Num(c.cost.objective), " (", DescribePlan(c.plan, p), ")");
    if (c.kind == CandidateKind::kReshard) {
      absl::StrAppend(&out, ", moves ", c.cost.moved_units, " units once");
    }
    if (!c.note.empty()) absl::StrAppend(&out, "; ", c.note);
  }
  absl::StrAppend(&out, "\n  decision: ");
  if (policy.mode == BalanceMode::kOff || policy.mode == BalanceMode::kObserve) {
    absl::StrAppend(&out, "mode ", BalanceModeName(policy.mode), " pushes all-local; would push ",
                    CandidateKindName(d.recommended.kind), " (",
                    DescribePlan(d.recommended.plan, p), ") for step ",
                    Num(d.recommended.cost.step_seconds), " s");
  } else if (d.calm) {
    absl::StrAppend(&out, "all-local: no rank straggles, so differences between the estimates "
                          "are noise to balancing");
  } else if (d.kept_current) {
    absl::StrAppend(&out, "keep the current plan (", DescribePlan(d.plan, p),
                    "): the best new plan, ", CandidateKindName(d.recommended.kind), " at ",
                    Num(d.recommended.cost.objective), ", is not better than ", Num(d.objective),
                    " by the hysteresis");
  } else {
    absl::StrAppend(&out, CandidateKindName(d.chosen), " (", DescribePlan(d.plan, p), ")");
  }
  absl::StrAppend(&out, "; predicted step ", Num(d.predicted_step_seconds), " s");
  if (d.predicted_step_seconds > 0) {
    absl::StrAppend(&out, " (", Num(d.all_local_step_seconds / d.predicted_step_seconds),
                    "x faster than all-local, ",
                    Num(d.predicted_step_seconds / d.ideal_step_seconds), "x the ideal)");
  }
  return out;
}

}  // namespace ballast::coordinator
