// Shared by the planner's tests: test cases in the model's symbols (Case), their planner
// input, an independent feasibility check of a plan (CheckPlan), random groups and the
// usual straggler. The oracle itself is planner_oracle_test.cc's.
#ifndef BALLAST_TESTS_COORDINATOR_PLANNER_PLANNER_TEST_UTIL_H_
#define BALLAST_TESTS_COORDINATOR_PLANNER_PLANNER_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "ballast/plan.h"
#include "coordinator/planner/candidates.h"
#include "coordinator/planner/planner.h"
#include "coordinator/policy.h"

namespace ballast::coordinator::planner_testing {

inline constexpr double kInf = std::numeric_limits<double>::infinity();

// A decision with its explanation rendered, as `ballastctl explain` shows it.
struct Explained : BlockDecision {
  std::string explanation;
};

inline absl::StatusOr<Explained> PlanExplained(const PlannerInput& in, const JobPolicy& policy,
                                               const BlockPlan* current) {
  absl::StatusOr<BlockDecision> d = PlanBlock(in, policy, current);
  if (!d.ok()) return d.status();
  Explained out{*std::move(d), ""};
  out.explanation = ExplainDecision(in, policy, out);
  return out;
}

// The mode's best plan on the current ownership, as the decision priced it (a reshard,
// when chosen, is the decision's `recommended`). `mode` is a planning mode.
inline const PlanCandidate& TechniqueOf(const BlockDecision& d, BalanceMode mode) {
  const CandidateKind kind = planner_internal::ModeTechnique(mode);
  for (const PlanCandidate& c : d.candidates) {
    if (c.kind == kind) return c;
  }
  ADD_FAILURE() << "no " << CandidateKindName(kind) << " candidate";
  return d.recommended;
}

// ---------------------------------------------------------------------------------------
// Test inputs.

struct Case {
  std::vector<double> c;
  std::vector<double> f;  // fixed seconds per rank; empty: none
  std::vector<int32_t> n;
  std::vector<bool> cordoned;
  std::vector<bool> chronic;
  std::vector<bool> no_offloads;  // PlannerRank::takes_no_offloads; empty: none
  double tau = 0;
  JobPolicy policy;
};

// Whether rank r may compute others' units: not marked takes-no-offloads, or some rank
// cordoned (PlannerRank::takes_no_offloads is ignored then), restated for the oracle.
inline bool MayReceive(const Case& k, size_t r) {
  const bool marked = !k.no_offloads.empty() && k.no_offloads[r];
  const bool any_cordon = std::find(k.cordoned.begin(), k.cordoned.end(), true) != k.cordoned.end();
  return !marked || any_cordon;
}

inline PlannerInput MakeInput(const Case& k) {
  PlannerInput in;
  in.block = BlockId(1);
  in.transfer_seconds_per_unit = k.tau;
  for (size_t r = 0; r < k.c.size(); ++r) {
    PlannerRank rank;
    rank.seconds_per_unit = k.c[r];
    rank.fixed_seconds = k.f.empty() ? 0 : k.f[r];
    rank.owned_units = k.n[r];
    rank.cordoned = !k.cordoned.empty() && k.cordoned[r];
    rank.chronic = !k.chronic.empty() && k.chronic[r];
    rank.takes_no_offloads = !k.no_offloads.empty() && k.no_offloads[r];
    in.ranks.push_back(rank);
    for (int32_t i = 0; i < k.n[r]; ++i) in.owner_of_unit.push_back(RankId(static_cast<int>(r)));
  }
  return in;
}

inline int64_t Floor(double fraction, int64_t units) {
  // The documented budget: floor(fraction * units), nudged so 0.3 * 10 counts as 3.
  return static_cast<int64_t>(std::floor(fraction * static_cast<double>(units) + 1e-9));
}

inline int64_t Total(const Case& k) {
  int64_t total = 0;
  for (int32_t v : k.n) total += v;
  return total;
}

// ---------------------------------------------------------------------------------------
// An independent feasibility check of a plan; returns its recomputed T and objective.
struct Checked {
  std::string error;  // empty: feasible
  double step = 0;
  double objective = 0;
  int64_t pruned = 0;
};

inline Checked CheckPlan(const PlannerInput& in, const JobPolicy& policy, BalanceMode mode,
                         const BlockPlan& plan) {
  Checked out;
  const size_t p = in.ranks.size();
  const int64_t total = static_cast<int64_t>(in.owner_of_unit.size());
  std::vector<int64_t> owned(p, 0);
  const std::vector<RankId>& owners =
      plan.owner_of_unit.empty() ? in.owner_of_unit : plan.owner_of_unit;
  if (static_cast<int64_t>(owners.size()) != total) return {"owner_of_unit size"};
  for (RankId r : owners) {
    if (r.value() < 0 || static_cast<size_t>(r.value()) >= p) return {"owner out of range"};
    ++owned[r.value()];
  }
  const bool prune = mode == BalanceMode::kResize || mode == BalanceMode::kAuto;
  const bool transfer = mode == BalanceMode::kMigrate || mode == BalanceMode::kAuto;
  std::vector<int64_t> z(p, 0), y(p, 0), x(p, 0);
  if (!plan.pruned_units.empty()) {
    if (plan.pruned_units.size() != p) return {"pruned_units size"};
    for (size_t r = 0; r < p; ++r) z[r] = plan.pruned_units[r];
  }
  std::set<std::pair<int, int>> pairs;
  for (const Offload& o : plan.offloads) {
    if (o.owner.value() < 0 || static_cast<size_t>(o.owner.value()) >= p || o.helper.value() < 0 ||
        static_cast<size_t>(o.helper.value()) >= p) {
      return {"offload rank out of range"};
    }
    if (o.owner == o.helper) return {"offload to self"};
    if (o.units <= 0) return {"offload of no units"};
    if (!pairs.insert({o.owner.value(), o.helper.value()}).second) return {"duplicate pair"};
    y[o.owner.value()] += o.units;
    x[o.helper.value()] += o.units;
  }
  if (!transfer && (!plan.offloads.empty() || !plan.owner_of_unit.empty())) {
    return {"transfers in a prune-only mode"};
  }
  const double lambda = total > 0 ? policy.accuracy_weight_seconds / total : 0;
  for (size_t r = 0; r < p; ++r) {
    if (z[r] < 0) return {"negative prune"};
    if (z[r] > (prune ? Floor(policy.max_pruned_fraction_rank, owned[r]) : 0)) {
      return {"rank prune budget"};
    }
    if (z[r] + y[r] > owned[r]) return {"prunes + offloads exceed owned"};
    const int64_t u = owned[r] - z[r] - y[r] + x[r];
    if (in.ranks[r].cordoned && (u != 0 || x[r] != 0)) return {"cordon broken"};
    const bool any_cordon = std::any_of(in.ranks.begin(), in.ranks.end(),
                                        [](const PlannerRank& rank) { return rank.cordoned; });
    if (in.ranks[r].takes_no_offloads && !any_cordon && x[r] != 0) {
      return {"offloads onto a rank that takes none"};
    }
    out.step =
        std::max(out.step, in.ranks[r].fixed_seconds +
                               in.ranks[r].seconds_per_unit * static_cast<double>(u) +
                               in.transfer_seconds_per_unit * static_cast<double>(y[r] + x[r]));
    out.pruned += z[r];
  }
  if (out.pruned > (prune ? Floor(policy.max_pruned_fraction_group, total) : 0)) {
    return {"group prune budget"};
  }
  out.objective = out.step + lambda * static_cast<double>(out.pruned);
  return out;
}

// The worker-side validator must accept what the planner pushes.
inline absl::Status WorkerAccepts(const PlannerInput& in, const BlockPlan& block) {
  GroupShape shape;
  shape.group = GroupId("job/tp0");
  shape.size = static_cast<int32_t>(in.ranks.size());
  shape.blocks.push_back(
      {block.block, static_cast<int32_t>(in.owner_of_unit.size()), in.owner_of_unit});
  WorkloadPlan plan;
  plan.group = shape.group;
  plan.version = PlanVersion(1);
  plan.blocks.push_back(block);
  return ValidatePlan(plan, shape);
}

inline void ExpectNear(double got, double want, const std::string& what) {
  EXPECT_NEAR(got, want, 1e-9 * std::max(1e-300, std::abs(want))) << what;
}

inline std::string Describe(const Case& k, BalanceMode mode) {
  std::string s =
      absl::StrCat("mode ", BalanceModeName(mode), " tau ", k.tau, " w ",
                   k.policy.accuracy_weight_seconds, " f_rank ", k.policy.max_pruned_fraction_rank,
                   " f_group ", k.policy.max_pruned_fraction_group, " ranks:");
  for (size_t r = 0; r < k.c.size(); ++r) {
    absl::StrAppend(&s, " ", k.f.empty() || k.f[r] == 0 ? "" : absl::StrCat(k.f[r], "+"), k.c[r],
                    "x", k.n[r], !k.cordoned.empty() && k.cordoned[r] ? "(cordoned)" : "",
                    !k.no_offloads.empty() && k.no_offloads[r] ? "(takes no offloads)" : "");
  }
  return s;
}

// Random groups: equal speeds, 1x-10x stragglers and arbitrary speeds; tau from zero to
// more than a unit's compute; budgets from none to everything; weights from free pruning
// to prohibitive; some cordons.
inline Case RandomCase(std::mt19937_64& rng, int max_ranks, int max_units, double cordon_chance) {
  auto uniform = [&](double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng);
  };
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  Case k;
  const int p = pick(1, max_ranks);
  const double base = 1e-3;
  const int speed_kind = pick(0, 3);
  for (int r = 0; r < p; ++r) {
    double c = base;
    if (speed_kind == 1) c = base * uniform(1, 10);
    if (speed_kind == 2 && r == p - 1) c = base * pick(1, 10);  // one straggler, exact ratio
    if (speed_kind == 3 && r % 2 == 1) c = base * uniform(1, 3);
    k.c.push_back(c);
    k.n.push_back(pick(0, max_units));
  }
  const double taus[] = {0, 0.05 * base, 0.5 * base, base, 2 * base, uniform(0, 3) * base};
  k.tau = taus[pick(0, 5)];
  const double fractions[] = {0, 0.25, 0.5, 1, uniform(0, 1)};
  k.policy.max_pruned_fraction_rank = fractions[pick(0, 4)];
  k.policy.max_pruned_fraction_group = fractions[pick(0, 4)];
  const int64_t total = Total(k);
  const double lambdas[] = {0, 0.1 * base, base, 3 * base, uniform(0, 5) * base};
  k.policy.accuracy_weight_seconds = lambdas[pick(0, 4)] * std::max<int64_t>(1, total);
  k.policy.hysteresis = 0.05;
  k.cordoned.assign(p, false);
  k.chronic.assign(p, false);
  if (p > 1 && uniform(0, 1) < cordon_chance) k.cordoned[pick(0, p - 1)] = true;
  // A third of the groups with fixed costs per rank: none to the time of a few units, or
  // up to a whole all-local step on one rank (which then bounds every plan). (The draws
  // change the cases after the first; that decisions without fixed costs are unchanged
  // is `planner_bench digest`'s to show.)
  const int fixed_kind = pick(0, 5);
  if (fixed_kind <= 1) {
    for (int r = 0; r < p; ++r) {
      k.f.push_back(fixed_kind == 0 ? uniform(0, 4) * base
                                    : (r == p - 1 ? uniform(0, 1) * k.c[r] * k.n[r] : 0.0));
    }
  }
  // A quarter of the groups with a rank that takes no offloads (a throttled rank relieved
  // of units, DecisionLoop::TakesNoOffloads), an eighth with two.
  k.no_offloads.assign(p, false);
  const int no_offloads_kind = pick(0, 7);
  if (p > 1 && no_offloads_kind <= 1) k.no_offloads[pick(0, p - 1)] = true;
  if (p > 1 && no_offloads_kind == 0) k.no_offloads[pick(0, p - 1)] = true;
  return k;
}

inline constexpr BalanceMode kModes[] = {BalanceMode::kResize, BalanceMode::kMigrate,
                                         BalanceMode::kAuto};

inline Case Straggler() {
  Case k;
  k.c.assign(8, 1e-3);
  k.c[7] = 2e-3;
  k.n.assign(8, 64);
  k.tau = 1e-4;
  return k;
}

// Tokens per expert for Zipf(s) over `experts` experts, `tokens` in all; whole tokens
// (the rounding's remainder on the coldest) when `whole`, as a router's counts are.
inline std::vector<double> Zipf(int experts, double s, double tokens, bool whole = false) {
  std::vector<double> w(experts);
  for (int e = 0; e < experts; ++e) w[e] = 1.0 / std::pow(e + 1, s);
  double sum = 0;
  for (double v : w) sum += v;
  for (double& v : w) v = whole ? std::round(v * tokens / sum) : v * tokens / sum;
  if (whole) {
    double rounded = 0;
    for (double v : w) rounded += v;
    w.back() += tokens - rounded;
  }
  return w;
}

}  // namespace ballast::coordinator::planner_testing

#endif  // BALLAST_TESTS_COORDINATOR_PLANNER_PLANNER_TEST_UTIL_H_
