// Exactness tests for ParallelAttention on real ranks (threads, real Gloo collectives).
//
// As in parallel_mlp_test.cc, every training test runs a script of steps through the
// real block and checks each step against the double-precision dense reference
// (tests/testing/dense_reference.h): output, input gradient, every parameter gradient,
// weights and AdamW moments, with each head treated by the fate its owner reported.
// The attention reference keeps samples apart (no attention across the batch), so batch
// sizes above one also check that the block does. The plan builders, cases and runs are
// shared with parallel_mlp_test.cc (tests/testing/block_plans.h, block_runs.h).
#include "ballast/parallel_attention.h"

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ballast/block.h"
#include "ballast/ownership.h"
#include "ballast/parallel_mlp.h"
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
using ::ballast::testing::AttentionRun;
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
using ::ballast::testing::MlpFactory;
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
using ::ballast::testing::WhyUnusable;
using ::testing::HasSubstr;

// Eight heads of dimension 8 over hidden 32: heads * head_dim (64) differs from hidden on
// purpose, so a stride or transpose mix-up between the two cannot go unnoticed.
constexpr int32_t kHidden = 32;
constexpr int32_t kHeads = 8;
constexpr int32_t kHeadDim = 8;
constexpr BlockId kBlock(0);
constexpr BlockPlans kPlans(kBlock);

AttentionConfig ValidConfig() {
  AttentionConfig config;
  config.id = kBlock;
  config.hidden = kHidden;
  config.num_heads = kHeads;
  config.head_dim = kHeadDim;
  return config;
}

// A block, its random dense parameters and a script of random steps without plans.
AttentionRun NewRun(int ranks, const std::vector<RankId>& owner, int steps, uint32_t seed,
                    int32_t batch = kBatch, int32_t seq = kSeq) {
  AttentionRun run{.dense = DenseBlock::Attention(kHidden, kHeads, kHeadDim)};
  run.params = RandomNormal(run.dense.dense_size(), seed, 0.2);
  run.config = ValidConfig();
  run.config.units = ReferenceUnits(owner, seed);
  run.script = ReferenceScript(run.dense, kBlock, ranks, owner, steps, seed, batch, seq);
  return run;
}

AttentionRun RunForCase(const PlanCase& c, uint32_t seed) {
  return ApplyCase(NewRun(c.ranks, c.owner, c.steps, seed), c);
}

// ---------------------------------------------------------------------------------------
// (a) No plan, or plans that change nothing: plain TP, even and uneven, several shapes.

class AttentionOwnershipTest : public ::testing::TestWithParam<OwnershipCase> {};

TEST_P(AttentionOwnershipTest, EmptyPlansMatchDense) {
  const OwnershipCase& c = GetParam();
  absl::StatusOr<std::vector<RankId>> owner = OwnershipFor(kHeads, c.ranks, c.shares);
  ASSERT_TRUE(owner.ok()) << owner.status();
  AttentionRun run = NewRun(c.ranks, *owner, 3, 100 + c.ranks, c.batch, c.seq);
  OfferEmptyPlans(run, kPlans);
  RunAndExpectMatch(run);
}

std::vector<OwnershipCase> AttentionOwnershipCases() {
  std::vector<OwnershipCase> cases = OwnershipCases();
  // Softmax over a single key is 1: context = V.
  cases.push_back({"SingleTokenSamples", 2, {}, 4, 1});
  cases.push_back({"OneLongSample", 3, {1, 2, 5}, 1, 9});
  cases.push_back({"ManySamples", 4, {}, 3, 7});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Ownership, AttentionOwnershipTest,
                         ::testing::ValuesIn(AttentionOwnershipCases()), CaseName());

TEST(AttentionPlainTpTest, ChangingSequenceLengthBetweenStepsMatchesDense) {
  // HotSPa-style: sequence length changes from step to step on the same block.
  AttentionRun run = NewRun(2, EvenOwnership(kHeads, 2), 3, 8);
  ResizeStep(run.script.steps[1], /*batch=*/1, /*seq=*/11, kHidden, 81);
  ResizeStep(run.script.steps[2], /*batch=*/3, /*seq=*/2, kHidden, 83);
  RunAndExpectMatch(run);
}

// ---------------------------------------------------------------------------------------
// (b) Exact plans: offload (migration) and reshard; (c) pruning. One script per case:
// plans offered before the given steps, versions 1, 2, ... in order.

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
       .plans = {{0, kPlans.Offloads({Off(1, 0, 2)})}, {2, kPlans.Offloads({Off(0, 1, 3)})}}},
      // Rank 1 helps rank 0 and is helped by rank 2 at once.
      {.name = "OffloadChainThreeRanks",
       .ranks = 3,
       .owner = Contiguous({3, 3, 2}),
       .plans = {{0, kPlans.Offloads({Off(0, 1, 1), Off(1, 2, 2)})},
                 {2, kPlans.Offloads({Off(0, 1, 1), Off(1, 2, 1), Off(2, 0, 2)})}}},
      // Three helpers take all of rank 0's heads; rank 1 also helps rank 3.
      {.name = "OffloadManyHelpersUneven",
       .ranks = 4,
       .owner = Contiguous({4, 1, 1, 2}),
       .plans = {{0, kPlans.Offloads({Off(0, 1, 1), Off(0, 2, 1), Off(0, 3, 2), Off(3, 1, 1)})},
                 {2, kPlans.AllLocal()}}},
      {.name = "OffloadInterleaved",
       .ranks = 3,
       .owner = Interleaved(kHeads, 3, 0),
       .plans = {{0, kPlans.Offloads({Off(0, 2, 2), Off(1, 0, 1)})}}},
      // Step 0 builds AdamW state under the initial owners; it must move with the heads.
      {.name = "ReshardTwoRanks",
       .ranks = 2,
       .owner = Contiguous({4, 4}),
       .plans = {{1, kPlans.Reshard(Contiguous({6, 2}))}}},
      // Every head changes owner.
      {.name = "ReshardSwapAll",
       .ranks = 2,
       .owner = Interleaved(kHeads, 2, 0),
       .plans = {{1, kPlans.Reshard(Interleaved(kHeads, 2, 1))}}},
      // Reshard and offload in one plan. The offload count refers to the new ownership:
      // rank 2 owns 2 heads before and 5 after, so only the latter allows offloading 4.
      {.name = "ReshardWithOffload",
       .ranks = 3,
       .owner = Contiguous({3, 3, 2}),
       .plans = {{1, kPlans.Reshard(Contiguous({1, 2, 5}), {Off(2, 0, 4)})}}},
  };
}

INSTANTIATE_TEST_SUITE_P(Plans, AttentionExactPlanTest, ::testing::ValuesIn(ExactPlanCases()),
                         CaseName());

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
       .plans = {{1, kPlans.Prune({0, 2})}, {3, kPlans.AllLocal()}}},
      {.name = "MeanTwoRanks",
       .ranks = 2,
       .owner = Contiguous({4, 4}),
       .imputation = Imputation::kMean,
       .plans = {{1, kPlans.Prune({0, 2})}, {3, kPlans.AllLocal()}}},
      {.name = "MeanThreeRanksUneven",
       .ranks = 3,
       .owner = Contiguous({1, 2, 5}),
       .imputation = Imputation::kMean,
       .steps = 5,
       .plans = {{1, kPlans.Prune({1, 0, 3})},
                 {2, kPlans.Prune({0, 1, 2})},
                 {4, kPlans.AllLocal()}}},
      // A rank that prunes all its heads computes nothing but joins every collective.
      {.name = "MeanWholeRankPruned",
       .ranks = 2,
       .owner = Contiguous({4, 4}),
       .imputation = Imputation::kMean,
       .plans = {{1, kPlans.Prune({4, 0})}, {3, kPlans.AllLocal()}}},
      // The straggler prunes one head and offloads three; the helper rank 0 also prunes.
      {.name = "MeanPruneAndOffloadSameRank",
       .ranks = 3,
       .owner = Contiguous({2, 4, 2}),
       .imputation = Imputation::kMean,
       .plans = {{1, kPlans.Prune({1, 1, 0}, {Off(1, 0, 2), Off(1, 2, 1)})},
                 {3, kPlans.AllLocal()}}},
      // Pruned heads (frozen, with fewer AdamW steps) then move: rank 1 prunes 3 of heads
      // 4..7 and hands 4..5 to rank 0, so at least one pruned head moves.
      {.name = "ZeroPruneThenReshard",
       .ranks = 2,
       .owner = Contiguous({4, 4}),
       .imputation = Imputation::kZero,
       .steps = 5,
       .plans = {{1, kPlans.Prune({0, 3})}, {3, kPlans.Reshard(Contiguous({6, 2}))}}},
  };
}

INSTANTIATE_TEST_SUITE_P(Plans, AttentionPruningTest, ::testing::ValuesIn(PruningCases()),
                         CaseName());

// The same block code on every backend, against the same dense reference: one rank (ranks
// as threads is a CPU-only layout; CUDA runs one process per GPU), plain TP and pruned
// with each imputation. The CUDA cases skip where no GPU is usable.
class AttentionBackendTest : public ::testing::TestWithParam<PlanCase> {};

TEST_P(AttentionBackendTest, OneRankMatchesDense) {
  const PlanCase& c = GetParam();
  if (std::string why = WhyUnusable(c); !why.empty()) GTEST_SKIP() << why;
  RunAndExpectMatch(RunForCase(c, 500));
}

INSTANTIATE_TEST_SUITE_P(Backends, AttentionBackendTest,
                         ::testing::ValuesIn(OneRankBackendCases(kPlans, kHeads, 3)), CaseName());

// Several ranks, one process each (see MlpProcessTest): offload, prune with an offload,
// then reshard.
class AttentionProcessTest : public ::testing::TestWithParam<PlanCase> {};

TEST_P(AttentionProcessTest, RanksAsProcessesMatchDense) {
  const PlanCase& c = GetParam();
  if (std::string why = WhyUnusable(c); !why.empty()) GTEST_SKIP() << why;
  RunAndExpectMatch(RunForCase(c, 600));
}

std::vector<PlanCase> ProcessCases() {
  return OnBackends({{"cpu", "cpu"}, {"cuda", "cuda"}},
                    {{.name = "TwoRanks",
                      .ranks = 2,
                      .owner = Contiguous({4, 4}),
                      .imputation = Imputation::kMean,
                      .steps = 4,
                      .plans = {{0, kPlans.Offloads({Off(1, 0, 2)})},
                                {1, kPlans.Prune({1, 1}, {Off(1, 0, 1)})},
                                {2, kPlans.Reshard(Contiguous({6, 2}))}},
                      .processes = true}});
}

INSTANTIATE_TEST_SUITE_P(Backends, AttentionProcessTest, ::testing::ValuesIn(ProcessCases()),
                         CaseName());

// Several ranks with host-staged collectives: "cuda-staged" runs 2 and 3 CUDA ranks on one
// GPU (threads, and processes), which NCCL cannot; "cpu-staged" runs the same staging
// logic with the CPU's compute, on any machine. Empty, offload, prune and reshard plans.
class AttentionStagedTest : public ::testing::TestWithParam<PlanCase> {};

TEST_P(AttentionStagedTest, MatchesDense) {
  const PlanCase& c = GetParam();
  if (std::string why = WhyUnusable(c); !why.empty()) GTEST_SKIP() << why;
  RunAndExpectMatch(RunForCase(c, 700));
}

std::vector<PlanCase> StagedCases() {
  return OnBackends({{"CpuStaged", "cpu-staged"}, {"CudaStaged", "cuda-staged"}},
                    {{.name = "EmptyThreeRanks",
                      .ranks = 3,
                      .owner = Contiguous({3, 3, 2}),
                      .steps = 2,
                      .plans = {{0, kPlans.AllLocal()}}},
                     {.name = "OffloadChainThreeRanks",
                      .ranks = 3,
                      .owner = Contiguous({3, 3, 2}),
                      .steps = 3,
                      .plans = {{0, kPlans.Offloads({Off(0, 1, 1), Off(1, 2, 2)})},
                                {2, kPlans.Offloads({Off(0, 1, 1), Off(1, 2, 1), Off(2, 0, 2)})}}},
                     {.name = "MeanPrunedWithOffloadTwoRanks",
                      .ranks = 2,
                      .owner = Contiguous({4, 4}),
                      .imputation = Imputation::kMean,
                      .steps = 3,
                      .plans = {{1, kPlans.Prune({1, 1}, {Off(1, 0, 1)})}, {2, kPlans.AllLocal()}}},
                     {.name = "ReshardThreeRanks",
                      .ranks = 3,
                      .owner = Contiguous({3, 3, 2}),
                      .steps = 3,
                      .plans = {{1, kPlans.Reshard(Contiguous({2, 3, 3}))}}},
                     {.name = "TwoRankProcesses",
                      .ranks = 2,
                      .owner = Contiguous({4, 4}),
                      .imputation = Imputation::kMean,
                      .steps = 3,
                      .plans = {{0, kPlans.Offloads({Off(1, 0, 2)})},
                                {1, kPlans.Prune({1, 1}, {Off(1, 0, 1)})},
                                {2, kPlans.Reshard(Contiguous({3, 5}))}},
                      .processes = true}});
}

INSTANTIATE_TEST_SUITE_P(Staged, AttentionStagedTest, ::testing::ValuesIn(StagedCases()),
                         CaseName());

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
  BlockPlan mlp_plan = kPlans.Prune({2, 1});
  mlp_plan.block = BlockId(1);
  const WorkloadPlan plan = Plan(1, {mlp_plan});
  ExpectBlockOutsideThePlanStaysExact(Checked(run), MlpFactory(mlp_config, mlp_params), plan,
                                      {2, 1});
}

// ---------------------------------------------------------------------------------------
// (d) Bad input: an error naming the problem, never a crash, and the block unharmed.

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
  add("3 groups for 8 heads", "num_query_groups",
      [](AttentionConfig& c) { c.num_query_groups = 3; });
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
  // Rank 0 owns heads 0..3, rank 1 owns 4..7.
  ExpectUnitMeanRejectsUnitsNotOwnedHere(Factory(NewRun(2, Contiguous({4, 4}), 1, 502)), kHeads);
}

TEST(AttentionPlanTest, OfferPlanRejectsBadPlansNamingTheField) {
  // Plan validation is shared with the MLP (parallel_mlp_test.cc covers every field);
  // here the counts are heads.
  AttentionRun run = NewRun(2, Contiguous({4, 4}), 3, 600);
  run.script.steps[0].plan = Plan(1, {kPlans.Prune({0, 1})});
  run.script.steps[1].before_step = [](RankContext& ctx, ParallelBlock&) {
    WorkloadPlan other_group = Plan(13, {});
    other_group.group = GroupId("other/tp");
    const std::vector<BadPlan> bad = {
        {"pruned heads above owned", "pruned_units", Plan(10, {kPlans.Prune({5, 0})})},
        {"negative pruned heads", "pruned_units", Plan(11, {kPlans.Prune({0, -1})})},
        {"helper out of range", "helper", Plan(12, {kPlans.Offloads({Off(1, 3, 1)})})},
        {"offload to itself", "offloads", Plan(14, {kPlans.Offloads({Off(1, 1, 1)})})},
        {"another group", "group", other_group},
        {"stale version", "version", Plan(1, {})},
    };
    ExpectOfferPlanRejects(ctx, bad);
  };
  // Valid only under its own ownership (rank 0 owns 4 heads now, 6 after).
  run.script.steps[1].plan = Plan(2, {kPlans.Reshard(Contiguous({6, 2}), {}, {5, 0})});
  RunAndExpectMatch(run);
}

}  // namespace
}  // namespace ballast
