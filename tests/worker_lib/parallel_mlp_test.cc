// Exactness tests for ParallelMlp on real ranks (threads, real Gloo collectives).
//
// Every test that trains runs a script of steps through the real block and checks each
// step against a double-precision dense reference (tests/testing/dense_reference.h):
// output, input gradient, every parameter gradient, weights and AdamW moments, with each
// unit treated by the fate its owner reported, after checking those fates against the
// plan. Exact plans (empty, offload, reshard) must match the dense model; pruning plans
// must match it with the pruned units' contributions replaced by their imputation and
// their state left bitwise alone.
#include "ballast/parallel_mlp.h"

#include <cstdint>
#include <limits>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ballast/block.h"
#include "ballast/compute.h"
#include "ballast/plan.h"
#include "ballast/tp_group.h"
#include "ballast/types.h"
#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/block_checks.h"
#include "testing/dense_reference.h"
#include "testing/rank_processes.h"
#include "testing/rank_threads.h"

namespace ballast {
namespace {

using ::ballast::testing::BlockFactory;
using ::ballast::testing::CheckedBlock;
using ::ballast::testing::ExpectBlockOutsideThePlanStaysExact;
using ::ballast::testing::ExpectRejectsBadShapesAndKeepsWorking;
using ::ballast::testing::DenseBlock;
using ::ballast::testing::DenseResult;
using ::ballast::testing::ExpectRunMatchesReference;
using ::ballast::testing::MaxRelError;
using ::ballast::testing::RandomNormal;
using ::ballast::testing::RandomSteps;
using ::ballast::testing::RankContext;
using ::ballast::testing::RunRanks;
using ::ballast::testing::RunRecord;
using ::ballast::testing::RunScript;
using ::ballast::testing::Script;
using ::ballast::testing::ScriptStep;
using ::ballast::testing::ToDouble;
using ::ballast::testing::ToHost;
using ::testing::HasSubstr;

// 16 units of 8 neurons: enough for four ranks with uneven shares, small enough that a
// four-step run on four ranks takes milliseconds.
constexpr int32_t kHidden = 16;
constexpr int32_t kIntermediate = 128;
constexpr int32_t kUnitSize = 8;
constexpr int32_t kUnits = kIntermediate / kUnitSize;
constexpr int32_t kBatch = 2;
constexpr int32_t kSeq = 5;
constexpr double kTolerance = 1e-5;
constexpr BlockId kBlock(1);
constexpr char kGroup[] = "test/tp";  // the group RunRanks creates

// Contiguous ownership with the given number of units per rank, e.g. {12, 4}.
std::vector<RankId> Contiguous(const std::vector<int>& counts) {
  std::vector<RankId> owner;
  for (size_t r = 0; r < counts.size(); ++r) owner.insert(owner.end(), counts[r], RankId(r));
  return owner;
}

// Unit u owned by rank (u + shift) % ranks: nothing contiguous left.
std::vector<RankId> Interleaved(int ranks, int shift) {
  std::vector<RankId> owner;
  for (int u = 0; u < kUnits; ++u) owner.push_back(RankId((u + shift) % ranks));
  return owner;
}

// Even units to rank 2, the others alternately to ranks 0 and 1: 4 + 4 + 8 units.
std::vector<RankId> Scattered() {
  std::vector<RankId> owner;
  for (int u = 0; u < kUnits; ++u) owner.push_back(RankId(u % 2 == 0 ? 2 : (u % 4 == 1 ? 0 : 1)));
  return owner;
}

Offload Off(int owner, int helper, int units) { return {RankId(owner), RankId(helper), units}; }

// Block plans for kBlock, by what they change.
BlockPlan MakeBlockPlan(std::vector<int32_t> pruned_units, std::vector<Offload> offloads,
                        std::vector<RankId> owner_of_unit) {
  BlockPlan plan;
  plan.block = kBlock;
  plan.pruned_units = std::move(pruned_units);
  plan.offloads = std::move(offloads);
  plan.owner_of_unit = std::move(owner_of_unit);
  return plan;
}
BlockPlan AllLocal() { return MakeBlockPlan({}, {}, {}); }
BlockPlan Offloads(std::vector<Offload> offloads) { return MakeBlockPlan({}, offloads, {}); }
BlockPlan Prune(std::vector<int32_t> pruned, std::vector<Offload> offloads = {}) {
  return MakeBlockPlan(std::move(pruned), std::move(offloads), {});
}
BlockPlan Reshard(std::vector<RankId> owner, std::vector<Offload> offloads = {},
                  std::vector<int32_t> pruned = {}) {
  return MakeBlockPlan(std::move(pruned), std::move(offloads), std::move(owner));
}

WorkloadPlan Plan(int64_t version, std::vector<BlockPlan> blocks,
                  Imputation imputation = Imputation::kZero) {
  WorkloadPlan plan;
  plan.group = GroupId(kGroup);
  plan.version = PlanVersion(version);
  plan.imputation = imputation;
  plan.blocks = std::move(blocks);
  return plan;
}

// A block, its random dense parameters and a script of random steps without plans.
struct MlpRun {
  DenseBlock dense = DenseBlock::Mlp(kHidden, kIntermediate, kUnitSize);
  std::vector<float> params;
  MlpConfig config;
  Script script;
};

MlpRun NewRun(int ranks, const std::vector<RankId>& owner, int steps, uint32_t seed) {
  MlpRun run;
  run.params = RandomNormal(run.dense.dense_size(), seed, 0.2);
  run.config.id = kBlock;
  run.config.hidden = kHidden;
  run.config.intermediate = kIntermediate;
  run.config.unit_size = kUnitSize;
  run.config.units.owner_of_unit = owner;
  run.config.units.seed = seed;
  // The reference samples running means every step.
  run.config.units.mean_interval = 1;
  run.script.ranks = ranks;
  run.script.block = kBlock;
  run.script.owner_of_unit = owner;
  run.script.batch = kBatch;
  run.script.seq = kSeq;
  // lr: large enough that three steps move weights far beyond the tolerance, so a skipped
  // or doubled update cannot pass. eps: large, because AdamW's first steps are ~lr * g / |g|
  // and would turn float rounding in a gradient that is zero in exact arithmetic (the key
  // bias of attention: softmax ignores a shift of all scores) into steps of +-lr; with
  // lr / eps = 0.1 a gradient's rounding error moves a weight by a tenth of it at most.
  run.script.adamw.lr = 1e-2f;
  run.script.adamw.eps = 1e-1f;
  run.script.mean_decay = run.config.units.mean_decay;
  run.script.steps = RandomSteps(run.dense, kBatch, kSeq, steps, seed + 1);
  return run;
}

BlockFactory Factory(const MlpConfig& config, const MlpParams& params) {
  return [config, params](RankContext& ctx) -> absl::StatusOr<std::unique_ptr<ParallelBlock>> {
    BALLAST_ASSIGN_OR_RETURN(std::unique_ptr<ParallelMlp> mlp,
                             ParallelMlp::Create(ctx.group.get(), config));
    BALLAST_RETURN_IF_ERROR(mlp->LoadDense(params));
    return std::unique_ptr<ParallelBlock>(std::move(mlp));
  };
}

BlockFactory Factory(const MlpRun& run) {
  return Factory(run.config, run.dense.ToMlpParams(run.params));
}

// The block of `run` and its first step, for the shared checks in testing/block_checks.h.
CheckedBlock Checked(const MlpRun& run) {
  return CheckedBlock{.factory = Factory(run),
                      .dense = &run.dense,
                      .params = run.params,
                      .step = &run.script.steps[0],
                      .adamw = run.script.adamw,
                      .batch = kBatch,
                      .seq = kSeq,
                      .hidden = kHidden};
}

void RunAndExpectMatch(const MlpRun& run) {
  absl::StatusOr<RunRecord> record = RunScript(run.script, Factory(run));
  ASSERT_TRUE(record.ok()) << record.status();
  ExpectRunMatchesReference(run.dense, run.params, run.script, *record, kTolerance);
}

// ---------------------------------------------------------------------------------------
// (a) No plan, or plans that change nothing: plain TP, even and uneven.

struct OwnershipCase {
  std::string name;
  int ranks = 1;
  std::vector<double> shares;  // empty: EvenOwnership
};

void PrintTo(const OwnershipCase& c, std::ostream* os) { *os << c.name; }

class MlpOwnershipTest : public ::testing::TestWithParam<OwnershipCase> {};

TEST_P(MlpOwnershipTest, EmptyPlansMatchDense) {
  const OwnershipCase& c = GetParam();
  std::vector<RankId> owner = EvenOwnership(kUnits, c.ranks);
  if (!c.shares.empty()) {
    absl::StatusOr<std::vector<RankId>> proportional = ProportionalOwnership(kUnits, c.shares);
    ASSERT_TRUE(proportional.ok()) << proportional.status();
    owner = *proportional;
  }
  MlpRun run = NewRun(c.ranks, owner, 3, 100 + c.ranks);
  // Step 0 runs before any plan; step 1 under a plan that lists no block; step 2 under one
  // that lists the block with zero pruned units on every rank. All three are plain TP.
  run.script.steps[1].plan = Plan(1, {});
  run.script.steps[2].plan = Plan(2, {Prune(std::vector<int32_t>(c.ranks, 0))});
  RunAndExpectMatch(run);
}

INSTANTIATE_TEST_SUITE_P(Ownership, MlpOwnershipTest,
                         ::testing::Values(OwnershipCase{"OneRank", 1, {}},
                                           OwnershipCase{"TwoRanksEven", 2, {}},
                                           OwnershipCase{"TwoRanks3to1", 2, {3, 1}},
                                           OwnershipCase{"ThreeRanksEven", 3, {}},
                                           OwnershipCase{"ThreeRanks1to2to5", 3, {1, 2, 5}},
                                           OwnershipCase{"FourRanksEven", 4, {}},
                                           OwnershipCase{"FourRanks4to1to1to2", 4, {4, 1, 1, 2}}),
                         [](const ::testing::TestParamInfo<OwnershipCase>& info) {
                           return info.param.name;
                         });

TEST(MlpPlainTpTest, InterleavedOwnershipMatchesDense) {
  // Units of one rank need not be contiguous in the dense layout.
  MlpRun run = NewRun(3, Interleaved(3, 0), 3, 7);
  RunAndExpectMatch(run);
}

TEST(MlpPlainTpTest, ChangingBatchShapeBetweenStepsMatchesDense) {
  // A short last batch, then a longer sequence: buffers sized by the first step must not
  // be reused blindly.
  MlpRun run = NewRun(2, EvenOwnership(kUnits, 2), 3, 8);
  ScriptStep& short_step = run.script.steps[1];
  short_step.batch = 1;
  short_step.seq = 3;
  short_step.x = RandomNormal(1 * 3 * kHidden, 81, 1.0);
  short_step.dy = RandomNormal(1 * 3 * kHidden, 82, 1.0);
  ScriptStep& long_step = run.script.steps[2];
  long_step.batch = 3;
  long_step.seq = 7;
  long_step.x = RandomNormal(3 * 7 * kHidden, 83, 1.0);
  long_step.dy = RandomNormal(3 * 7 * kHidden, 84, 1.0);
  RunAndExpectMatch(run);
}

// ---------------------------------------------------------------------------------------
// (b) Exact plans: offload (migration) and reshard; (c) pruning. One script per case:
// plans offered before the given steps, versions 1, 2, ... in order.

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

void PrintTo(const PlanCase& c, std::ostream* os) { *os << c.name; }

MlpRun RunForCase(const PlanCase& c, uint32_t seed) {
  MlpRun run = NewRun(c.ranks, c.owner, c.steps, seed);
  run.config.units.priority = c.priority;
  run.config.units.priority_window = c.priority_window;
  run.script.backend = c.backend;
  run.script.processes = c.processes;
  int64_t version = 0;
  for (const auto& [step, block_plan] : c.plans) {
    run.script.steps[step].plan = Plan(++version, {block_plan}, c.imputation);
  }
  return run;
}

class MlpExactPlanTest : public ::testing::TestWithParam<PlanCase> {};

TEST_P(MlpExactPlanTest, MatchesDenseEveryStep) { RunAndExpectMatch(RunForCase(GetParam(), 200)); }

std::vector<PlanCase> ExactPlanCases() {
  return {
      // One helper, then the roles reversed.
      {.name = "OffloadTwoRanks",
       .ranks = 2,
       .owner = Contiguous({8, 8}),
       .plans = {{0, Offloads({Off(1, 0, 3)})}, {2, Offloads({Off(0, 1, 5)})}}},
      // Rank 1 helps rank 0 and is helped by rank 2 at once; then a cycle of all three.
      {.name = "OffloadChainThreeRanks",
       .ranks = 3,
       .owner = Contiguous({6, 5, 5}),
       .plans = {{0, Offloads({Off(0, 1, 2), Off(1, 2, 3)})},
                 {2, Offloads({Off(0, 1, 2), Off(1, 2, 1), Off(2, 0, 4)})}}},
      // Three helpers for the slow rank 0 (which keeps one unit), one of which also helps
      // rank 3; then rank 0 hands everything to one helper; then plain TP again.
      {.name = "OffloadManyHelpersUneven",
       .ranks = 4,
       .owner = Contiguous({8, 2, 2, 4}),
       .plans = {{0, Offloads({Off(0, 1, 2), Off(0, 2, 2), Off(0, 3, 3), Off(3, 1, 1)})},
                 {1, Offloads({Off(0, 1, 8)})},
                 {2, AllLocal()}}},
      // Steps with no offload skip the exchanges on every rank (no plan, then all-local):
      // the offloads after them still pair up (Gloo's exchange tags stay in step).
      {.name = "OffloadAfterStepsThatMoveNothing",
       .ranks = 3,
       .owner = Contiguous({6, 5, 5}),
       .steps = 5,
       .plans = {{1, Offloads({Off(0, 1, 2)})},
                 {2, AllLocal()},
                 {4, Offloads({Off(2, 0, 3), Off(1, 2, 1)})}}},
      // Three ranks compute nothing of their own; rank 0 computes everything.
      {.name = "OffloadAllToOneRank",
       .ranks = 4,
       .owner = Contiguous({4, 4, 4, 4}),
       .plans = {{0, Offloads({Off(1, 0, 4), Off(2, 0, 4), Off(3, 0, 4)})}}},
      // Offloading from interleaved ownership: the helper's extra range is not contiguous
      // in the dense layout.
      {.name = "OffloadInterleaved",
       .ranks = 3,
       .owner = Interleaved(3, 0),
       .plans = {{0, Offloads({Off(0, 2, 3), Off(1, 0, 2)})}}},
      // Step 0 builds AdamW state under the initial owners; it must move with the units.
      {.name = "ReshardTwoRanks",
       .ranks = 2,
       .owner = Contiguous({8, 8}),
       .plans = {{1, Reshard(Contiguous({12, 4}))}}},
      // Every unit changes owner.
      {.name = "ReshardSwapAll",
       .ranks = 2,
       .owner = Interleaved(2, 0),
       .plans = {{1, Reshard(Interleaved(2, 1))}}},
      // Reshard and offload in one plan. The offload count refers to the new ownership:
      // rank 2 owns 5 units before and 8 after, so only the latter allows offloading 7.
      {.name = "ReshardScatteredWithOffload",
       .ranks = 3,
       .owner = Contiguous({6, 5, 5}),
       .plans = {{1, Reshard(Scattered(), {Off(2, 0, 7)})}}},
      // Two reshards in a row, then a third back to even.
      {.name = "ReshardThreeTimesUneven",
       .ranks = 4,
       .owner = Contiguous({8, 2, 2, 4}),
       .steps = 5,
       .plans = {{1, Reshard(Contiguous({2, 4, 4, 6}))},
                 {2, Reshard(Contiguous({1, 1, 13, 1}))},
                 {3, Reshard(Contiguous({4, 4, 4, 4}))}}},
  };
}

INSTANTIATE_TEST_SUITE_P(Plans, MlpExactPlanTest, ::testing::ValuesIn(ExactPlanCases()),
                         [](const ::testing::TestParamInfo<PlanCase>& info) {
                           return info.param.name;
                         });

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
       .plans = {{1, Prune({0, 3})}, {3, AllLocal()}}},
      {.name = "MeanTwoRanks",
       .ranks = 2,
       .owner = Contiguous({8, 8}),
       .imputation = Imputation::kMean,
       .plans = {{1, Prune({0, 3})}, {3, AllLocal()}}},
      // Pruning on every rank, with a different count in the second plan.
      {.name = "MeanThreeRanksUneven",
       .ranks = 3,
       .owner = Contiguous({2, 4, 10}),
       .imputation = Imputation::kMean,
       .steps = 5,
       .plans = {{1, Prune({1, 0, 4})}, {2, Prune({0, 2, 6})}, {4, AllLocal()}}},
      // A rank that prunes everything computes nothing but still joins every collective.
      {.name = "MeanWholeRankPruned",
       .ranks = 2,
       .owner = Contiguous({8, 8}),
       .imputation = Imputation::kMean,
       .plans = {{1, Prune({0, 8})}, {3, AllLocal()}}},
      {.name = "ZeroWholeRankPruned",
       .ranks = 3,
       .owner = Contiguous({6, 5, 5}),
       .imputation = Imputation::kZero,
       .plans = {{1, Prune({6, 0, 0})}}},
      // The straggler prunes some units and offloads others; the helper also prunes.
      {.name = "MeanPruneAndOffloadSameRank",
       .ranks = 3,
       .owner = Contiguous({4, 8, 4}),
       .imputation = Imputation::kMean,
       .plans = {{1, Prune({1, 2, 0}, {Off(1, 0, 3), Off(1, 2, 2)})}, {3, AllLocal()}}},
      // Pruned units (frozen, with fewer AdamW steps) then move to another owner: their
      // step counts and moments must travel with them. Rank 1 prunes 5 of units 8..15 and
      // hands 8..11 to rank 0, so at least one pruned unit moves.
      {.name = "ZeroPruneThenReshard",
       .ranks = 2,
       .owner = Contiguous({8, 8}),
       .imputation = Imputation::kZero,
       .steps = 5,
       .plans = {{1, Prune({0, 5})}, {3, Reshard(Contiguous({12, 4}))}}},
      // Storage reorders at every step boundary under each priority policy: the pruned
      // set moves between units while weights, moments, step counts and means travel
      // with their units.
      {.name = "ChangeWindowEveryStep",
       .ranks = 2,
       .owner = Contiguous({8, 8}),
       .imputation = Imputation::kMean,
       .steps = 6,
       .plans = {{1, Prune({2, 3}, {Off(1, 0, 2)})}, {5, AllLocal()}},
       .priority = Priority::kChange,
       .priority_window = 1},
      {.name = "MagnitudeWindowEveryStep",
       .ranks = 2,
       .owner = Contiguous({8, 8}),
       .imputation = Imputation::kZero,
       .steps = 5,
       .plans = {{1, Prune({2, 3})}, {4, AllLocal()}},
       .priority = Priority::kMagnitude,
       .priority_window = 1},
      {.name = "RandomWindowEveryStep",
       .ranks = 3,
       .owner = Contiguous({4, 8, 4}),
       .imputation = Imputation::kMean,
       .steps = 6,
       .plans = {{1, Prune({1, 3, 1}, {Off(1, 2, 2)})}, {5, AllLocal()}},
       .priority = Priority::kRandom,
       .priority_window = 1},
      {.name = "RoundRobinWindowEveryStep",
       .ranks = 2,
       .owner = Contiguous({8, 8}),
       .imputation = Imputation::kZero,
       .steps = 6,
       .plans = {{1, Prune({3, 3})}, {5, AllLocal()}},
       .priority = Priority::kRoundRobin,
       .priority_window = 1},
  };
}

INSTANTIATE_TEST_SUITE_P(Plans, MlpPruningTest, ::testing::ValuesIn(PruningCases()),
                         [](const ::testing::TestParamInfo<PlanCase>& info) {
                           return info.param.name;
                         });

// ---------------------------------------------------------------------------------------
// (d) The same block code on every backend, against the same dense reference: one rank
// (ranks as threads is a CPU-only layout; CUDA runs one process per GPU), plain TP and
// pruned with each imputation. The CUDA cases skip where no GPU is usable.

class MlpBackendTest : public ::testing::TestWithParam<PlanCase> {};

TEST_P(MlpBackendTest, OneRankMatchesDense) {
  const PlanCase& c = GetParam();
  if (!ballast::testing::BackendUsable(c.backend, c.ranks)) {
    GTEST_SKIP() << c.backend << " cannot run " << c.ranks << " rank(s) here";
  }
  RunAndExpectMatch(RunForCase(c, 500));
}

std::vector<PlanCase> BackendCases() {
  std::vector<PlanCase> cases;
  for (const std::string backend : {"cpu", "cuda"}) {
    cases.push_back({.name = backend + "_Plain", .ranks = 1, .owner = Contiguous({16}),
                     .plans = {{1, AllLocal()}}, .backend = backend});
    cases.push_back({.name = backend + "_ZeroPruned", .ranks = 1, .owner = Contiguous({16}),
                     .imputation = Imputation::kZero,
                     .plans = {{1, Prune({5})}, {3, AllLocal()}}, .backend = backend});
    cases.push_back({.name = backend + "_MeanPruned", .ranks = 1, .owner = Contiguous({16}),
                     .imputation = Imputation::kMean,
                     .plans = {{1, Prune({5})}, {3, AllLocal()}}, .backend = backend});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Backends, MlpBackendTest, ::testing::ValuesIn(BackendCases()),
                         [](const ::testing::TestParamInfo<PlanCase>& info) {
                           return info.param.name;
                         });

// Several ranks, one process each: the layout of CUDA with more than one GPU, and on the
// CPU real Gloo between processes. Offload, prune with an offload, then reshard.
class MlpProcessTest : public ::testing::TestWithParam<PlanCase> {};

TEST_P(MlpProcessTest, RanksAsProcessesMatchDense) {
  const PlanCase& c = GetParam();
  if (!ballast::testing::ProcessRanksUsable(c.backend, c.ranks)) {
    GTEST_SKIP() << c.backend << " cannot run " << c.ranks << " rank processes here";
  }
  RunAndExpectMatch(RunForCase(c, 600));
}

std::vector<PlanCase> ProcessCases() {
  std::vector<PlanCase> cases;
  for (const std::string backend : {"cpu", "cuda"}) {
    cases.push_back({.name = backend + "_TwoRanks",
                     .ranks = 2,
                     .owner = Contiguous({8, 8}),
                     .imputation = Imputation::kMean,
                     .steps = 4,
                     .plans = {{0, Offloads({Off(1, 0, 3)})},
                               {1, Prune({2, 1}, {Off(1, 0, 2)})},
                               {2, Reshard(Contiguous({11, 5}))}},
                     .backend = backend,
                     .processes = true});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Backends, MlpProcessTest, ::testing::ValuesIn(ProcessCases()),
                         [](const ::testing::TestParamInfo<PlanCase>& info) {
                           return info.param.name;
                         });

// Several ranks with host-staged collectives: "cuda-staged" runs 2 and 3 CUDA ranks on one
// GPU (threads, and processes), which NCCL cannot; "cpu-staged" runs the same staging
// logic with the CPU's compute, on any machine. Empty, offload, prune and reshard plans.
class MlpStagedTest : public ::testing::TestWithParam<PlanCase> {};

TEST_P(MlpStagedTest, MatchesDense) {
  const PlanCase& c = GetParam();
  const bool usable = c.processes ? ballast::testing::ProcessRanksUsable(c.backend, c.ranks)
                                  : ballast::testing::BackendUsable(c.backend, c.ranks);
  if (!usable) GTEST_SKIP() << c.backend << " cannot run " << c.ranks << " rank(s) here";
  RunAndExpectMatch(RunForCase(c, 700));
}

std::vector<PlanCase> StagedCases() {
  std::vector<PlanCase> cases;
  for (const std::string backend : {"cpu-staged", "cuda-staged"}) {
    const std::string name = backend == "cpu-staged" ? "CpuStaged" : "CudaStaged";
    cases.push_back({.name = name + "_EmptyThreeRanks",
                     .ranks = 3,
                     .owner = Contiguous({6, 5, 5}),
                     .steps = 2,
                     .plans = {{0, AllLocal()}},
                     .backend = backend});
    cases.push_back({.name = name + "_OffloadChainThreeRanks",
                     .ranks = 3,
                     .owner = Contiguous({6, 5, 5}),
                     .steps = 3,
                     .plans = {{0, Offloads({Off(0, 1, 2), Off(1, 2, 3)})},
                               {2, Offloads({Off(0, 1, 2), Off(1, 2, 1), Off(2, 0, 4)})}},
                     .backend = backend});
    cases.push_back({.name = name + "_MeanPrunedWithOffloadTwoRanks",
                     .ranks = 2,
                     .owner = Contiguous({8, 8}),
                     .imputation = Imputation::kMean,
                     .steps = 3,
                     .plans = {{1, Prune({2, 1}, {Off(1, 0, 2)})}, {2, AllLocal()}},
                     .backend = backend});
    cases.push_back({.name = name + "_ReshardThreeRanks",
                     .ranks = 3,
                     .owner = Contiguous({6, 5, 5}),
                     .steps = 3,
                     .plans = {{1, Reshard(Contiguous({4, 6, 6}))}},
                     .backend = backend});
    cases.push_back({.name = name + "_TwoRankProcesses",
                     .ranks = 2,
                     .owner = Contiguous({8, 8}),
                     .imputation = Imputation::kMean,
                     .steps = 3,
                     .plans = {{0, Offloads({Off(1, 0, 2)})}, {1, Prune({2, 1}, {Off(1, 0, 2)})},
                               {2, Reshard(Contiguous({5, 11}))}},
                     .backend = backend,
                     .processes = true});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Staged, MlpStagedTest, ::testing::ValuesIn(StagedCases()),
                         [](const ::testing::TestParamInfo<PlanCase>& info) {
                           return info.param.name;
                         });

TEST(MlpPlanTest, BlocksNotInThePlanStayExact) {
  // Two MLPs on one group; the plan prunes only the second. The first must still be plain
  // TP: a plan applies to the blocks it names and no others.
  const MlpRun first = NewRun(2, EvenOwnership(kUnits, 2), 1, 400);
  MlpRun second = NewRun(2, EvenOwnership(kUnits, 2), 1, 401);
  second.config.id = BlockId(2);
  WorkloadPlan plan = Plan(1, {Prune({3, 2})}, Imputation::kZero);
  plan.blocks[0].block = BlockId(2);
  ExpectBlockOutsideThePlanStaysExact(Checked(first), Factory(second), plan, {3, 2});
}

// ---------------------------------------------------------------------------------------
// (d) Bad input: an error naming the problem, never a crash, and the block unharmed.

MlpConfig ValidConfig() {
  MlpConfig config;
  config.id = kBlock;
  config.hidden = kHidden;
  config.intermediate = kIntermediate;
  config.unit_size = kUnitSize;
  return config;
}

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
  MlpRun run = NewRun(2, EvenOwnership(kUnits, 2), 1, 501);
  const ScriptStep& step = run.script.steps[0];
  const size_t n = static_cast<size_t>(kBatch) * kSeq * kHidden;
  absl::Status status = RunRanks(2, [&](RankContext& ctx) -> absl::Status {
    BALLAST_ASSIGN_OR_RETURN(std::unique_ptr<ParallelBlock> block, Factory(run)(ctx));
    Compute& compute = ctx.backend->compute();
    BALLAST_ASSIGN_OR_RETURN(Buffer x, compute.Allocate(n));
    BALLAST_ASSIGN_OR_RETURN(Buffer y, compute.Allocate(n));
    BALLAST_ASSIGN_OR_RETURN(Buffer dy, compute.Allocate(n));
    BALLAST_ASSIGN_OR_RETURN(Buffer dx, compute.Allocate(n));
    compute.CopyFromHost(step.x.data(), x.data(), n);
    compute.CopyFromHost(step.dy.data(), dy.data(), n);
    BALLAST_RETURN_IF_ERROR(ctx.group->BeginStep());
    EXPECT_FALSE(block->Forward(nullptr, kBatch, kSeq, y.data()).ok()) << "null x";
    EXPECT_FALSE(block->Forward(x.data(), kBatch, kSeq, nullptr).ok()) << "null y";
    BALLAST_RETURN_IF_ERROR(block->Forward(x.data(), kBatch, kSeq, y.data()));
    EXPECT_FALSE(block->Backward(nullptr, dx.data()).ok()) << "null dy";
    EXPECT_FALSE(block->Backward(dy.data(), nullptr).ok()) << "null dx";
    BALLAST_RETURN_IF_ERROR(block->Backward(dy.data(), dx.data()));
    BALLAST_RETURN_IF_ERROR(block->AdamWStep(run.script.adamw));
    return ctx.group->EndStep();
  });
  EXPECT_TRUE(status.ok()) << status;
}

TEST(MlpForwardTest, UnitMeanRejectsUnitsNotOwnedHere) {
  MlpRun run = NewRun(2, Contiguous({8, 8}), 1, 502);
  absl::Status status = RunRanks(2, [&](RankContext& ctx) -> absl::Status {
    BALLAST_ASSIGN_OR_RETURN(std::unique_ptr<ParallelBlock> block, Factory(run)(ctx));
    EXPECT_FALSE(block->UnitMean(-1).ok());
    EXPECT_FALSE(block->UnitMean(kUnits).ok());
    // Rank 0 owns units 0..7, rank 1 owns 8..15.
    EXPECT_FALSE(block->UnitMean(ctx.rank == 0 ? 8 : 0).ok()) << "rank " << ctx.rank;
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

struct BadPlan {
  std::string what;
  std::string field;  // the message must contain it; empty: any error will do
  WorkloadPlan plan;
};

// Bad plans for two ranks owning 8 + 8 units with plan v1 applied. Each has a new version
// (unless the version is the fault), so only the named fault can reject it.
std::vector<BadPlan> BadPlans() {
  std::vector<BadPlan> bad;
  int64_t version = 10;
  auto add = [&bad, &version](std::string what, std::string field, BlockPlan bp) {
    bad.push_back({std::move(what), std::move(field), Plan(++version, {bp})});
  };
  add("negative pruned count", "pruned_units", Prune({-1, 0}));
  add("pruned count above owned", "pruned_units", Prune({0, 9}));
  add("pruned_units shorter than the group", "pruned_units", Prune({1}));
  add("pruned_units longer than the group", "pruned_units", Prune({0, 0, 1}));
  add("offload to itself", "offloads", Offloads({Off(0, 0, 1)}));
  add("helper out of range", "helper", Offloads({Off(0, 2, 1)}));
  add("negative helper", "helper", Offloads({Off(0, -1, 1)}));
  add("owner out of range", "owner", Offloads({Off(2, 0, 1)}));
  add("negative offload count", "units", Offloads({Off(1, 0, -2)}));
  add("offload count above owned", "offloads", Offloads({Off(1, 0, 9)}));
  add("pruned plus offloaded above owned", "", Prune({0, 5}, {Off(1, 0, 4)}));
  add("owner_of_unit too short", "owner_of_unit",
      Reshard(std::vector<RankId>(kUnits - 1, RankId(0))));
  add("owner_of_unit names rank 2 of 2", "owner_of_unit",
      Reshard(std::vector<RankId>(kUnits, RankId(2))));
  // Counts refer to the plan's new ownership: rank 1 keeps only 4 units.
  add("pruned count above the new ownership", "pruned_units",
      Reshard(Contiguous({12, 4}), {}, {0, 5}));
  {
    BlockPlan unknown = AllLocal();
    unknown.block = BlockId(99);
    bad.push_back({"unknown block", "block", Plan(++version, {unknown})});
  }
  { bad.push_back({"block listed twice", "", Plan(++version, {AllLocal(), AllLocal()})}); }
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
  run.script.steps[0].plan = Plan(1, {Prune({0, 1})});
  run.script.steps[1].before_step = [](RankContext& ctx, ParallelBlock&) {
    for (const BadPlan& bad : BadPlans()) {
      absl::Status status = ctx.group->OfferPlan(bad.plan);
      EXPECT_FALSE(status.ok()) << "rank " << ctx.rank << ": " << bad.what;
      EXPECT_THAT(std::string(status.message()), HasSubstr(bad.field))
          << "rank " << ctx.rank << ": " << bad.what;
    }
  };
  // Valid only because counts refer to the new ownership (rank 1 owns 8 units now, 12
  // after). The harness checks that this, and none of the rejected plans, is applied.
  run.script.steps[1].plan = Plan(2, {Reshard(Contiguous({4, 12}), {}, {0, 10})});
  RunAndExpectMatch(run);
}

}  // namespace
}  // namespace ballast
