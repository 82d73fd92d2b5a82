#include "coordinator/planner/search.h"

#include <algorithm>
#include <cmath>
#include <queue>
#include <utility>

#include "absl/strings/str_cat.h"
#include "coordinator/planner/transfer_solver.h"

namespace ballast::coordinator::planner_internal {
namespace {

// ---------------------------------------------------------------------------------------
// Resize only: no transfers, so rank r needs z_r = ceil(n_r - (T - f_r) / c_r) prunes for a step
// time T. Lowering T one step at a time (prune the most loaded rank) visits every T at
// which the prune count changes, with the fewest prunes for it.
Solution SolveResize(const Problem& problem) {
  Solution s;
  s.z.assign(problem.num_ranks, 0);
  s.y.assign(problem.num_ranks, 0);
  s.x.assign(problem.num_ranks, 0);
  int64_t pruned = 0;
  for (int32_t r = 0; r < problem.num_ranks; ++r) {
    if (!problem.cordoned[r]) continue;
    if (problem.owned[r] > problem.prune_cap[r]) {
      s.reason = absl::StrCat("cordoned rank ", r, " owns ", problem.owned[r],
                              " units but may prune at most ", problem.prune_cap[r],
                              " (max_pruned_fraction_rank)");
      return s;
    }
    s.z[r] = problem.owned[r];
    pruned += problem.owned[r];
  }
  if (pruned > problem.group_prune_cap) {
    s.reason =
        absl::StrCat("cordoned ranks own ", pruned, " units but the group may prune at most ",
                     problem.group_prune_cap, " (max_pruned_fraction_group)");
    return s;
  }
  std::vector<double> load(problem.num_ranks, 0.0);
  // No prune count gets the step below the load of a rank pruned to its budget.
  double floor_load = 0;
  for (int32_t r = 0; r < problem.num_ranks; ++r) {
    const double f = problem.fixed_seconds[r], c = problem.seconds_per_unit[r];
    if (problem.cordoned[r]) {  // pruned whole above: it bears its fixed cost alone
      load[r] = Load(f, c, problem.tau, 0, 0);
      floor_load = std::max(floor_load, load[r]);
      continue;
    }
    load[r] = Load(f, c, problem.tau, problem.owned[r], 0);
    floor_load =
        std::max(floor_load,
                 Load(f, c, problem.tau, std::max(0, problem.owned[r] - problem.prune_cap[r]), 0));
  }
  std::vector<int32_t> z = s.z;
  double best = kInf;
  while (true) {
    int32_t top = 0;
    for (int32_t r = 1; r < problem.num_ranks; ++r) {
      if (load[r] > load[top]) top = r;
    }
    const double obj = load[top] + problem.lambda * static_cast<double>(pruned);
    // Strictly better only: on ties keep the plan with fewer prunes (less accuracy risk).
    if (best == kInf || obj < best - kRelTol * best) {
      best = obj;
      s.z = z;
    }
    if (problem.cordoned[top] || z[top] >= problem.prune_cap[top] ||
        pruned >= problem.group_prune_cap)
      break;
    // Any later objective is at least floor_load + lambda * (pruned + 1): once that
    // loses, stop.
    if (floor_load + problem.lambda * static_cast<double>(pruned + 1) >= best) break;
    ++z[top];
    ++pruned;
    load[top] = Load(problem.fixed_seconds[top], problem.seconds_per_unit[top], problem.tau,
                     problem.owned[top] - z[top], 0);
  }
  s.feasible = true;
  Price(problem, &s);
  return s;
}

Solution FromCoverage(const Problem& problem, const std::vector<int32_t>& z,
                      const std::vector<int64_t>& v) {
  Solution s;
  s.feasible = true;
  s.z = z;
  s.y.assign(problem.num_ranks, 0);
  s.x.assign(problem.num_ranks, 0);
  for (int32_t r = 0; r < problem.num_ranks; ++r) {
    if (v[r] < problem.owned[r]) s.y[r] = static_cast<int32_t>(problem.owned[r] - v[r]);
    if (v[r] > problem.owned[r]) s.x[r] = static_cast<int32_t>(v[r] - problem.owned[r]);
  }
  Price(problem, &s);
  return s;
}

Solution SolveMigrate(const Problem& problem, TransferSolver& solver) {
  std::vector<int64_t> v;
  solver.MinStepWithoutPruning(&v);
  return FromCoverage(problem, std::vector<int32_t>(problem.num_ranks, 0), v);
}

// Rounding in LpPrunes (about 1e-12 of a few hundred prunes) over a secant of width h is
// an error in the slope of about 1e-9 / h; with h a thousandth of t the lines move by at
// most 1e-6 prunes across an interval, so they are lowered by ten times that.
constexpr double kSecantWidth = 1e-3;
constexpr double kLineSlack = 1e-5;

// The secant from t towards t + `direction` * h, as a line through (t, LP(t)): valid left
// of t for direction +1 and right of t for -1.
LpLine Secant(TransferSolver& solver, double t, double lp_t, double direction) {
  const double h = direction * kSecantWidth * t;
  // No line through an infeasible point: answered before the LpPrunes call it would waste
  // (a tenth of the midpoints on the random stress case have LP(mid) infinite).
  if (!std::isfinite(lp_t) || !(direction * h > 0)) return LpLine{};
  const double lp_there = solver.LpPrunes(t + h);
  if (!std::isfinite(lp_there)) return LpLine{};
  return LpLine{t, lp_t - kLineSlack, (lp_there - lp_t) / h};
}
LpLine LineLeftOf(TransferSolver& solver, double t, double lp_t) {
  return Secant(solver, t, lp_t, 1);
}
LpLine LineRightOf(TransferSolver& solver, double t, double lp_t) {
  return Secant(solver, t, lp_t, -1);
}

// The least t + lambda * max(k, left(t), right(t)) over t in [a, b]: the function is
// convex and piecewise linear, so its least value is at an end or where two of its pieces
// cross.
double LowestObjective(double a, double b, double lambda, double k, const LpLine& left,
                       const LpLine& right) {
  auto f = [&](double t) { return t + lambda * std::max({k, left(t), right(t)}); };
  double lowest = std::min(f(a), f(b));
  auto try_crossing = [&](const LpLine& x, const LpLine& y) {
    if (!std::isfinite(x.value) || !std::isfinite(y.value) || x.slope == y.slope) return;
    const double t = (y.value - x.value + x.slope * x.at - y.slope * y.at) / (x.slope - y.slope);
    if (t > a && t < b) lowest = std::min(lowest, f(t));
  };
  const LpLine flat{0, k, 0};
  try_crossing(left, right);
  try_crossing(left, flat);
  try_crossing(right, flat);
  return lowest;
}

// Best-first branch and bound over the step time (see the comment at the top), seeded
// with the best of `migrate` and `resize` (when feasible: only an incumbent, which the
// search would find for itself); returns the optimum, or, when no plan's
// objective is below `cutoff`, the best plan seen.
Solution SolveAuto(const Problem& problem, TransferSolver& solver, const Solution& migrate,
                   const Solution& resize, double cutoff) {
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
  std::vector<int32_t> z;
  std::vector<int64_t> v;
  if (resize.feasible && resize.objective < best.objective - kRelTol * best.objective) {
    best = {resize.step, resize_pruned, resize.objective, 1};
  }
  // Intervals whose bound reaches this hold nothing worth finding.
  auto limit = [&] { return std::min(best.objective - kRelTol * best.objective, cutoff); };
  auto consider = [&](double t, int64_t k) {
    const double obj = t + problem.lambda * static_cast<double>(k);
    const double tol = kRelTol * best.objective;
    if (obj < best.objective - tol || (obj <= best.objective + tol && k < best.k)) {
      best = {t, k, obj, 2};
    }
  };

  // No plan prunes more than this (MinPrunes finds none that needs more).
  int64_t most_prunes = 0;
  for (int32_t cap : problem.prune_cap) most_prunes += cap;
  most_prunes = std::min(most_prunes, problem.group_prune_cap);
  if (most_prunes > 0) {
    // (a, b): step-time interval; ka = prunes needed at a (-1: not evaluated); kb at b;
    // exact: b is the left end of its step (fewer than kb prunes cannot reach below b).
    // lp_b: LpPrunes(b) or a smaller lower bound on prunes below b. left, right: lines
    // under LpPrunes on the whole interval (LpLine). probed: b came from a look just below
    // the parent's b.
    struct Node {
      double a;
      int64_t ka;
      double b;
      int64_t kb;
      bool exact;
      double lp_b;
      LpLine left, right;
      double bound;
      bool probed = false;
    };
    // The fewest prunes anything left of b needs.
    auto prunes_below = [&](int64_t kb, bool exact, double lp_b) {
      const double lp_k = std::ceil(lp_b * (1 - 1e-12) - 1e-9);
      return std::max(static_cast<double>(kb) + (exact ? 1.0 : 0.0), lp_k);
    };
    auto bound_of = [&](double a, double b, int64_t kb, bool exact, double lp_b, const LpLine& left,
                        const LpLine& right) {
      if (!std::isfinite(lp_b)) return kInf;
      const double k = prunes_below(kb, exact, lp_b);
      if (k > static_cast<double>(most_prunes)) return kInf;  // nothing in (a, b) is feasible
      return LowestObjective(a, b, problem.lambda, k, left, right);
    };
    auto cmp = [](const Node& x, const Node& y) { return x.bound > y.bound; };
    std::priority_queue<Node, std::vector<Node>, decltype(cmp)> open(cmp);
    auto push = [&](double a, int64_t ka, double b, int64_t kb, bool exact, double lp_b,
                    const LpLine& left, const LpLine& right, bool probed = false) {
      const double bound = bound_of(a, b, kb, exact, lp_b, left, right);
      if (bound >= limit()) return;
      open.push({a, ka, b, kb, exact, lp_b, left, right, bound, probed});
    };
    const double lp_top = solver.LpPrunes(migrate.step);
    push(0.0, -1, migrate.step, 0, true, lp_top, LpLine{},
         LineLeftOf(solver, migrate.step, lp_top));
    while (!open.empty()) {
      const Node node = open.top();
      open.pop();
      if (node.bound >= limit()) break;  // best-first
      // Steps starting inside (a, b) need fewer prunes than at a: none if ka is too small.
      if (node.ka >= 0 && node.ka <= node.kb + (node.exact ? 1 : 0)) continue;
      if (node.b - node.a <= kRelTol * node.b) continue;
      // At the most prunes allowed, nothing left of b needs fewer or can take more: it
      // is either b's step or infeasible, and the double below b tells which, where
      // halving would look for where feasibility ends, one evaluation a halving. Usually b
      // is that end; when it is not, halving takes over for a split (looks below b alone
      // would walk down the steps one at a time) and the two alternate.
      const bool at_most = node.kb >= most_prunes && !node.probed;
      if ((node.ka >= 0 && node.ka <= node.kb + 2) || at_most || node.b - node.a <= 1e-6 * node.b) {
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
        push(node.a, node.ka, reached, kp, false, node.lp_b, node.left, node.right,
             /*probed=*/true);
        continue;
      }
      // The split: the midpoint, clamped into the part where the bound is below the limit
      // (RangeBelow). Right of it a MinPrunes call would bound the counts to its left
      // less well (they are non-increasing in t) and the part right of the split needs no
      // look; left of it the LP alone rules out the left part (the branch below), with no
      // MinPrunes call. On the random stress case that is 12% fewer MinPrunes calls.
      // Only once a plan beats the cutoff: until then the search may yet end cut off, with
      // the best plan it happened to see, which looks at other points would change (the
      // planner_bench digest prints a cut-off reshard's objective).
      double mid = 0.5 * (node.a + node.b);
      if (limit() < cutoff) {
        const auto [lo, hi] =
            RangeBelow(node.a, node.b, problem.lambda, prunes_below(node.kb, node.exact, node.lp_b),
                       node.left, node.right, limit());
        const double inside = std::clamp(mid, lo, hi);
        if (lo < hi && inside > node.a && inside < node.b) mid = inside;
      }
      if (!(mid > node.a && mid < node.b)) continue;
      const double lp_mid = solver.LpPrunes(mid);
      const LpLine left_of_mid = LineLeftOf(solver, mid, lp_mid);
      const LpLine right_of_mid = LineRightOf(solver, mid, lp_mid);
      // Anything in (a, mid] needs at least kb prunes (more if b starts its step) and at
      // least LP(mid).
      const double left_bound =
          bound_of(node.a, mid, node.kb, node.exact, lp_mid, node.left, left_of_mid);
      if (left_bound >= limit()) {
        push(mid, -1, node.b, node.kb, node.exact, node.lp_b, right_of_mid, node.right);
        continue;
      }
      const int64_t km = solver.MinPrunes(mid, &z);
      if (km == kNoPlan) {
        push(mid, kNoPlan, node.b, node.kb, node.exact, node.lp_b, right_of_mid, node.right);
        continue;
      }
      // The best plan with km prunes reaches `reached` <= mid, so km prunes suffice on
      // [reached, mid] and steps left of it start at or below `reached`.
      const double reached = solver.Balance(mid, z, &v);
      consider(reached, km);
      push(node.a, node.ka, reached, km, false, lp_mid, node.left, left_of_mid);
      push(mid, km, node.b, node.kb, node.exact, node.lp_b, right_of_mid, node.right);
    }
  }

  if (best.source == 0) return migrate;
  if (best.source == 1) return resize;
  // The plan at best.t, as MinPrunes gives it there (the search saw it at a step time
  // above, where an equal count may be spread differently). It reached best.t with
  // best.k prunes, so MinPrunes finds a plan there; the check keeps a bug from reusing a
  // stale z.
  if (solver.MinPrunes(best.t, &z) == kNoPlan) return migrate;
  solver.Balance(best.t, z, &v);
  return FromCoverage(problem, z, v);
}

}  // namespace

// Each of the three is affine in t, so each keeps t on one side of where it meets the
// limit.
std::pair<double, double> RangeBelow(double a, double b, double lambda, double k,
                                     const LpLine& left, const LpLine& right, double limit) {
  double lo = a, hi = b;
  auto keep_below = [&](double at_zero, double slope) {  // at_zero + slope * t < limit
    if (slope > 0) {
      hi = std::min(hi, (limit - at_zero) / slope);
    } else if (slope < 0) {
      lo = std::max(lo, (limit - at_zero) / slope);
    } else if (!(at_zero < limit)) {
      hi = lo;
    }
  };
  keep_below(lambda * k, 1);
  for (const LpLine* line : {&left, &right}) {
    if (!std::isfinite(line->value)) continue;
    keep_below(lambda * (line->value - line->slope * line->at), 1 + lambda * line->slope);
  }
  return {lo, hi};
}

ModePlans SolveTechniques(const Problem& problem, BalanceMode mode, TransferSolver* solver) {
  ModePlans out;
  if (PrunesAllowed(mode)) out.resize = SolveResize(problem);
  if (TransfersAllowed(mode)) {
    // One solver for both: migrate-only prunes nothing whatever the budgets say
    // (MinStepWithoutPruning reads none of them).
    solver->Reset(problem);
    out.migrate = SolveMigrate(problem, *solver);
  }
  return out;
}

void SolveJoint(const Problem& problem, TransferSolver* solver, double cutoff, ModePlans* plans) {
  plans->joint = SolveAuto(problem, *solver, plans->migrate, plans->resize, cutoff);
  plans->joint_cut_off = !(plans->joint.objective < cutoff);
}

ModePlans SolveMode(const Problem& problem, BalanceMode mode, TransferSolver* solver,
                    double cutoff) {
  ModePlans out = SolveTechniques(problem, mode, solver);
  if (mode == BalanceMode::kAuto) SolveJoint(problem, solver, cutoff, &out);
  return out;
}

}  // namespace ballast::coordinator::planner_internal
