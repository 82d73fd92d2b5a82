#include "testing/block_plans.h"

#include "ballast/ownership.h"
#include "testing/rank_processes.h"
#include "testing/rank_threads.h"

namespace ballast::testing {

std::vector<RankId> Contiguous(const std::vector<int>& counts) {
  std::vector<RankId> owner;
  for (size_t r = 0; r < counts.size(); ++r) owner.insert(owner.end(), counts[r], RankId(r));
  return owner;
}

std::vector<RankId> Interleaved(int units, int ranks, int shift) {
  std::vector<RankId> owner;
  for (int u = 0; u < units; ++u) owner.push_back(RankId((u + shift) % ranks));
  return owner;
}

absl::StatusOr<std::vector<RankId>> OwnershipFor(int units, int ranks,
                                                 const std::vector<double>& shares) {
  if (shares.empty()) return EvenOwnership(units, ranks);
  return ProportionalOwnership(units, shares);
}

WorkloadPlan Plan(int64_t version, std::vector<BlockPlan> blocks, Imputation imputation) {
  WorkloadPlan plan;
  plan.group = GroupId(kTestGroup);
  plan.version = PlanVersion(version);
  plan.imputation = imputation;
  plan.blocks = std::move(blocks);
  return plan;
}

BlockPlan BlockPlans::Make(std::vector<int32_t> pruned_units, std::vector<Offload> offloads,
                           std::vector<RankId> owner_of_unit) const {
  BlockPlan plan;
  plan.block = block_;
  plan.pruned_units = std::move(pruned_units);
  plan.offloads = std::move(offloads);
  plan.owner_of_unit = std::move(owner_of_unit);
  return plan;
}

void PrintTo(const OwnershipCase& c, std::ostream* os) { *os << c.name; }
void PrintTo(const PlanCase& c, std::ostream* os) { *os << c.name; }

std::vector<OwnershipCase> OwnershipCases() {
  return {{"OneRank", 1, {}},
          {"TwoRanksEven", 2, {}},
          {"TwoRanks3to1", 2, {3, 1}},
          {"ThreeRanksEven", 3, {}},
          {"ThreeRanks1to2to5", 3, {1, 2, 5}},
          {"FourRanksEven", 4, {}},
          {"FourRanks4to1to1to2", 4, {4, 1, 1, 2}}};
}

std::vector<PlanCase> OneRankBackendCases(const BlockPlans& plans, int units, int32_t pruned) {
  return OnBackends({{"cpu", "cpu"}, {"cuda", "cuda"}},
                    {{.name = "Plain",
                      .ranks = 1,
                      .owner = Contiguous({units}),
                      .plans = {{1, plans.AllLocal()}}},
                     {.name = "ZeroPruned",
                      .ranks = 1,
                      .owner = Contiguous({units}),
                      .imputation = Imputation::kZero,
                      .plans = {{1, plans.Prune({pruned})}, {3, plans.AllLocal()}}},
                     {.name = "MeanPruned",
                      .ranks = 1,
                      .owner = Contiguous({units}),
                      .imputation = Imputation::kMean,
                      .plans = {{1, plans.Prune({pruned})}, {3, plans.AllLocal()}}}});
}

std::vector<PlanCase> OnBackends(const std::vector<std::pair<std::string, std::string>>& backends,
                                 const std::vector<PlanCase>& cases) {
  std::vector<PlanCase> out;
  for (const auto& [label, backend] : backends) {
    for (PlanCase c : cases) {
      c.name = label + "_" + c.name;
      c.backend = backend;
      out.push_back(std::move(c));
    }
  }
  return out;
}

std::string WhyUnusable(const PlanCase& c) {
  if (c.processes) {
    if (ProcessRanksUsable(c.backend, c.ranks)) return "";
    return c.backend + " cannot run " + std::to_string(c.ranks) + " rank processes here";
  }
  if (BackendUsable(c.backend, c.ranks)) return "";
  return c.backend + " cannot run " + std::to_string(c.ranks) + " rank(s) here";
}

}  // namespace ballast::testing
