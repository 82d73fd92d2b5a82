#include "coordinator/planner/search.h"

#include <algorithm>
#include <cmath>
#include <queue>

#include "absl/strings/str_cat.h"
#include "coordinator/planner/transfer_solver.h"

namespace ballast::coordinator::planner_internal {
namespace {

// ---------------------------------------------------------------------------------------
// Resize only: no transfers, so rank r needs z_r = ceil(n_r - T / c_r) prunes for a step
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
  for (int32_t r = 0; r < problem.num_ranks; ++r) {
    load[r] = problem.cordoned[r]
                  ? 0.0
                  : Load(problem.seconds_per_unit[r], problem.tau, problem.owned[r], 0);
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
    // The objective is at least lambda * pruned; once that alone loses, stop.
    if (problem.lambda * static_cast<double>(pruned + 1) >= best) break;
    ++z[top];
    ++pruned;
    load[top] = Load(problem.seconds_per_unit[top], problem.tau, problem.owned[top] - z[top], 0);
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

// Best-first branch and bound over the step time (see the comment at the top). `seed` is
// the best plan known (migrate, or resize if better); returns the optimum.
Solution SolveAuto(const Problem& problem, TransferSolver& solver, const Solution& migrate,
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
    const double obj = t + problem.lambda * static_cast<double>(k);
    const double tol = kRelTol * best.objective;
    if (obj < best.objective - tol || (obj <= best.objective + tol && k < best.k)) {
      best = {t, k, obj, 2};
    }
  };

  bool can_prune = problem.group_prune_cap > 0;
  if (can_prune) {
    can_prune = false;
    for (int32_t cap : problem.prune_cap) can_prune = can_prune || cap > 0;
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
      return a + problem.lambda * k;
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
  return FromCoverage(problem, z, v);
}

}  // namespace

ModePlans SolveMode(const PlannerInput& input, const std::vector<int32_t>& owned,
                    const JobPolicy& policy, BalanceMode mode) {
  ModePlans out;
  const Problem problem = MakeProblem(input, owned, policy, mode);
  if (PrunesAllowed(mode)) out.resize = SolveResize(problem);
  if (TransfersAllowed(mode)) {
    // Migrate-only must not prune: solve it on a copy with no prune budget.
    Problem no_prune = problem;
    no_prune.prune_cap.assign(problem.num_ranks, 0);
    no_prune.group_prune_cap = 0;
    TransferSolver migrate_solver(no_prune);
    out.migrate = SolveMigrate(no_prune, migrate_solver);
    if (mode == BalanceMode::kAuto) {
      TransferSolver solver(problem);
      out.joint = SolveAuto(problem, solver, out.migrate, out.resize);
    }
  }
  return out;
}

}  // namespace ballast::coordinator::planner_internal
