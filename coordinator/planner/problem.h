// The planner's internal model of one block under one ownership and policy: the load
// formula every layer prices with, the problem in the solver's terms and a plan in counts.
// Internal to the planner (planner.h is the interface, vocabulary.h its types); the symbols
// follow the model in planner.h: f_r fixed seconds, c_r seconds per unit, n_r units owned, tau per
// transferred unit, and a plan's z_r pruned, y_r offloaded and x_r computed for others.
#ifndef BALLAST_COORDINATOR_PLANNER_PROBLEM_H_
#define BALLAST_COORDINATOR_PLANNER_PROBLEM_H_

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "coordinator/planner/vocabulary.h"
#include "coordinator/policy.h"

namespace ballast::coordinator::planner_internal {

inline constexpr int64_t kNoPlan = std::numeric_limits<int64_t>::max();
inline constexpr double kInf = std::numeric_limits<double>::infinity();
// Objectives this close (relative) are equal: far below anything measurable.
inline constexpr double kRelTol = 1e-12;

// The one load formula. Every threshold the solver compares against and every reported
// step time comes from it, so a predicted T is the same double the plan recomputes to.
// Summed left to right, so that with no fixed cost (f = 0, the exact 0 + x = x) every load
// is the same double it was before the fixed term existed.
inline double Load(double fixed, double c, double tau, int64_t computed, int64_t transferred) {
  return fixed + c * static_cast<double>(computed) + tau * static_cast<double>(transferred);
}

inline bool PrunesAllowed(BalanceMode mode) { return mode != BalanceMode::kMigrate; }
inline bool TransfersAllowed(BalanceMode mode) { return mode != BalanceMode::kResize; }
// Off and observe compute what auto would do (to explain it), and push all-local.
inline BalanceMode PlanningMode(BalanceMode mode) {
  return (mode == BalanceMode::kOff || mode == BalanceMode::kObserve) ? BalanceMode::kAuto : mode;
}

// One block under one ownership and policy, in the solver's terms.
struct Problem {
  int32_t num_ranks = 0;
  int64_t num_units = 0;                 // N
  std::vector<double> fixed_seconds;     // f_r
  std::vector<double> seconds_per_unit;  // c_r
  std::vector<int32_t> owned;            // n_r
  std::vector<char> cordoned;
  // Units each rank may compute for others: 0 where it takes no offloads (TakesOffloads),
  // else what the others own (receiving more never helps). Empty when every rank takes
  // offloads, the usual case (no allocation for it). Never 0 beside a cordoned rank that
  // owns units (TakesOffloads says so): with nowhere to put them, no step time would cover
  // them without pruning, and MinStepWithoutPruning's search for one would not end.
  std::vector<int64_t> max_in;
  std::vector<int32_t> prune_cap;  // per rank; 0 when the mode forbids pruning
  int64_t group_prune_cap = 0;
  double tau = 0;     // seconds per transferred unit, on each of its two ranks
  double lambda = 0;  // accuracy weight per pruned unit: w / N
};

Problem MakeProblem(const PlannerInput& input, const std::vector<int32_t>& owned,
                    const JobPolicy& policy, BalanceMode mode);

// Units each rank owns, from the input's ranks.
std::vector<int32_t> OwnedCounts(const PlannerInput& input);

// A plan in counts: per rank pruned (z), offloaded out (y), computed for others (x).
struct Solution {
  bool feasible = false;
  std::string reason;  // when infeasible
  std::vector<int32_t> z, y, x;
  double step = 0;
  double objective = 0;
};

// Sets step and objective of `solution`'s counts with the model's formula (the same one
// tests re-derive).
void Price(const Problem& problem, Solution* solution);

// ceil(x) as an integer, saturating outside int64's range (NaN: the minimum). Inline:
// std::ceil is a library call on baseline x86-64, and the solver takes one per option.
inline int64_t CeilToInt(double x) {
  constexpr double kEdge = 0x1p63;  // -kEdge is int64's minimum; kEdge is one past its maximum
  if (!(x >= -kEdge)) return std::numeric_limits<int64_t>::min();
  if (!(x < kEdge)) return std::numeric_limits<int64_t>::max();
  const int64_t i = static_cast<int64_t>(x);  // towards zero
  return static_cast<double>(i) < x ? i + 1 : i;
}

// Smallest z in [0, n] with fixed + coef * (n - z) <= t (fixed <= t; z = n always
// qualifies), given 1 / coef too: the first estimate multiplies instead of dividing (the
// search asks this for every rank at every step time it tries). inverse_coef is not read
// when coef is 0.
int32_t SmallestPrune(double fixed, double coef, double inverse_coef, int32_t n, double t);

}  // namespace ballast::coordinator::planner_internal

#endif  // BALLAST_COORDINATOR_PLANNER_PROBLEM_H_
