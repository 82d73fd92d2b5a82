#include "coordinator/planner/problem.h"

#include <algorithm>
#include <cmath>

namespace ballast::coordinator::planner_internal {

Problem MakeProblem(const PlannerInput& input, const std::vector<int32_t>& owned,
                    const JobPolicy& policy, BalanceMode mode) {
  Problem problem;
  problem.num_ranks = static_cast<int32_t>(input.ranks.size());
  problem.tau = input.transfer_seconds_per_unit;
  problem.fixed_seconds.reserve(problem.num_ranks);
  problem.seconds_per_unit.reserve(problem.num_ranks);
  problem.owned.reserve(problem.num_ranks);
  problem.cordoned.reserve(problem.num_ranks);
  problem.prune_cap.reserve(problem.num_ranks);
  for (int32_t r = 0; r < problem.num_ranks; ++r) {
    problem.fixed_seconds.push_back(input.ranks[r].fixed_seconds);
    problem.seconds_per_unit.push_back(input.ranks[r].seconds_per_unit);
    problem.owned.push_back(owned[r]);
    problem.cordoned.push_back(input.ranks[r].cordoned ? 1 : 0);
    problem.num_units += owned[r];
  }
  const bool prune = PrunesAllowed(mode);
  const bool some_take_none =
      std::any_of(input.ranks.begin(), input.ranks.end(),
                  [](const PlannerRank& rank) { return rank.takes_no_offloads; });
  for (int32_t r = 0; some_take_none && r < problem.num_ranks; ++r) {
    problem.max_in.push_back(
        TakesOffloads(input, r) ? std::max<int64_t>(0, problem.num_units - owned[r]) : 0);
  }
  for (int32_t r = 0; r < problem.num_ranks; ++r) {
    problem.prune_cap.push_back(
        prune ? static_cast<int32_t>(PruneBudget(policy.max_pruned_fraction_rank, owned[r])) : 0);
  }
  problem.group_prune_cap =
      prune ? PruneBudget(policy.max_pruned_fraction_group, problem.num_units) : 0;
  problem.lambda = problem.num_units > 0
                       ? policy.accuracy_weight_seconds / static_cast<double>(problem.num_units)
                       : 0;
  return problem;
}

std::vector<int32_t> OwnedCounts(const PlannerInput& input) {
  std::vector<int32_t> owned;
  for (const PlannerRank& r : input.ranks) owned.push_back(r.owned_units);
  return owned;
}

void Price(const Problem& problem, Solution* solution) {
  double t = 0;
  int64_t pruned = 0;
  for (int32_t r = 0; r < problem.num_ranks; ++r) {
    const int64_t computed =
        int64_t{problem.owned[r]} - solution->z[r] - solution->y[r] + solution->x[r];
    t = std::max(t, Load(problem.fixed_seconds[r], problem.seconds_per_unit[r], problem.tau,
                         computed, int64_t{solution->y[r]} + solution->x[r]));
    pruned += solution->z[r];
  }
  solution->step = t;
  solution->objective = t + problem.lambda * static_cast<double>(pruned);
}

int32_t SmallestPrune(double fixed, double coef, double inverse_coef, int32_t n, double t) {
  if (fixed + coef * static_cast<double>(n) <= t) return 0;
  // An estimate (the loops below make it exact).
  const double keep = std::floor((t - fixed) * inverse_coef);
  int64_t z = keep >= n ? 0 : n - static_cast<int64_t>(keep);
  z = std::clamp<int64_t>(z, 0, n);
  while (z > 0 && fixed + coef * static_cast<double>(n - z + 1) <= t) --z;
  while (z < n && fixed + coef * static_cast<double>(n - z) > t) ++z;
  return static_cast<int32_t>(z);
}

}  // namespace ballast::coordinator::planner_internal
