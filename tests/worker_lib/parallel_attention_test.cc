// Exactness tests for ParallelAttention on real ranks (threads, real Gloo collectives).
//
// As in parallel_mlp_test.cc, every training test runs a script of steps through the
// real block and checks each step against the double-precision dense reference
// (tests/testing/dense_reference.h): output, input gradient, every parameter gradient,
// weights and AdamW moments, with each head treated by the fate its owner reported.
// The attention reference keeps samples apart (no attention across the batch), so batch
// sizes above one also check that the block does.
#include "ballast/parallel_attention.h"

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
#include "ballast/parallel_mlp.h"
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

// Eight heads of dimension 8 over hidden 32: heads * head_dim (64) differs from hidden on
// purpose, so a stride or transpose mix-up between the two cannot go unnoticed.
constexpr int32_t kHidden = 32;
constexpr int32_t kHeads = 8;
constexpr int32_t kHeadDim = 8;
constexpr int32_t kBatch = 2;
constexpr int32_t kSeq = 5;
constexpr double kTolerance = 1e-5;
constexpr BlockId kBlock(0);
constexpr char kGroup[] = "test/tp";  // the group RunRanks creates

// Contiguous ownership with the given number of heads per rank, e.g. {6, 2}.
std::vector<RankId> Contiguous(const std::vector<int>& counts) {
  std::vector<RankId> owner;
  for (size_t r = 0; r < counts.size(); ++r) owner.insert(owner.end(), counts[r], RankId(r));
  return owner;
}

// Head h owned by rank (h + shift) % ranks.
std::vector<RankId> Interleaved(int ranks, int shift) {
  std::vector<RankId> owner;
  for (int h = 0; h < kHeads; ++h) owner.push_back(RankId((h + shift) % ranks));
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
struct AttentionRun {
  DenseBlock dense = DenseBlock::Attention(kHidden, kHeads, kHeadDim);
  std::vector<float> params;
  AttentionConfig config;
  Script script;
};

AttentionRun NewRun(int ranks, const std::vector<RankId>& owner, int steps, uint32_t seed,
                    int32_t batch = kBatch, int32_t seq = kSeq) {
  AttentionRun run;
  run.params = RandomNormal(run.dense.dense_size(), seed, 0.2);
  run.config.id = kBlock;
  run.config.hidden = kHidden;
  run.config.num_heads = kHeads;
  run.config.head_dim = kHeadDim;
  run.config.units.owner_of_unit = owner;
  run.config.units.seed = seed;
  // The reference samples running means every step.
  run.config.units.mean_interval = 1;
  run.script.ranks = ranks;
  run.script.block = kBlock;
  run.script.owner_of_unit = owner;
  run.script.batch = batch;
  run.script.seq = seq;
  // lr: large enough that three steps move weights far beyond the tolerance, so a skipped
  // or doubled update cannot pass. eps: large, because AdamW's first steps are ~lr * g / |g|
  // and would turn float rounding in a gradient that is zero in exact arithmetic (the key
  // bias of attention: softmax ignores a shift of all scores) into steps of +-lr; with
  // lr / eps = 0.1 a gradient's rounding error moves a weight by a tenth of it at most.
  run.script.adamw.lr = 1e-2f;
  run.script.adamw.eps = 1e-1f;
  run.script.mean_decay = run.config.units.mean_decay;
  run.script.steps = RandomSteps(run.dense, batch, seq, steps, seed + 1);
  return run;
}

BlockFactory Factory(const AttentionConfig& config, const AttentionParams& params) {
  return [config, params](RankContext& ctx) -> absl::StatusOr<std::unique_ptr<ParallelBlock>> {
    BALLAST_ASSIGN_OR_RETURN(std::unique_ptr<ParallelAttention> attention,
                             ParallelAttention::Create(ctx.group.get(), config));
    BALLAST_RETURN_IF_ERROR(attention->LoadDense(params));
    return std::unique_ptr<ParallelBlock>(std::move(attention));
  };
}

BlockFactory Factory(const AttentionRun& run) {
  return Factory(run.config, run.dense.ToAttentionParams(run.params));
}

// The block of `run` and its first step, for the shared checks in testing/block_checks.h.
CheckedBlock Checked(const AttentionRun& run) {
  return CheckedBlock{.factory = Factory(run),
                      .dense = &run.dense,
                      .params = run.params,
                      .step = &run.script.steps[0],
                      .adamw = run.script.adamw,
                      .batch = kBatch,
                      .seq = kSeq,
                      .hidden = kHidden};
}

void RunAndExpectMatch(const AttentionRun& run) {
  absl::StatusOr<RunRecord> record = RunScript(run.script, Factory(run));
  ASSERT_TRUE(record.ok()) << record.status();
  ExpectRunMatchesReference(run.dense, run.params, run.script, *record, kTolerance);
}

// ---------------------------------------------------------------------------------------
// (a) No plan, or plans that change nothing: plain TP, even and uneven, several shapes.

struct OwnershipCase {
  std::string name;
  int ranks = 1;
  std::vector<double> shares;  // empty: EvenOwnership
  int32_t batch = kBatch;
  int32_t seq = kSeq;
};

void PrintTo(const OwnershipCase& c, std::ostream* os) { *os << c.name; }

class AttentionOwnershipTest : public ::testing::TestWithParam<OwnershipCase> {};

TEST_P(AttentionOwnershipTest, EmptyPlansMatchDense) {
  const OwnershipCase& c = GetParam();
  std::vector<RankId> owner = EvenOwnership(kHeads, c.ranks);
  if (!c.shares.empty()) {
    absl::StatusOr<std::vector<RankId>> proportional = ProportionalOwnership(kHeads, c.shares);
    ASSERT_TRUE(proportional.ok()) << proportional.status();
    owner = *proportional;
  }
  AttentionRun run = NewRun(c.ranks, owner, 3, 100 + c.ranks, c.batch, c.seq);
  // Step 0 runs before any plan; step 1 under a plan that lists no block; step 2 under one
  // that lists the block with zero pruned heads on every rank. All three are plain TP.
  run.script.steps[1].plan = Plan(1, {});
  run.script.steps[2].plan = Plan(2, {Prune(std::vector<int32_t>(c.ranks, 0))});
  RunAndExpectMatch(run);
}

INSTANTIATE_TEST_SUITE_P(Ownership, AttentionOwnershipTest,
                         ::testing::Values(OwnershipCase{"OneRank", 1, {}},
                                           OwnershipCase{"TwoRanksEven", 2, {}},
                                           OwnershipCase{"TwoRanks3to1", 2, {3, 1}},
                                           OwnershipCase{"ThreeRanksEven", 3, {}},
                                           OwnershipCase{"ThreeRanks1to2to5", 3, {1, 2, 5}},
                                           OwnershipCase{"FourRanksEven", 4, {}},
                                           OwnershipCase{"FourRanks4to1to1to2", 4, {4, 1, 1, 2}},
                                           // Softmax over a single key is 1: context = V.
                                           OwnershipCase{"SingleTokenSamples", 2, {}, 4, 1},
                                           OwnershipCase{"OneLongSample", 3, {1, 2, 5}, 1, 9},
                                           OwnershipCase{"ManySamples", 4, {}, 3, 7}),
                         [](const ::testing::TestParamInfo<OwnershipCase>& info) {
                           return info.param.name;
                         });

TEST(AttentionPlainTpTest, ChangingSequenceLengthBetweenStepsMatchesDense) {
  // HotSPa-style: sequence length changes from step to step on the same block.
  AttentionRun run = NewRun(2, EvenOwnership(kHeads, 2), 3, 8);
  ScriptStep& longer = run.script.steps[1];
  longer.batch = 1;
  longer.seq = 11;
  longer.x = RandomNormal(1 * 11 * kHidden, 81, 1.0);
  longer.dy = RandomNormal(1 * 11 * kHidden, 82, 1.0);
  ScriptStep& shorter = run.script.steps[2];
  shorter.batch = 3;
  shorter.seq = 2;
  shorter.x = RandomNormal(3 * 2 * kHidden, 83, 1.0);
  shorter.dy = RandomNormal(3 * 2 * kHidden, 84, 1.0);
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
  std::string backend = "cpu";                   // RunRanksOptions::backend
  bool processes = false;                        // Script::processes
};

void PrintTo(const PlanCase& c, std::ostream* os) { *os << c.name; }

AttentionRun RunForCase(const PlanCase& c, uint32_t seed) {
  AttentionRun run = NewRun(c.ranks, c.owner, c.steps, seed);
  run.script.backend = c.backend;
  run.script.processes = c.processes;
  int64_t version = 0;
  for (const auto& [step, block_plan] : c.plans) {
    run.script.steps[step].plan = Plan(++version, {block_plan}, c.imputation);
  }
  return run;
}

class AttentionExactPlanTest : public ::testing::TestWithParam<PlanCase> {};

TEST_P(AttentionExactPlanTest, MatchesDenseEveryStep) {
  RunAndExpectMatch(RunForCase(GetParam(), 200));
}

std::vector<PlanCase> ExactPlanCases() {
  return {
      // One helper, then the roles reversed.
      {.name = "OffloadTwoRanks",
       .ranks = 2,
       .owner = Contiguous({4, 4}),
       .plans = {{0, Offloads({Off(1, 0, 2)})}, {2, Offloads({Off(0, 1, 3)})}}},
      // Rank 1 helps rank 0 and is helped by rank 2 at once.
      {.name = "OffloadChainThreeRanks",
       .ranks = 3,
       .owner = Contiguous({3, 3, 2}),
       .plans = {{0, Offloads({Off(0, 1, 1), Off(1, 2, 2)})},
                 {2, Offloads({Off(0, 1, 1), Off(1, 2, 1), Off(2, 0, 2)})}}},
      // Three helpers take all of rank 0's heads; rank 1 also helps rank 3.
      {.name = "OffloadManyHelpersUneven",
       .ranks = 4,
       .owner = Contiguous({4, 1, 1, 2}),
       .plans = {{0, Offloads({Off(0, 1, 1), Off(0, 2, 1), Off(0, 3, 2), Off(3, 1, 1)})},
                 {2, AllLocal()}}},
      {.name = "OffloadInterleaved",
       .ranks = 3,
       .owner = Interleaved(3, 0),
       .plans = {{0, Offloads({Off(0, 2, 2), Off(1, 0, 1)})}}},
      // Step 0 builds AdamW state under the initial owners; it must move with the heads.
      {.name = "ReshardTwoRanks",
       .ranks = 2,
       .owner = Contiguous({4, 4}),
       .plans = {{1, Reshard(Contiguous({6, 2}))}}},
      // Every head changes owner.
      {.name = "ReshardSwapAll",
       .ranks = 2,
       .owner = Interleaved(2, 0),
       .plans = {{1, Reshard(Interleaved(2, 1))}}},
      // Reshard and offload in one plan. The offload count refers to the new ownership:
      // rank 2 owns 2 heads before and 5 after, so only the latter allows offloading 4.
      {.name = "ReshardWithOffload",
       .ranks = 3,
       .owner = Contiguous({3, 3, 2}),
       .plans = {{1, Reshard(Contiguous({1, 2, 5}), {Off(2, 0, 4)})}}},
  };
}

INSTANTIATE_TEST_SUITE_P(Plans, AttentionExactPlanTest, ::testing::ValuesIn(ExactPlanCases()),
                         [](const ::testing::TestParamInfo<PlanCase>& info) {
                           return info.param.name;
                         });

class AttentionPruningTest : public ::testing::TestWithParam<PlanCase> {};

TEST_P(AttentionPruningTest, MatchesImputedReferenceAndFreezesPrunedState) {
  RunAndExpectMatch(RunForCase(GetParam(), 300));
}

std::vector<PlanCase> PruningCases() {
  // Step 0 always runs unpruned, so every head has AdamW moments to freeze and a running
  // mean context to impute; the last plan restores plain TP, where the pruned heads'
  // lagging AdamW step counts show in the bias correction.
  return {
      {.name = "ZeroTwoRanks",
       .ranks = 2,
       .owner = Contiguous({4, 4}),
       .imputation = Imputation::kZero,
       .plans = {{1, Prune({0, 2})}, {3, AllLocal()}}},
      {.name = "MeanTwoRanks",
       .ranks = 2,
       .owner = Contiguous({4, 4}),
       .imputation = Imputation::kMean,
       .plans = {{1, Prune({0, 2})}, {3, AllLocal()}}},
      {.name = "MeanThreeRanksUneven",
       .ranks = 3,
       .owner = Contiguous({1, 2, 5}),
       .imputation = Imputation::kMean,
       .steps = 5,
       .plans = {{1, Prune({1, 0, 3})}, {2, Prune({0, 1, 2})}, {4, AllLocal()}}},
      // A rank that prunes all its heads computes nothing but joins every collective.
      {.name = "MeanWholeRankPruned",
       .ranks = 2,
       .owner = Contiguous({4, 4}),
       .imputation = Imputation::kMean,
       .plans = {{1, Prune({4, 0})}, {3, AllLocal()}}},
      // The straggler prunes one head and offloads three; the helper rank 0 also prunes.
      {.name = "MeanPruneAndOffloadSameRank",
       .ranks = 3,
       .owner = Contiguous({2, 4, 2}),
       .imputation = Imputation::kMean,
       .plans = {{1, Prune({1, 1, 0}, {Off(1, 0, 2), Off(1, 2, 1)})}, {3, AllLocal()}}},
      // Pruned heads (frozen, with fewer AdamW steps) then move: rank 1 prunes 3 of heads
      // 4..7 and hands 4..5 to rank 0, so at least one pruned head moves.
      {.name = "ZeroPruneThenReshard",
       .ranks = 2,
       .owner = Contiguous({4, 4}),
       .imputation = Imputation::kZero,
       .steps = 5,
       .plans = {{1, Prune({0, 3})}, {3, Reshard(Contiguous({6, 2}))}}},
  };
}

INSTANTIATE_TEST_SUITE_P(Plans, AttentionPruningTest, ::testing::ValuesIn(PruningCases()),
                         [](const ::testing::TestParamInfo<PlanCase>& info) {
                           return info.param.name;
                         });

// The same block code on every backend, against the same dense reference: one rank (ranks
// as threads is a CPU-only layout; CUDA runs one process per GPU), plain TP and pruned
// with each imputation. The CUDA cases skip where no GPU is usable.
class AttentionBackendTest : public ::testing::TestWithParam<PlanCase> {};

TEST_P(AttentionBackendTest, OneRankMatchesDense) {
  const PlanCase& c = GetParam();
  if (!ballast::testing::BackendUsable(c.backend, c.ranks)) {
    GTEST_SKIP() << c.backend << " cannot run " << c.ranks << " rank(s) here";
  }
  RunAndExpectMatch(RunForCase(c, 500));
}

std::vector<PlanCase> BackendCases() {
  std::vector<PlanCase> cases;
  for (const std::string backend : {"cpu", "cuda"}) {
    cases.push_back({.name = backend + "_Plain", .ranks = 1, .owner = Contiguous({kHeads}),
                     .plans = {{1, AllLocal()}}, .backend = backend});
    cases.push_back({.name = backend + "_ZeroPruned", .ranks = 1, .owner = Contiguous({kHeads}),
                     .imputation = Imputation::kZero,
                     .plans = {{1, Prune({3})}, {3, AllLocal()}}, .backend = backend});
    cases.push_back({.name = backend + "_MeanPruned", .ranks = 1, .owner = Contiguous({kHeads}),
                     .imputation = Imputation::kMean,
                     .plans = {{1, Prune({3})}, {3, AllLocal()}}, .backend = backend});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Backends, AttentionBackendTest, ::testing::ValuesIn(BackendCases()),
                         [](const ::testing::TestParamInfo<PlanCase>& info) {
                           return info.param.name;
                         });

// Several ranks, one process each (see MlpProcessTest): offload, prune with an offload,
// then reshard.
class AttentionProcessTest : public ::testing::TestWithParam<PlanCase> {};

TEST_P(AttentionProcessTest, RanksAsProcessesMatchDense) {
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
                     .owner = Contiguous({4, 4}),
                     .imputation = Imputation::kMean,
                     .steps = 4,
                     .plans = {{0, Offloads({Off(1, 0, 2)})},
                               {1, Prune({1, 1}, {Off(1, 0, 1)})},
                               {2, Reshard(Contiguous({6, 2}))}},
                     .backend = backend,
                     .processes = true});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Backends, AttentionProcessTest, ::testing::ValuesIn(ProcessCases()),
                         [](const ::testing::TestParamInfo<PlanCase>& info) {
                           return info.param.name;
                         });

// Several ranks with host-staged collectives: "cuda-staged" runs 2 and 3 CUDA ranks on one
// GPU (threads, and processes), which NCCL cannot; "cpu-staged" runs the same staging
// logic with the CPU's compute, on any machine. Empty, offload, prune and reshard plans.
class AttentionStagedTest : public ::testing::TestWithParam<PlanCase> {};

TEST_P(AttentionStagedTest, MatchesDense) {
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
                     .owner = Contiguous({3, 3, 2}),
                     .steps = 2,
                     .plans = {{0, AllLocal()}},
                     .backend = backend});
    cases.push_back({.name = name + "_OffloadChainThreeRanks",
                     .ranks = 3,
                     .owner = Contiguous({3, 3, 2}),
                     .steps = 3,
                     .plans = {{0, Offloads({Off(0, 1, 1), Off(1, 2, 2)})},
                               {2, Offloads({Off(0, 1, 1), Off(1, 2, 1), Off(2, 0, 2)})}},
                     .backend = backend});
    cases.push_back({.name = name + "_MeanPrunedWithOffloadTwoRanks",
                     .ranks = 2,
                     .owner = Contiguous({4, 4}),
                     .imputation = Imputation::kMean,
                     .steps = 3,
                     .plans = {{1, Prune({1, 1}, {Off(1, 0, 1)})}, {2, AllLocal()}},
                     .backend = backend});
    cases.push_back({.name = name + "_ReshardThreeRanks",
                     .ranks = 3,
                     .owner = Contiguous({3, 3, 2}),
                     .steps = 3,
                     .plans = {{1, Reshard(Contiguous({2, 3, 3}))}},
                     .backend = backend});
    cases.push_back({.name = name + "_TwoRankProcesses",
                     .ranks = 2,
                     .owner = Contiguous({4, 4}),
                     .imputation = Imputation::kMean,
                     .steps = 3,
                     .plans = {{0, Offloads({Off(1, 0, 2)})}, {1, Prune({1, 1}, {Off(1, 0, 1)})},
                               {2, Reshard(Contiguous({3, 5}))}},
                     .backend = backend,
                     .processes = true});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Staged, AttentionStagedTest, ::testing::ValuesIn(StagedCases()),
                         [](const ::testing::TestParamInfo<PlanCase>& info) {
                           return info.param.name;
                         });

TEST(AttentionPlanTest, PlanForTheMlpLeavesAttentionExact) {
  // A transformer layer's two blocks on one group; the plan prunes only the MLP. The
  // attention block must still be plain TP.
  const AttentionRun run = NewRun(2, EvenOwnership(kHeads, 2), 1, 400);
  const DenseBlock mlp_dense = DenseBlock::Mlp(kHidden, 64, 8);
  MlpConfig mlp_config;
  mlp_config.id = BlockId(1);
  mlp_config.hidden = kHidden;
  mlp_config.intermediate = 64;
  mlp_config.unit_size = 8;
  const MlpParams mlp_params = mlp_dense.ToMlpParams(RandomNormal(mlp_dense.dense_size(), 9, 0.2));
  BlockPlan mlp_plan = Prune({2, 1});
  mlp_plan.block = BlockId(1);
  const WorkloadPlan plan = Plan(1, {mlp_plan});
  const BlockFactory mlp = [&](RankContext& ctx) -> absl::StatusOr<std::unique_ptr<ParallelBlock>> {
    BALLAST_ASSIGN_OR_RETURN(std::unique_ptr<ParallelMlp> m,
                             ParallelMlp::Create(ctx.group.get(), mlp_config));
    BALLAST_RETURN_IF_ERROR(m->LoadDense(mlp_params));
    return std::unique_ptr<ParallelBlock>(std::move(m));
  };
  ExpectBlockOutsideThePlanStaysExact(Checked(run), mlp, plan, {2, 1});
}

// ---------------------------------------------------------------------------------------
// (d) Bad input: an error naming the problem, never a crash, and the block unharmed.

AttentionConfig ValidConfig() {
  AttentionConfig config;
  config.id = kBlock;
  config.hidden = kHidden;
  config.num_heads = kHeads;
  config.head_dim = kHeadDim;
  return config;
}

TEST(AttentionCreateTest, RejectsBadConfigsNamingTheField) {
  struct BadConfig {
    std::string what;
    std::string field;
    AttentionConfig config;
  };
  std::vector<BadConfig> bad;
  auto add = [&bad](std::string what, std::string field, auto mutate) {
    AttentionConfig config = ValidConfig();
    mutate(config);
    bad.push_back({std::move(what), std::move(field), std::move(config)});
  };
  add("hidden 0", "hidden", [](AttentionConfig& c) { c.hidden = 0; });
  add("hidden -32", "hidden", [](AttentionConfig& c) { c.hidden = -32; });
  add("num_heads 0", "num_heads", [](AttentionConfig& c) { c.num_heads = 0; });
  add("num_heads -8", "num_heads", [](AttentionConfig& c) { c.num_heads = -8; });
  add("head_dim 0", "head_dim", [](AttentionConfig& c) { c.head_dim = 0; });
  add("head_dim -8", "head_dim", [](AttentionConfig& c) { c.head_dim = -8; });
  add("3 groups for 8 heads", "num_query_groups", [](AttentionConfig& c) {
    c.num_query_groups = 3;
  });
  add("-2 groups", "num_query_groups", [](AttentionConfig& c) { c.num_query_groups = -2; });
  add("RoPE on head_dim 7", "head_dim", [](AttentionConfig& c) {
    c.rotary = true;
    c.head_dim = 7;
  });
  add("RoPE base 1", "rotary_base", [](AttentionConfig& c) {
    c.rotary = true;
    c.rotary_base = 1.0f;
  });
  add("owner_of_unit too short", "owner_of_unit", [](AttentionConfig& c) {
    c.units.owner_of_unit = std::vector<RankId>(kHeads - 1, RankId(0));
  });
  add("owner_of_unit too long", "owner_of_unit", [](AttentionConfig& c) {
    c.units.owner_of_unit = std::vector<RankId>(kHeads + 1, RankId(0));
  });
  add("owner_of_unit names rank 2 of 2", "owner_of_unit", [](AttentionConfig& c) {
    c.units.owner_of_unit = EvenOwnership(kHeads, 2);
    c.units.owner_of_unit.back() = RankId(2);
  });
  add("owner_of_unit names rank -1", "owner_of_unit", [](AttentionConfig& c) {
    c.units.owner_of_unit = EvenOwnership(kHeads, 2);
    c.units.owner_of_unit.front() = RankId(-1);
  });

  absl::Status status = RunRanks(2, [&](RankContext& ctx) -> absl::Status {
    for (const BadConfig& b : bad) {
      absl::StatusOr<std::unique_ptr<ParallelAttention>> attention =
          ParallelAttention::Create(ctx.group.get(), b.config);
      EXPECT_FALSE(attention.ok()) << b.what;
      if (attention.ok()) continue;
      EXPECT_EQ(attention.status().code(), absl::StatusCode::kInvalidArgument) << b.what;
      EXPECT_THAT(std::string(attention.status().message()), HasSubstr(b.field)) << b.what;
    }
    // A rejected block must not stay registered: its id is still free.
    BALLAST_ASSIGN_OR_RETURN(std::unique_ptr<ParallelAttention> attention,
                             ParallelAttention::Create(ctx.group.get(), ValidConfig()));
    // Block ids are unique per group, across block kinds.
    MlpConfig same_id;
    same_id.id = kBlock;
    same_id.hidden = kHidden;
    same_id.intermediate = 64;
    same_id.unit_size = 8;
    EXPECT_FALSE(ParallelMlp::Create(ctx.group.get(), same_id).ok())
        << "an MLP with the attention block's id";
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

TEST(AttentionCreateTest, LoadDenseRejectsWrongSizes) {
  const DenseBlock dense = DenseBlock::Attention(kHidden, kHeads, kHeadDim);
  const AttentionParams good = dense.ToAttentionParams(RandomNormal(dense.dense_size(), 5, 0.2));
  absl::Status status = RunRanks(2, [&](RankContext& ctx) -> absl::Status {
    BALLAST_ASSIGN_OR_RETURN(std::unique_ptr<ParallelAttention> attention,
                             ParallelAttention::Create(ctx.group.get(), ValidConfig()));
    AttentionParams bad = good;
    bad.wk.pop_back();
    EXPECT_FALSE(attention->LoadDense(bad).ok()) << "wk short";
    bad = good;
    bad.bv.push_back(0);
    EXPECT_FALSE(attention->LoadDense(bad).ok()) << "bv long";
    bad = good;
    bad.wo.clear();
    EXPECT_FALSE(attention->LoadDense(bad).ok()) << "wo empty";
    bad = good;
    bad.bo.resize(kHidden / 2);
    EXPECT_FALSE(attention->LoadDense(bad).ok()) << "bo short";
    return attention->LoadDense(good);
  });
  EXPECT_TRUE(status.ok()) << status;
}

TEST(AttentionForwardTest, RejectsBadShapesAndKeepsWorking) {
  const AttentionRun run = NewRun(2, EvenOwnership(kHeads, 2), 1, 500);
  // batch * seq (and seq * seq for the scores) overflow int32.
  ExpectRejectsBadShapesAndKeepsWorking(
      Checked(run), {{1 << 20, 1 << 20}, {1, std::numeric_limits<int32_t>::max()}});
}

TEST(AttentionForwardTest, UnitMeanRejectsHeadsNotOwnedHere) {
  AttentionRun run = NewRun(2, Contiguous({4, 4}), 1, 502);
  absl::Status status = RunRanks(2, [&](RankContext& ctx) -> absl::Status {
    BALLAST_ASSIGN_OR_RETURN(std::unique_ptr<ParallelBlock> block, Factory(run)(ctx));
    EXPECT_FALSE(block->UnitMean(-1).ok());
    EXPECT_FALSE(block->UnitMean(kHeads).ok());
    // Rank 0 owns heads 0..3, rank 1 owns 4..7.
    EXPECT_FALSE(block->UnitMean(ctx.rank == 0 ? 4 : 0).ok()) << "rank " << ctx.rank;
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

TEST(AttentionPlanTest, OfferPlanRejectsBadPlansNamingTheField) {
  // Plan validation is shared with the MLP (parallel_mlp_test.cc covers every field);
  // here the counts are heads.
  AttentionRun run = NewRun(2, Contiguous({4, 4}), 3, 600);
  run.script.steps[0].plan = Plan(1, {Prune({0, 1})});
  run.script.steps[1].before_step = [](RankContext& ctx, ParallelBlock&) {
    struct BadPlan {
      std::string what;
      std::string field;
      WorkloadPlan plan;
    };
    WorkloadPlan other_group = Plan(13, {});
    other_group.group = GroupId("other/tp");
    const std::vector<BadPlan> bad = {
        {"pruned heads above owned", "pruned_units", Plan(10, {Prune({5, 0})})},
        {"negative pruned heads", "pruned_units", Plan(11, {Prune({0, -1})})},
        {"helper out of range", "helper", Plan(12, {Offloads({Off(1, 3, 1)})})},
        {"offload to itself", "offloads", Plan(14, {Offloads({Off(1, 1, 1)})})},
        {"another group", "group", other_group},
        {"stale version", "version", Plan(1, {})},
    };
    for (const BadPlan& b : bad) {
      absl::Status status = ctx.group->OfferPlan(b.plan);
      EXPECT_FALSE(status.ok()) << "rank " << ctx.rank << ": " << b.what;
      EXPECT_THAT(std::string(status.message()), HasSubstr(b.field))
          << "rank " << ctx.rank << ": " << b.what;
    }
  };
  // Valid only under its own ownership (rank 0 owns 4 heads now, 6 after).
  run.script.steps[1].plan = Plan(2, {Reshard(Contiguous({6, 2}), {}, {5, 0})});
  RunAndExpectMatch(run);
}

}  // namespace
}  // namespace ballast
