// The exact optimum of one block on one ownership, per mode: resize-only, migrate-only
// and the joint (auto) plan. Internal to the planner; candidates.cc builds its candidates
// from these.
//
// Over t. MinPrunes(t) (transfer_solver.h) is a non-increasing step function that changes
// only at load values c u + tau w, and the objective t + lambda MinPrunes(t) is minimised
// at the left end of one of its steps. Resize-only has a direct scan, migrate-only is the
// N-th smallest "coverage slot" (TransferSolver::MinStepWithoutPruning). Auto runs a
// best-first branch and bound over
// intervals (a, b) of t: one whose right end needs k_b prunes can hold nothing better than
// a + lambda * max(k_b [+1 if b is known to start its step], ceil(LP(b))), where LP is the
// linear relaxation of MinPrunes (fractional prunes and coverage, a greedy over concave
// pieces). An interval is split at its midpoint (clamped into where that bound is below the
// best plan's objective), whose min-prune plan is re-balanced to
// its true max load (snapping the split to where that plan's step region begins). When an
// interval can hold only a step or two, or b already prunes the most the budgets allow
// (then everything left of b is b's step or infeasible; there looks and halvings
// alternate), the search instead looks at the double just below b: MinPrunes is constant
// between consecutive load values, so that settles whether b starts its step. An interval
// that would need more prunes than the budgets allow is dropped. Every plan seen is a
// candidate and an interval is dropped only when its bound cannot beat the best, so the
// result is the optimum (to 1e-12 relative).
#ifndef BALLAST_COORDINATOR_PLANNER_SEARCH_H_
#define BALLAST_COORDINATOR_PLANNER_SEARCH_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "coordinator/planner/problem.h"
#include "coordinator/policy.h"

namespace ballast::coordinator::planner_internal {

// The best plans for a mode on one ownership. For auto: resize-only, migrate-only and
// the joint optimum; otherwise the one technique (the others stay infeasible).
struct ModePlans {
  Solution resize, migrate, joint;
  // No plan's objective is below the cutoff: `joint` is the best plan seen, not
  // necessarily the optimum.
  bool joint_cut_off = false;
  const Solution& best(BalanceMode mode) const {
    return mode == BalanceMode::kResize ? resize : mode == BalanceMode::kMigrate ? migrate : joint;
  }
};

// A line under LpPrunes(t), valid on one side of the point it was drawn at. LpPrunes is
// convex in t (the least fractional prunes of a linear program whose constraints move
// linearly with t), so a secant drawn outwards from a point p is a lower bound on the
// side away from it: the slope over [p, p + h] is at least every subgradient at p, so
// LP(s) >= LP(p) + slope * (s - p) for s <= p; the slope over [p - h, p] bounds s >= p.
// The B&B's intervals only shrink, so a line valid on a node stays valid on its children.
struct LpLine {
  double at = 0;
  double value = -kInf;  // -kInf: no line
  double slope = 0;
  double operator()(double t) const { return value + slope * (t - at); }
};

// The part of (a, b) where t + lambda * max(k, left(t), right(t)), the B&B's lower bound
// on the objective at t, is below `limit`, as {lo, hi} (none when lo >= hi). Auto's search
// splits an interval at its midpoint clamped into this part.
std::pair<double, double> RangeBelow(double a, double b, double lambda, double k,
                                     const LpLine& left, const LpLine& right, double limit);

class TransferSolver;

// `mode` is a planning mode (resize, migrate or auto; see PlanningMode), and `problem`
// MakeProblem's for it. Auto's search proves optimality only below `cutoff`: a caller
// that would take the joint plan only if it beats some objective passes that, and the
// search stops once nothing can. `solver` is the caller's (a PlannerWorkspace's), reset
// here on `problem` and used for migrate and auto alike; what it solved before changes
// nothing but how much it allocates.
ModePlans SolveMode(const Problem& problem, BalanceMode mode, TransferSolver* solver,
                    double cutoff = kInf);

// SolveMode in two parts, for a caller that decides the joint search's cutoff from the
// single techniques' plans (candidates.cc prices a reshard in between) or solves only
// some of them. SolveTechniques: resize-only and migrate-only for `mode`, the joint plan
// left infeasible. SolveJoint: auto's joint plan from those (a resize-only plan left
// infeasible is no seed: the search is exact from the migrate-only one alone), with
// `solver` reset on `problem` first (SolveTechniques leaves it so).
ModePlans SolveTechniques(const Problem& problem, BalanceMode mode, TransferSolver* solver);
void SolveJoint(const Problem& problem, TransferSolver* solver, double cutoff, ModePlans* plans);

}  // namespace ballast::coordinator::planner_internal

#endif  // BALLAST_COORDINATOR_PLANNER_SEARCH_H_
