// The transfer solver's LP (TransferSolver::LpPrunes): the search's interval bounds draw
// secant lines under it (search.cc), which is valid only because it is convex in the step
// time. Checked here on bench-sized random blocks, where the oracle tests cannot reach,
// with and without fixed costs per rank.
#include "coordinator/planner/transfer_solver.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "coordinator/planner/problem.h"

namespace ballast::coordinator::planner_internal {
namespace {

TEST(TransferSolverTest, LpPrunesIsConvexAndFallsWithTheStepTime) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> unit(0, 1);
  int checked = 0;
  for (int trial = 0; trial < 200; ++trial) {
    Problem problem;
    problem.num_ranks = 2 + trial % 7;
    const int32_t n = 8 + trial % 57;
    for (int r = 0; r < problem.num_ranks; ++r) {
      // Half the trials with fixed costs: up to 30 units' worth of the fastest speed.
      problem.fixed_seconds.push_back(trial % 2 == 0 ? 0.0 : 3e-2 * unit(rng));
      problem.seconds_per_unit.push_back(1e-3 * (1 + 9 * unit(rng)));
      problem.owned.push_back(n);
      problem.cordoned.push_back(r == 0 && trial % 5 == 0 ? 1 : 0);
      problem.prune_cap.push_back(static_cast<int32_t>(n * unit(rng)));
      problem.num_units += n;
    }
    // A third of the trials with a rank that takes no offloads (its keep stretch flat).
    for (int r = 0; r < problem.num_ranks; ++r) {
      problem.max_in.push_back(r == 1 && trial % 3 == 1 && trial % 5 != 0 ? 0
                                                                          : problem.num_units - n);
    }
    problem.group_prune_cap = static_cast<int64_t>(problem.num_units * unit(rng));
    problem.tau = 2e-3 * unit(rng);
    TransferSolver solver(problem);
    // Step times from well below to well above the all-local step.
    double top = 0;
    for (int r = 0; r < problem.num_ranks; ++r) {
      top = std::max(top, problem.fixed_seconds[r] + problem.seconds_per_unit[r] * n);
    }
    std::vector<double> t, lp;
    for (int i = 1; i <= 60; ++i) {
      t.push_back(top * 1.5 * i / 60);
      lp.push_back(solver.LpPrunes(t.back()));
    }
    for (size_t i = 0; i + 2 < t.size(); ++i) {
      // Infeasible (kInf) only below the feasible range, and non-increasing after it.
      if (!std::isfinite(lp[i])) continue;
      ASSERT_TRUE(std::isfinite(lp[i + 1])) << "trial " << trial << " t " << t[i + 1];
      EXPECT_LE(lp[i + 1], lp[i] + 1e-9 * (1 + lp[i])) << "trial " << trial;
      // Midpoint convexity on equally spaced points.
      EXPECT_LE(lp[i + 1], 0.5 * (lp[i] + lp[i + 2]) + 1e-7 * (1 + lp[i]))
          << "trial " << trial << " at t " << t[i + 1];
      ++checked;
    }
  }
  EXPECT_GT(checked, 5000);
}

// A PlannerWorkspace keeps one solver across decisions and SolveMode resets it for each
// problem: a reset solver must answer exactly as a new one, whatever it solved before (a
// bigger group, other speeds, cordons). One solver goes through all the trials; a fresh
// one checks each.
TEST(TransferSolverTest, AResetSolverAnswersAsANewOne) {
  std::mt19937_64 rng(12);
  std::uniform_real_distribution<double> unit(0, 1);
  TransferSolver reused;
  int compared = 0;
  for (int trial = 0; trial < 150; ++trial) {
    Problem problem;
    problem.num_ranks = 2 + (trial * 5) % 7;  // sizes go up and down between trials
    const int32_t n = 4 + (trial * 13) % 40;
    for (int r = 0; r < problem.num_ranks; ++r) {
      problem.fixed_seconds.push_back(trial % 3 == 0 ? 1e-2 * unit(rng) : 0.0);
      problem.seconds_per_unit.push_back(1e-3 * (1 + 9 * unit(rng)));
      problem.owned.push_back(n);
      problem.cordoned.push_back(r == 1 && trial % 4 == 0 ? 1 : 0);
      problem.prune_cap.push_back(static_cast<int32_t>(n * unit(rng)));
      problem.num_units += n;
    }
    for (int r = 0; r < problem.num_ranks; ++r) {
      // (Not beside a cordon, as MakeProblem's: Problem::max_in.)
      problem.max_in.push_back(r == 0 && trial % 3 == 1 && trial % 4 != 0 ? 0
                                                                          : problem.num_units - n);
    }
    problem.group_prune_cap = static_cast<int64_t>(problem.num_units * unit(rng));
    problem.tau = 2e-3 * unit(rng);
    reused.Reset(problem);
    TransferSolver fresh(problem);
    std::vector<int64_t> v_reused, v_fresh;
    ASSERT_EQ(reused.MinStepWithoutPruning(&v_reused), fresh.MinStepWithoutPruning(&v_fresh))
        << "trial " << trial;
    ASSERT_EQ(v_reused, v_fresh) << "trial " << trial;
    double top = 0;
    for (int r = 0; r < problem.num_ranks; ++r) {
      top = std::max(top, problem.fixed_seconds[r] + problem.seconds_per_unit[r] * n);
    }
    for (int i = 1; i <= 12; ++i) {
      const double t = top * 1.2 * i / 12;
      ASSERT_EQ(reused.LpPrunes(t), fresh.LpPrunes(t)) << "trial " << trial << " t " << t;
      std::vector<int32_t> z_reused, z_fresh;
      const int64_t prunes = fresh.MinPrunes(t, &z_fresh);
      ASSERT_EQ(reused.MinPrunes(t, &z_reused), prunes) << "trial " << trial << " t " << t;
      if (prunes == kNoPlan) continue;
      ASSERT_EQ(z_reused, z_fresh) << "trial " << trial << " t " << t;
      ASSERT_EQ(reused.Balance(t, z_reused, &v_reused), fresh.Balance(t, z_fresh, &v_fresh))
          << "trial " << trial << " t " << t;
      ASSERT_EQ(v_reused, v_fresh) << "trial " << trial << " t " << t;
      ++compared;
    }
  }
  EXPECT_GT(compared, 300);
}

// Coverage answers without its exactness loops when its estimate is clear of an integer.
// Whichever way it answers, the coverage must pass the load formula and one unit more must
// fail it: checked at step times on, next to and just around load values (where the
// estimates are nearest an integer and the shortcut must stand aside) and at random ones
// (where it answers), without and with fixed costs.
TEST(TransferSolverTest, CoverageIsTheLargestThatFits) {
  std::mt19937_64 rng(13);
  std::uniform_real_distribution<double> unit(0, 1);
  int checked = 0;
  for (int trial = 0; trial < 120; ++trial) {
    Problem problem;
    problem.num_ranks = 2 + trial % 7;
    for (int r = 0; r < problem.num_ranks; ++r) {
      const int32_t n = 1 + static_cast<int32_t>(64 * unit(rng));
      problem.fixed_seconds.push_back(trial % 2 == 0 ? 0.0 : 3e-2 * unit(rng));
      problem.seconds_per_unit.push_back(1e-3 * (1 + 9 * unit(rng)));
      problem.owned.push_back(n);
      problem.cordoned.push_back(0);
      problem.prune_cap.push_back(n);
      problem.num_units += n;
    }
    // A third of the trials with a rank that takes no offloads: it covers its own at most.
    for (int r = 0; r < problem.num_ranks; ++r) {
      problem.max_in.push_back(r == 1 && trial % 3 == 1 ? 0 : problem.num_units - problem.owned[r]);
    }
    problem.group_prune_cap = problem.num_units;
    problem.tau = 2e-3 * unit(rng);
    TransferSolver solver(problem);
    for (int32_t r = 0; r < problem.num_ranks; ++r) {
      const double f = problem.fixed_seconds[r], c = problem.seconds_per_unit[r];
      const int64_t n = problem.owned[r], most = n + problem.max_in[r];
      // Rank r's load covering v units with z pruned, as the solver's one formula has it.
      auto load = [&](int64_t v, int32_t z) {
        return Load(f, c, problem.tau, v - z, v >= n ? v - n : n - v);
      };
      for (int i = 0; i < 40; ++i) {
        const int32_t z = static_cast<int32_t>(unit(rng) * static_cast<double>(n + 1));
        const int64_t v_at = z + static_cast<int64_t>(unit(rng) * static_cast<double>(most - z));
        const double on = load(v_at, z);
        const double random_t = (f + c * static_cast<double>(n) * 1.5) * unit(rng);
        for (const double t :
             {on, std::nextafter(on, 0.0), std::nextafter(on, 1.0), on * (1 - 1e-13),
              on * (1 + 1e-13), on * (1 - 1e-9), on * (1 + 1e-9), random_t}) {
          const int64_t v = solver.Coverage(r, t, z);
          if (v < 0) {
            // Not even sending all it keeps, nor computing it, gets it under t.
            EXPECT_GT(load(z, z), t) << "trial " << trial << " rank " << r << " z " << z;
            EXPECT_GT(load(n, z), t) << "trial " << trial << " rank " << r << " z " << z;
            continue;
          }
          ASSERT_GE(v, z) << "trial " << trial << " rank " << r;
          ASSERT_LE(v, most) << "trial " << trial << " rank " << r;
          EXPECT_LE(load(v, z), t)
              << "trial " << trial << " rank " << r << " z " << z << " t " << t;
          if (v < most) {
            EXPECT_GT(load(v + 1, z), t)
                << "trial " << trial << " rank " << r << " z " << z << " t " << t;
          }
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 100000);
}

}  // namespace
}  // namespace ballast::coordinator::planner_internal
