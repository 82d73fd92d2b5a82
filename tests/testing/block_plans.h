// Plans and parameterised cases shared by the block tests (parallel_mlp_test.cc,
// parallel_attention_test.cc): ownership layouts, plan builders for the block under test,
// and the ownership and plan cases both tests instantiate. The runs that execute them are
// in block_runs.h.
//
//   constexpr BlockPlans kPlans(BlockId(1));
//   PlanCase c{.name = "OffloadTwoRanks", .ranks = 2, .owner = Contiguous({8, 8}),
//              .plans = {{0, kPlans.Offloads({Off(1, 0, 3)})}, {2, kPlans.AllLocal()}}};
//   INSTANTIATE_TEST_SUITE_P(Plans, MlpExactPlanTest, ::testing::Values(c), CaseName());
#ifndef BALLAST_TESTS_TESTING_BLOCK_PLANS_H_
#define BALLAST_TESTS_TESTING_BLOCK_PLANS_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "ballast/plan.h"
#include "ballast/types.h"
#include "gtest/gtest.h"

namespace ballast::testing {

// The group RunRanks creates (RunRanksOptions::group), which plans must name.
inline constexpr char kTestGroup[] = "test/tp";
// The block tests' usual step shape: small enough that a run on four ranks takes
// milliseconds, with more than one sample so that samples must be kept apart.
inline constexpr int32_t kBatch = 2;
inline constexpr int32_t kSeq = 5;

// Contiguous ownership with the given number of units per rank, e.g. {12, 4}.
std::vector<RankId> Contiguous(const std::vector<int>& counts);
// Unit u of `units` owned by rank (u + shift) % ranks: nothing contiguous left.
std::vector<RankId> Interleaved(int units, int ranks, int shift);
// EvenOwnership of `units` over `ranks`, or ProportionalOwnership by `shares` if given.
absl::StatusOr<std::vector<RankId>> OwnershipFor(int units, int ranks,
                                                 const std::vector<double>& shares);

inline Offload Off(int owner, int helper, int units) {
  return {RankId(owner), RankId(helper), units};
}

// A plan of the test group listing `blocks`.
WorkloadPlan Plan(int64_t version, std::vector<BlockPlan> blocks,
                  Imputation imputation = Imputation::kZero);

// Block plans for one block, by what they change.
class BlockPlans {
 public:
  constexpr explicit BlockPlans(BlockId block) : block_(block) {}

  BlockPlan AllLocal() const { return Make({}, {}, {}); }
  BlockPlan Offloads(std::vector<Offload> offloads) const {
    return Make({}, std::move(offloads), {});
  }
  BlockPlan Prune(std::vector<int32_t> pruned, std::vector<Offload> offloads = {}) const {
    return Make(std::move(pruned), std::move(offloads), {});
  }
  // Counts (pruned, offloaded) refer to the new ownership.
  BlockPlan Reshard(std::vector<RankId> owner, std::vector<Offload> offloads = {},
                    std::vector<int32_t> pruned = {}) const {
    return Make(std::move(pruned), std::move(offloads), std::move(owner));
  }

 private:
  BlockPlan Make(std::vector<int32_t> pruned_units, std::vector<Offload> offloads,
                 std::vector<RankId> owner_of_unit) const;

  BlockId block_;
};

// No plan, or plans that change nothing, on an ownership.
struct OwnershipCase {
  std::string name;
  int ranks = 1;
  std::vector<double> shares;  // empty: EvenOwnership
  int32_t batch = kBatch;
  int32_t seq = kSeq;
};
void PrintTo(const OwnershipCase& c, std::ostream* os);

// The ownerships both block tests run plain TP on: one to four ranks, even and uneven.
std::vector<OwnershipCase> OwnershipCases();

// One script: plans offered before the given steps, versions 1, 2, ... in order.
struct PlanCase {
  std::string name;
  int ranks = 2;
  std::vector<RankId> owner;
  Imputation imputation = Imputation::kZero;
  int steps = 4;
  std::vector<std::pair<int, BlockPlan>> plans;  // step -> the block's plan
  // Priority policy and window; a window of 1 reorders storage at every step boundary.
  Priority priority = Priority::kChange;
  int32_t priority_window = 50;
  std::string backend = "cpu";  // RunRanksOptions::backend
  bool processes = false;       // Script::processes
};
void PrintTo(const PlanCase& c, std::ostream* os);

// One rank on the CPU and on CUDA, owning all `units`: plain TP, then `pruned` units
// pruned with each imputation.
std::vector<PlanCase> OneRankBackendCases(const BlockPlans& plans, int units, int32_t pruned);

// Each of `cases` once per backend, backend by backend: named LABEL_NAME, with the
// backend set; `backends` holds (LABEL, RunRanksOptions::backend) pairs.
std::vector<PlanCase> OnBackends(const std::vector<std::pair<std::string, std::string>>& backends,
                                 const std::vector<PlanCase>& cases);

// Why `c` cannot run here (its backend cannot run its ranks as threads, or as processes);
// empty when it can.
std::string WhyUnusable(const PlanCase& c);

// Names a parameterised case by its `name`.
struct CaseName {
  template <typename Case>
  std::string operator()(const ::testing::TestParamInfo<Case>& info) const {
    return info.param.name;
  }
};

}  // namespace ballast::testing

#endif  // BALLAST_TESTS_TESTING_BLOCK_PLANS_H_
