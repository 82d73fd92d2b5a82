// Exactness tests for ParallelMlp on real ranks (threads, real Gloo collectives).
//
// Every test that trains runs a script of steps through the real block and checks each
// step against a double-precision dense reference (tests/testing/dense_reference.h):
// output, input gradient, every parameter gradient, weights and AdamW moments, with each
// unit treated by the fate its owner reported, after checking those fates against the
// plan. Exact plans (empty, offload, reshard) must match the dense model; pruning plans
// must match it with the pruned units' contributions replaced by their imputation and
// their state left bitwise alone. The plan builders, cases and runs are shared with
// parallel_attention_test.cc (tests/testing/block_plans.h, block_runs.h).
#include "ballast/parallel_mlp.h"

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ballast/block.h"
#include "ballast/compute.h"
#include "ballast/ownership.h"
#include "ballast/plan.h"
#include "ballast/tp_group.h"
#include "ballast/types.h"
#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/block_checks.h"
#include "testing/block_plans.h"
#include "testing/block_runs.h"
#include "testing/dense_reference.h"
#include "testing/rank_threads.h"

namespace ballast {
namespace {

using ::ballast::testing::ApplyCase;
using ::ballast::testing::BadPlan;
using ::ballast::testing::BlockPlans;
using ::ballast::testing::CaseName;
using ::ballast::testing::Checked;
using ::ballast::testing::Contiguous;
using ::ballast::testing::DenseBlock;
using ::ballast::testing::ExpectBlockOutsideThePlanStaysExact;
using ::ballast::testing::ExpectOfferPlanRejects;
using ::ballast::testing::ExpectRejectsBadShapesAndKeepsWorking;
using ::ballast::testing::ExpectUnitMeanRejectsUnitsNotOwnedHere;
using ::ballast::testing::Factory;
using ::ballast::testing::Interleaved;
using ::ballast::testing::kBatch;
using ::ballast::testing::kSeq;
using ::ballast::testing::MakeStepBuffers;
using ::ballast::testing::MlpRun;
using ::ballast::testing::Off;
using ::ballast::testing::OfferEmptyPlans;
using ::ballast::testing::OnBackends;
using ::ballast::testing::OneRankBackendCases;
using ::ballast::testing::OwnershipCase;
using ::ballast::testing::OwnershipCases;
using ::ballast::testing::OwnershipFor;
using ::ballast::testing::Plan;
using ::ballast::testing::PlanCase;
using ::ballast::testing::RandomNormal;
using ::ballast::testing::RankContext;
using ::ballast::testing::ReferenceScript;
using ::ballast::testing::ReferenceUnits;
using ::ballast::testing::ResizeStep;
using ::ballast::testing::RunAndExpectMatch;
using ::ballast::testing::RunRanks;
using ::ballast::testing::StepBuffers;
using ::ballast::testing::WhyUnusable;
using ::testing::HasSubstr;

// 16 units of 8 neurons: enough for four ranks with uneven shares, small enough that a
// four-step run on four ranks takes milliseconds.
constexpr int32_t kHidden = 16;
constexpr int32_t kIntermediate = 128;
constexpr int32_t kUnitSize = 8;
constexpr int32_t kUnits = kIntermediate / kUnitSize;
constexpr BlockId kBlock(1);
constexpr BlockPlans kPlans(kBlock);

// Even units to rank 2, the others alternately to ranks 0 and 1: 4 + 4 + 8 units.
std::vector<RankId> Scattered() {
  std::vector<RankId> owner;
  for (int u = 0; u < kUnits; ++u) owner.push_back(RankId(u % 2 == 0 ? 2 : (u % 4 == 1 ? 0 : 1)));
  return owner;
}

MlpConfig ValidConfig() {
  MlpConfig config;
  config.id = kBlock;
  config.hidden = kHidden;
  config.intermediate = kIntermediate;
  config.unit_size = kUnitSize;
  return config;
}

// A block, its random dense parameters and a script of random steps without plans.
MlpRun NewRun(int ranks, const std::vector<RankId>& owner, int steps, uint32_t seed) {
  MlpRun run{.dense = DenseBlock::Mlp(kHidden, kIntermediate, kUnitSize)};
  run.params = RandomNormal(run.dense.dense_size(), seed, 0.2);
  run.config = ValidConfig();
  run.config.units = ReferenceUnits(owner, seed);
  run.script = ReferenceScript(run.dense, kBlock, ranks, owner, steps, seed);
  return run;
}

MlpRun RunForCase(const PlanCase& c, uint32_t seed) {
  return ApplyCase(NewRun(c.ranks, c.owner, c.steps, seed), c);
}

// ---------------------------------------------------------------------------------------
// (a) No plan, or plans that change nothing: plain TP, even and uneven.

class MlpOwnershipTest : public ::testing::TestWithParam<OwnershipCase> {};

TEST_P(MlpOwnershipTest, EmptyPlansMatchDense) {
  const OwnershipCase& c = GetParam();
  absl::StatusOr<std::vector<RankId>> owner = OwnershipFor(kUnits, c.ranks, c.shares);
  ASSERT_TRUE(owner.ok()) << owner.status();
  MlpRun run = NewRun(c.ranks, *owner, 3, 100 + c.ranks);
  OfferEmptyPlans(run, kPlans);
  RunAndExpectMatch(run);
}

INSTANTIATE_TEST_SUITE_P(Ownership, MlpOwnershipTest, ::testing::ValuesIn(OwnershipCases()),
                         CaseName());

TEST(MlpPlainTpTest, InterleavedOwnershipMatchesDense) {
  // Units of one rank need not be contiguous in the dense layout.
  MlpRun run = NewRun(3, Interleaved(kUnits, 3, 0), 3, 7);
  RunAndExpectMatch(run);
}

TEST(MlpPlainTpTest, ChangingBatchShapeBetweenStepsMatchesDense) {
  // A short last batch, then a longer sequence: buffers sized by the first step must not
  // be reused blindly.
  MlpRun run = NewRun(2, EvenOwnership(kUnits, 2), 3, 8);
  ResizeStep(run.script.steps[1], /*batch=*/1, /*seq=*/3, kHidden, 81);
  ResizeStep(run.script.steps[2], /*batch=*/3, /*seq=*/7, kHidden, 83);
  RunAndExpectMatch(run);
}

// ---------------------------------------------------------------------------------------
// (b) Exact plans: offload (migration) and reshard; (c) pruning. One script per case:
// plans offered before the given steps, versions 1, 2, ... in order.

class MlpExactPlanTest : public ::testing::TestWithParam<PlanCase> {};

TEST_P(MlpExactPlanTest, MatchesDenseEveryStep) { RunAndExpectMatch(RunForCase(GetParam(), 200)); }

std::vector<PlanCase> ExactPlanCases() {
  return {
      // One helper, then the roles reversed.
      {.name = "OffloadTwoRanks",
       .ranks = 2,
       .owner = Contiguous({8, 8}),
       .plans = {{0, kPlans.Offloads({Off(1, 0, 3)})}, {2, kPlans.Offloads({Off(0, 1, 5)})}}},
      // Rank 1 helps rank 0 and is helped by rank 2 at once; then a cycle of all three.
      {.name = "OffloadChainThreeRanks",
       .ranks = 3,
       .owner = Contiguous({6, 5, 5}),
       .plans = {{0, kPlans.Offloads({Off(0, 1, 2), Off(1, 2, 3)})},
                 {2, kPlans.Offloads({Off(0, 1, 2), Off(1, 2, 1), Off(2, 0, 4)})}}},
      // Three helpers for the slow rank 0 (which keeps one unit), one of which also helps
      // rank 3; then rank 0 hands everything to one helper; then plain TP again.
      {.name = "OffloadManyHelpersUneven",
       .ranks = 4,
       .owner = Contiguous({8, 2, 2, 4}),
       .plans = {{0, kPlans.Offloads({Off(0, 1, 2), Off(0, 2, 2), Off(0, 3, 3), Off(3, 1, 1)})},
                 {1, kPlans.Offloads({Off(0, 1, 8)})},
                 {2, kPlans.AllLocal()}}},
      // Steps with no offload skip the exchanges on every rank (no plan, then all-local):
      // the offloads after them still pair up (Gloo's exchange tags stay in step).
      {.name = "OffloadAfterStepsThatMoveNothing",
       .ranks = 3,
       .owner = Contiguous({6, 5, 5}),
       .steps = 5,
       .plans = {{1, kPlans.Offloads({Off(0, 1, 2)})},
                 {2, kPlans.AllLocal()},
                 {4, kPlans.Offloads({Off(2, 0, 3), Off(1, 2, 1)})}}},
      // Three ranks compute nothing of their own; rank 0 computes everything.
      {.name = "OffloadAllToOneRank",
       .ranks = 4,
       .owner = Contiguous({4, 4, 4, 4}),
       .plans = {{0, kPlans.Offloads({Off(1, 0, 4), Off(2, 0, 4), Off(3, 0, 4)})}}},
      // Offloading from interleaved ownership: the helper's extra range is not contiguous
      // in the dense layout.
      {.name = "OffloadInterleaved",
       .ranks = 3,
       .owner = Interleaved(kUnits, 3, 0),
       .plans = {{0, kPlans.Offloads({Off(0, 2, 3), Off(1, 0, 2)})}}},
      // Step 0 builds AdamW state under the initial owners; it must move with the units.
      {.name = "ReshardTwoRanks",
       .ranks = 2,
       .owner = Contiguous({8, 8}),
       .plans = {{1, kPlans.Reshard(Contiguous({12, 4}))}}},
      // Every unit changes owner.
      {.name = "ReshardSwapAll",
       .ranks = 2,
       .owner = Interleaved(kUnits, 2, 0),
       .plans = {{1, kPlans.Reshard(Interleaved(kUnits, 2, 1))}}},
      // Reshard and offload in one plan. The offload count refers to the new ownership:
      // rank 2 owns 5 units before and 8 after, so only the latter allows offloading 7.
      {.name = "ReshardScatteredWithOffload",
       .ranks = 3,
       .owner = Contiguous({6, 5, 5}),
       .plans = {{1, kPlans.Reshard(Scattered(), {Off(2, 0, 7)})}}},
      // Two reshards in a row, then a third back to even.
      {.name = "ReshardThreeTimesUneven",
       .ranks = 4,
       .owner = Contiguous({8, 2, 2, 4}),
       .steps = 5,
       .plans = {{1, kPlans.Reshard(Contiguous({2, 4, 4, 6}))},
                 {2, kPlans.Reshard(Contiguous({1, 1, 13, 1}))},
                 {3, kPlans.Reshard(Contiguous({4, 4, 4, 4}))}}},
  };
}

INSTANTIATE_TEST_SUITE_P(Plans, MlpExactPlanTest, ::testing::ValuesIn(ExactPlanCases()),
                         CaseName());

class MlpPruningTest : public ::testing::TestWithParam<PlanCase> {};

TEST_P(MlpPruningTest, MatchesImputedReferenceAndFreezesPrunedState) {
  RunAndExpectMatch(RunForCase(GetParam(), 300));
}

std::vector<PlanCase> PruningCases() {
  // Step 0 always runs unpruned, so every unit has AdamW moments to freeze and a running
  // mean to impute; the last plan restores plain TP, where the pruned units' lagging
  // AdamW step counts show in the bias correction.
  return {
      {.name = "ZeroTwoRanks",
       .ranks = 2,
       .owner = Contiguous({8, 8}),
       .imputation = Imputation::kZero,
       .plans = {{1, kPlans.Prune({0, 3})}, {3, kPlans.AllLocal()}}},
      {.name = "MeanTwoRanks",
       .ranks = 2,
       .owner = Contiguous({8, 8}),
       .imputation = Imputation::kMean,
       .plans = {{1, kPlans.Prune({0, 3})}, {3, kPlans.AllLocal()}}},
      // Pruning on every rank, with a different count in the second plan.
      {.name = "MeanThreeRanksUneven",
       .ranks = 3,
       .owner = Contiguous({2, 4, 10}),
       .imputation = Imputation::kMean,
       .steps = 5,
       .plans = {{1, kPlans.Prune({1, 0, 4})},
                 {2, kPlans.Prune({0, 2, 6})},
                 {4, kPlans.AllLocal()}}},
      // A rank that prunes everything computes nothing but still joins every collective.
      {.name = "MeanWholeRankPruned",
       .ranks = 2,
       .owner = Contiguous({8, 8}),
       .imputation = Imputation::kMean,
       .plans = {{1, kPlans.Prune({0, 8})}, {3, kPlans.AllLocal()}}},
      {.name = "ZeroWholeRankPruned",
       .ranks = 3,
       .owner = Contiguous({6, 5, 5}),
       .imputation = Imputation::kZero,
       .plans = {{1, kPlans.Prune({6, 0, 0})}}},
      // The straggler prunes some units and offloads others; the helper also prunes.
      {.name = "MeanPruneAndOffloadSameRank",
       .ranks = 3,
       .owner = Contiguous({4, 8, 4}),
       .imputation = Imputation::kMean,
       .plans = {{1, kPlans.Prune({1, 2, 0}, {Off(1, 0, 3), Off(1, 2, 2)})},
                 {3, kPlans.AllLocal()}}},
      // Pruned units (frozen, with fewer AdamW steps) then move to another owner: their
      // step counts and moments must travel with them. Rank 1 prunes 5 of units 8..15 and
      // hands 8..11 to rank 0, so at least one pruned unit moves.
      {.name = "ZeroPruneThenReshard",
       .ranks = 2,
       .owner = Contiguous({8, 8}),
       .imputation = Imputation::kZero,
       .steps = 5,
       .plans = {{1, kPlans.Prune({0, 5})}, {3, kPlans.Reshard(Contiguous({12, 4}))}}},
      // Storage reorders at every step boundary under each priority policy: the pruned
      // set moves between units while weights, moments, step counts and means travel
      // with their units.
      {.name = "ChangeWindowEveryStep",
       .ranks = 2,
       .owner = Contiguous({8, 8}),
       .imputation = Imputation::kMean,
       .steps = 6,
       .plans = {{1, kPlans.Prune({2, 3}, {Off(1, 0, 2)})}, {5, kPlans.AllLocal()}},
       .priority = Priority::kChange,
       .priority_window = 1},
      {.name = "MagnitudeWindowEveryStep",
       .ranks = 2,
       .owner = Contiguous({8, 8}),
       .imputation = Imputation::kZero,
       .steps = 5,
       .plans = {{1, kPlans.Prune({2, 3})}, {4, kPlans.AllLocal()}},
       .priority = Priority::kMagnitude,
       .priority_window = 1},
      {.name = "RandomWindowEveryStep",
       .ranks = 3,
       .owner = Contiguous({4, 8, 4}),
       .imputation = Imputation::kMean,
       .steps = 6,
       .plans = {{1, kPlans.Prune({1, 3, 1}, {Off(1, 2, 2)})}, {5, kPlans.AllLocal()}},
       .priority = Priority::kRandom,
       .priority_window = 1},
      {.name = "RoundRobinWindowEveryStep",
       .ranks = 2,
       .owner = Contiguous({8, 8}),
       .imputation = Imputation::kZero,
       .steps = 6,
       .plans = {{1, kPlans.Prune({3, 3})}, {5, kPlans.AllLocal()}},
       .priority = Priority::kRoundRobin,
       .priority_window = 1},
  };
}

INSTANTIATE_TEST_SUITE_P(Plans, MlpPruningTest, ::testing::ValuesIn(PruningCases()), CaseName());

// ---------------------------------------------------------------------------------------
// (d) The same block code on every backend, against the same dense reference: one rank
// (ranks as threads is a CPU-only layout; CUDA runs one process per GPU), plain TP and
// pruned with each imputation. The CUDA cases skip where no GPU is usable.

class MlpBackendTest : public ::testing::TestWithParam<PlanCase> {};

TEST_P(MlpBackendTest, OneRankMatchesDense) {
  const PlanCase& c = GetParam();
  if (std::string why = WhyUnusable(c); !why.empty()) GTEST_SKIP() << why;
  RunAndExpectMatch(RunForCase(c, 500));
}

INSTANTIATE_TEST_SUITE_P(Backends, MlpBackendTest,
                         ::testing::ValuesIn(OneRankBackendCases(kPlans, kUnits, 5)), CaseName());

// Several ranks, one process each: the layout of CUDA with more than one GPU, and on the
// CPU real Gloo between processes. Offload, prune with an offload, then reshard.
class MlpProcessTest : public ::testing::TestWithParam<PlanCase> {};

TEST_P(MlpProcessTest, RanksAsProcessesMatchDense) {
  const PlanCase& c = GetParam();
  if (std::string why = WhyUnusable(c); !why.empty()) GTEST_SKIP() << why;
  RunAndExpectMatch(RunForCase(c, 600));
}

std::vector<PlanCase> ProcessCases() {
  return OnBackends({{"cpu", "cpu"}, {"cuda", "cuda"}},
                    {{.name = "TwoRanks",
                      .ranks = 2,
                      .owner = Contiguous({8, 8}),
                      .imputation = Imputation::kMean,
                      .steps = 4,
                      .plans = {{0, kPlans.Offloads({Off(1, 0, 3)})},
                                {1, kPlans.Prune({2, 1}, {Off(1, 0, 2)})},
                                {2, kPlans.Reshard(Contiguous({11, 5}))}},
                      .processes = true}});
}

INSTANTIATE_TEST_SUITE_P(Backends, MlpProcessTest, ::testing::ValuesIn(ProcessCases()), CaseName());

// Several ranks with host-staged collectives: "cuda-staged" runs 2 and 3 CUDA ranks on one
// GPU (threads, and processes), which NCCL cannot; "cpu-staged" runs the same staging
// logic with the CPU's compute, on any machine. Empty, offload, prune and reshard plans.
class MlpStagedTest : public ::testing::TestWithParam<PlanCase> {};

TEST_P(MlpStagedTest, MatchesDense) {
  const PlanCase& c = GetParam();
  if (std::string why = WhyUnusable(c); !why.empty()) GTEST_SKIP() << why;
  RunAndExpectMatch(RunForCase(c, 700));
}

std::vector<PlanCase> StagedCases() {
  return OnBackends({{"CpuStaged", "cpu-staged"}, {"CudaStaged", "cuda-staged"}},
                    {{.name = "EmptyThreeRanks",
                      .ranks = 3,
                      .owner = Contiguous({6, 5, 5}),
                      .steps = 2,
                      .plans = {{0, kPlans.AllLocal()}}},
                     {.name = "OffloadChainThreeRanks",
                      .ranks = 3,
                      .owner = Contiguous({6, 5, 5}),
                      .steps = 3,
                      .plans = {{0, kPlans.Offloads({Off(0, 1, 2), Off(1, 2, 3)})},
                                {2, kPlans.Offloads({Off(0, 1, 2), Off(1, 2, 1), Off(2, 0, 4)})}}},
                     {.name = "MeanPrunedWithOffloadTwoRanks",
                      .ranks = 2,
                      .owner = Contiguous({8, 8}),
                      .imputation = Imputation::kMean,
                      .steps = 3,
                      .plans = {{1, kPlans.Prune({2, 1}, {Off(1, 0, 2)})}, {2, kPlans.AllLocal()}}},
                     {.name = "ReshardThreeRanks",
                      .ranks = 3,
                      .owner = Contiguous({6, 5, 5}),
                      .steps = 3,
                      .plans = {{1, kPlans.Reshard(Contiguous({4, 6, 6}))}}},
                     {.name = "TwoRankProcesses",
                      .ranks = 2,
                      .owner = Contiguous({8, 8}),
                      .imputation = Imputation::kMean,
                      .steps = 3,
                      .plans = {{0, kPlans.Offloads({Off(1, 0, 2)})},
                                {1, kPlans.Prune({2, 1}, {Off(1, 0, 2)})},
                                {2, kPlans.Reshard(Contiguous({5, 11}))}},
                      .processes = true}});
}

INSTANTIATE_TEST_SUITE_P(Staged, MlpStagedTest, ::testing::ValuesIn(StagedCases()), CaseName());

TEST(MlpPlanTest, BlocksNotInThePlanStayExact) {
  // Two MLPs on one group; the plan prunes only the second. The first must still be plain
  // TP: a plan applies to the blocks it names and no others.
  const MlpRun first = NewRun(2, EvenOwnership(kUnits, 2), 1, 400);
  MlpRun second = NewRun(2, EvenOwnership(kUnits, 2), 1, 401);
  second.config.id = BlockId(2);
  WorkloadPlan plan = Plan(1, {kPlans.Prune({3, 2})}, Imputation::kZero);
  plan.blocks[0].block = BlockId(2);
  ExpectBlockOutsideThePlanStaysExact(Checked(first), Factory(second), plan, {3, 2});
}

// ---------------------------------------------------------------------------------------
// (d) Bad input: an error naming the problem, never a crash, and the block unharmed.

TEST(MlpCreateTest, RejectsBadConfigsNamingTheField) {
  struct BadConfig {
    std::string what;
    std::string field;
    MlpConfig config;
  };
  std::vector<BadConfig> bad;
  auto add = [&bad](std::string what, std::string field, auto mutate) {
    MlpConfig config = ValidConfig();
    mutate(config);
    bad.push_back({std::move(what), std::move(field), std::move(config)});
  };
  add("hidden 0", "hidden", [](MlpConfig& c) { c.hidden = 0; });
  add("hidden -16", "hidden", [](MlpConfig& c) { c.hidden = -16; });
  add("intermediate 0", "intermediate", [](MlpConfig& c) { c.intermediate = 0; });
  add("intermediate -128", "intermediate", [](MlpConfig& c) { c.intermediate = -128; });
  add("unit_size 0", "unit_size", [](MlpConfig& c) { c.unit_size = 0; });
  add("activation 7", "activation", [](MlpConfig& c) { c.activation = MlpActivation(7); });
  add("unit_size -8", "unit_size", [](MlpConfig& c) { c.unit_size = -8; });
  add("unit_size 12 does not divide 128", "unit_size", [](MlpConfig& c) { c.unit_size = 12; });
  add("unit_size 256 > intermediate", "unit_size", [](MlpConfig& c) { c.unit_size = 256; });
  add("owner_of_unit too short", "owner_of_unit",
      [](MlpConfig& c) { c.units.owner_of_unit = std::vector<RankId>(kUnits - 1, RankId(0)); });
  add("owner_of_unit too long", "owner_of_unit",
      [](MlpConfig& c) { c.units.owner_of_unit = std::vector<RankId>(kUnits + 1, RankId(0)); });
  add("owner_of_unit names rank 2 of 2", "owner_of_unit", [](MlpConfig& c) {
    c.units.owner_of_unit = EvenOwnership(kUnits, 2);
    c.units.owner_of_unit.back() = RankId(2);
  });
  add("owner_of_unit names rank -1", "owner_of_unit", [](MlpConfig& c) {
    c.units.owner_of_unit = EvenOwnership(kUnits, 2);
    c.units.owner_of_unit.front() = RankId(-1);
  });

  absl::Status status = RunRanks(2, [&](RankContext& ctx) -> absl::Status {
    for (const BadConfig& b : bad) {
      absl::StatusOr<std::unique_ptr<ParallelMlp>> mlp =
          ParallelMlp::Create(ctx.group.get(), b.config);
      EXPECT_FALSE(mlp.ok()) << b.what;
      if (mlp.ok()) continue;
      EXPECT_EQ(mlp.status().code(), absl::StatusCode::kInvalidArgument) << b.what;
      EXPECT_THAT(std::string(mlp.status().message()), HasSubstr(b.field)) << b.what;
    }
    // A rejected block must not stay registered: its id is still free.
    BALLAST_ASSIGN_OR_RETURN(std::unique_ptr<ParallelMlp> mlp,
                             ParallelMlp::Create(ctx.group.get(), ValidConfig()));
    // Block ids are unique per group.
    EXPECT_FALSE(ParallelMlp::Create(ctx.group.get(), ValidConfig()).ok())
        << "a second block with the same id";
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

TEST(MlpCreateTest, LoadDenseRejectsWrongSizes) {
  const DenseBlock dense = DenseBlock::Mlp(kHidden, kIntermediate, kUnitSize);
  const MlpParams good = dense.ToMlpParams(RandomNormal(dense.dense_size(), 5, 0.2));
  absl::Status status = RunRanks(2, [&](RankContext& ctx) -> absl::Status {
    BALLAST_ASSIGN_OR_RETURN(std::unique_ptr<ParallelMlp> mlp,
                             ParallelMlp::Create(ctx.group.get(), ValidConfig()));
    MlpParams bad = good;
    bad.w1.pop_back();
    EXPECT_FALSE(mlp->LoadDense(bad).ok()) << "w1 short";
    bad = good;
    bad.b1.push_back(0);
    EXPECT_FALSE(mlp->LoadDense(bad).ok()) << "b1 long";
    bad = good;
    bad.w2.clear();
    EXPECT_FALSE(mlp->LoadDense(bad).ok()) << "w2 empty";
    bad = good;
    bad.b2.resize(kHidden / 2);
    EXPECT_FALSE(mlp->LoadDense(bad).ok()) << "b2 short";
    return mlp->LoadDense(good);
  });
  EXPECT_TRUE(status.ok()) << status;
}

TEST(MlpForwardTest, RejectsBadShapesAndKeepsWorking) {
  const MlpRun run = NewRun(2, EvenOwnership(kUnits, 2), 1, 500);
  ExpectRejectsBadShapesAndKeepsWorking(
      Checked(run), {{1 << 20, 1 << 20}, {std::numeric_limits<int32_t>::max(), 2}});
}

TEST(MlpForwardTest, RejectsNullBuffers) {
  const MlpRun run = NewRun(2, EvenOwnership(kUnits, 2), 1, 501);
  absl::Status status = RunRanks(2, [&](RankContext& ctx) -> absl::Status {
    BALLAST_ASSIGN_OR_RETURN(std::unique_ptr<ParallelBlock> block, Factory(run)(ctx));
    BALLAST_ASSIGN_OR_RETURN(StepBuffers b, MakeStepBuffers(ctx.backend->compute(), Checked(run)));
    BALLAST_RETURN_IF_ERROR(ctx.group->BeginStep());
    EXPECT_FALSE(block->Forward(nullptr, kBatch, kSeq, b.y.data()).ok()) << "null x";
    EXPECT_FALSE(block->Forward(b.x.data(), kBatch, kSeq, nullptr).ok()) << "null y";
    BALLAST_RETURN_IF_ERROR(block->Forward(b.x.data(), kBatch, kSeq, b.y.data()));
    EXPECT_FALSE(block->Backward(nullptr, b.dx.data()).ok()) << "null dy";
    EXPECT_FALSE(block->Backward(b.dy.data(), nullptr).ok()) << "null dx";
    BALLAST_RETURN_IF_ERROR(block->Backward(b.dy.data(), b.dx.data()));
    BALLAST_RETURN_IF_ERROR(block->AdamWStep(run.script.adamw));
    return ctx.group->EndStep();
  });
  EXPECT_TRUE(status.ok()) << status;
}

TEST(MlpForwardTest, UnitMeanRejectsUnitsNotOwnedHere) {
  // Rank 0 owns units 0..7, rank 1 owns 8..15.
  ExpectUnitMeanRejectsUnitsNotOwnedHere(Factory(NewRun(2, Contiguous({8, 8}), 1, 502)), kUnits);
}

// Bad plans for two ranks owning 8 + 8 units with plan v1 applied. Each has a new version
// (unless the version is the fault), so only the named fault can reject it.
std::vector<BadPlan> BadPlans() {
  std::vector<BadPlan> bad;
  int64_t version = 10;
  auto add = [&bad, &version](std::string what, std::string field, BlockPlan bp) {
    bad.push_back({std::move(what), std::move(field), Plan(++version, {bp})});
  };
  add("negative pruned count", "pruned_units", kPlans.Prune({-1, 0}));
  add("pruned count above owned", "pruned_units", kPlans.Prune({0, 9}));
  add("pruned_units shorter than the group", "pruned_units", kPlans.Prune({1}));
  add("pruned_units longer than the group", "pruned_units", kPlans.Prune({0, 0, 1}));
  add("offload to itself", "offloads", kPlans.Offloads({Off(0, 0, 1)}));
  add("helper out of range", "helper", kPlans.Offloads({Off(0, 2, 1)}));
  add("negative helper", "helper", kPlans.Offloads({Off(0, -1, 1)}));
  add("owner out of range", "owner", kPlans.Offloads({Off(2, 0, 1)}));
  add("negative offload count", "units", kPlans.Offloads({Off(1, 0, -2)}));
  add("offload count above owned", "offloads", kPlans.Offloads({Off(1, 0, 9)}));
  add("pruned plus offloaded above owned", "", kPlans.Prune({0, 5}, {Off(1, 0, 4)}));
  add("owner_of_unit too short", "owner_of_unit",
      kPlans.Reshard(std::vector<RankId>(kUnits - 1, RankId(0))));
  add("owner_of_unit names rank 2 of 2", "owner_of_unit",
      kPlans.Reshard(std::vector<RankId>(kUnits, RankId(2))));
  // Counts refer to the plan's new ownership: rank 1 keeps only 4 units.
  add("pruned count above the new ownership", "pruned_units",
      kPlans.Reshard(Contiguous({12, 4}), {}, {0, 5}));
  {
    BlockPlan unknown = kPlans.AllLocal();
    unknown.block = BlockId(99);
    bad.push_back({"unknown block", "block", Plan(++version, {unknown})});
  }
  {
    bad.push_back(
        {"block listed twice", "", Plan(++version, {kPlans.AllLocal(), kPlans.AllLocal()})});
  }
  {
    WorkloadPlan other = Plan(++version, {});
    other.group = GroupId("other/tp");
    bad.push_back({"another group", "group", other});
  }
  {
    WorkloadPlan odd = Plan(++version, {});
    odd.imputation = static_cast<Imputation>(7);
    bad.push_back({"unknown imputation", "imputation", odd});
  }
  bad.push_back({"version equal to the applied one", "version", Plan(1, {})});
  bad.push_back({"version 0", "version", Plan(0, {})});
  bad.push_back({"negative version", "version", Plan(-3, {})});
  return bad;
}

TEST(MlpPlanTest, OfferPlanRejectsBadPlansNamingTheField) {
  MlpRun run = NewRun(2, Contiguous({8, 8}), 3, 600);
  run.script.steps[0].plan = Plan(1, {kPlans.Prune({0, 1})});
  run.script.steps[1].before_step = [](RankContext& ctx, ParallelBlock&) {
    ExpectOfferPlanRejects(ctx, BadPlans());
  };
  // Valid only because counts refer to the new ownership (rank 1 owns 8 units now, 12
  // after). The harness checks that this, and none of the rejected plans, is applied.
  run.script.steps[1].plan = Plan(2, {kPlans.Reshard(Contiguous({4, 12}), {}, {0, 10})});
  RunAndExpectMatch(run);
}

}  // namespace
}  // namespace ballast
