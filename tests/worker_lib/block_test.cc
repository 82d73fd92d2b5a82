// What ParallelBlock offers framework adapters (python/ballast/torch) beyond the training
// step: skip_bias_add forwards, the global gradient norm and gradient scaling for clipping,
// the output bias, and micro-batches (gradient accumulation, activation recompute). Real
// ranks (threads, real Gloo), under a plan that offloads and prunes, so every unit fate is
// covered. Exactness of the LLM options against PyTorch is tests/python/torch_llm_test.py.
#include "ballast/block.h"

#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "ballast/parallel_attention.h"
#include "ballast/parallel_mlp.h"
#include "ballast/plan.h"
#include "ballast/tp_group.h"
#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/dense_reference.h"
#include "testing/rank_threads.h"

namespace ballast {
namespace {

using ::ballast::testing::RandomNormal;
using ::ballast::testing::RankContext;
using ::ballast::testing::RunRanks;
using ::ballast::testing::ToHost;
using ::testing::HasSubstr;

constexpr int32_t kHidden = 8, kIntermediate = 48, kBatch = 2, kSeq = 3;
constexpr size_t kN = kBatch * kSeq * kHidden;

absl::StatusOr<std::unique_ptr<ParallelMlp>> MakeMlp(RankContext& ctx, int32_t id = 1) {
  MlpConfig config;
  config.id = BlockId(id);
  config.hidden = kHidden;
  config.intermediate = kIntermediate;
  config.unit_size = 8;
  config.units.seed = 5;
  BALLAST_ASSIGN_OR_RETURN(auto mlp, ParallelMlp::Create(ctx.group.get(), config));
  // A non-zero bias, so leaving it out shows.
  MlpParams params =
      MlpParams::Split(RandomNormal(mlp->dense_size(), 9, 0.3), kHidden, kIntermediate);
  BALLAST_RETURN_IF_ERROR(mlp->LoadDense(params));
  return mlp;
}

// Activations of one step in backend memory: x and dy random (seeds 1 and 2), y and dx
// zero, each `n` floats.
struct StepBuffers {
  Buffer x, y, dy, dx;
};
absl::StatusOr<StepBuffers> MakeStepBuffers(Compute& c, size_t n) {
  StepBuffers b;
  for (Buffer* buffer : {&b.x, &b.y, &b.dy, &b.dx}) {
    BALLAST_ASSIGN_OR_RETURN(*buffer, c.Allocate(n));
  }
  const std::vector<float> x = RandomNormal(n, 1, 1.0), dy = RandomNormal(n, 2, 1.0);
  c.CopyFromHost(x.data(), b.x.data(), n);
  c.CopyFromHost(dy.data(), b.dy.data(), n);
  return b;
}

// Rank 2 offloads one unit to rank 0, rank 1 prunes one of its two (of each block).
WorkloadPlan OffloadAndPrune(std::vector<int32_t> blocks = {1}) {
  WorkloadPlan plan;
  plan.group = GroupId("test/tp");
  plan.version = PlanVersion(1);
  for (int32_t id : blocks) {
    BlockPlan& b = plan.blocks.emplace_back();
    b.block = BlockId(id);
    b.pruned_units = {0, 1, 0};
    b.offloads.push_back({RankId(2), RankId(0), 1});
  }
  return plan;
}

TEST(BlockTest, SkipBiasAddLeavesOutExactlyTheOutputBias) {
  ASSERT_TRUE(RunRanks(3, [](RankContext& ctx) -> absl::Status {
                Compute& c = ctx.backend->compute();
                BALLAST_ASSIGN_OR_RETURN(auto mlp, MakeMlp(ctx));
                BALLAST_RETURN_IF_ERROR(ctx.group->OfferPlan(OffloadAndPrune()));
                // y: with the bias; dx (unused as a gradient here): without it.
                BALLAST_ASSIGN_OR_RETURN(StepBuffers b, MakeStepBuffers(c, kN));
                Buffer &x = b.x, &with = b.y, &without = b.dx;
                BALLAST_RETURN_IF_ERROR(ctx.group->BeginStep());
                BALLAST_RETURN_IF_ERROR(mlp->Forward(x.data(), kBatch, kSeq, with.data()));
                BALLAST_RETURN_IF_ERROR(mlp->Forward(x.data(), kBatch, kSeq, without.data(),
                                                     /*add_output_bias=*/false));
                const std::vector<float> y = ToHost(c, with.data(), kN);
                const std::vector<float> z = ToHost(c, without.data(), kN);
                const std::vector<float> bias = mlp->OutputBias();
                for (size_t i = 0; i < kN; ++i) {
                  EXPECT_NEAR(y[i], z[i] + bias[i % kHidden], 1e-6) << i;
                  EXPECT_NE(y[i], z[i]) << i;
                }
                return ctx.group->EndStep();
              }).ok());
}

TEST(BlockTest, GradientNormCoversEveryUnitOnceAndScalingScalesIt) {
  ASSERT_TRUE(
      RunRanks(3, [](RankContext& ctx) -> absl::Status {
        Compute& c = ctx.backend->compute();
        BALLAST_ASSIGN_OR_RETURN(auto mlp, MakeMlp(ctx));
        BALLAST_RETURN_IF_ERROR(ctx.group->OfferPlan(OffloadAndPrune()));
        BALLAST_ASSIGN_OR_RETURN(StepBuffers b, MakeStepBuffers(c, kN));
        Buffer &x = b.x, &y = b.y, &dy = b.dy, &dx = b.dx;
        BALLAST_RETURN_IF_ERROR(ctx.group->BeginStep());
        EXPECT_FALSE(mlp->has_gradients());
        absl::StatusOr<double> early = mlp->GradSquaredNorm();
        EXPECT_THAT(early.status().message(), HasSubstr("without a Backward"));
        BALLAST_RETURN_IF_ERROR(mlp->Forward(x.data(), kBatch, kSeq, y.data()));
        BALLAST_RETURN_IF_ERROR(mlp->Backward(dy.data(), dx.data()));
        EXPECT_TRUE(mlp->has_gradients());

        // The dense gradient (every unit once, the bias once) is the reference.
        BALLAST_ASSIGN_OR_RETURN(std::vector<float> dense, mlp->GatherDense(ParamField::kGrad));
        double want = 0;
        for (float g : dense) want += static_cast<double>(g) * g;
        BALLAST_ASSIGN_OR_RETURN(double got, mlp->GradSquaredNorm());
        EXPECT_GT(want, 0);
        EXPECT_NEAR(got, want, 1e-5 * want);

        BALLAST_RETURN_IF_ERROR(mlp->ScaleGradients(0.5f));
        BALLAST_ASSIGN_OR_RETURN(std::vector<float> scaled, mlp->GatherDense(ParamField::kGrad));
        for (size_t i = 0; i < dense.size(); ++i) EXPECT_FLOAT_EQ(scaled[i], 0.5f * dense[i]);
        BALLAST_ASSIGN_OR_RETURN(double quarter, mlp->GradSquaredNorm());
        EXPECT_NEAR(quarter, 0.25 * want, 1e-5 * want);

        EXPECT_THAT(mlp->ScaleGradients(std::nanf("")).message(), HasSubstr("not finite"));
        BALLAST_RETURN_IF_ERROR(mlp->AdamWStep({}));
        EXPECT_FALSE(mlp->has_gradients());
        return ctx.group->EndStep();
      }).ok());
}

// Clipping over many blocks: one all-reduce gives the sum of what each block's own norm
// gives. A block without gradients is named, on every rank, before any collective (no
// rank is left waiting in it).
TEST(BlockTest, OneCollectiveNormsSeveralBlocksAsEachAlone) {
  ASSERT_TRUE(
      RunRanks(3, [](RankContext& ctx) -> absl::Status {
        Compute& c = ctx.backend->compute();
        BALLAST_ASSIGN_OR_RETURN(auto offloading, MakeMlp(ctx, 1));  // the plan's block
        BALLAST_ASSIGN_OR_RETURN(auto local, MakeMlp(ctx, 2));
        BALLAST_RETURN_IF_ERROR(ctx.group->OfferPlan(OffloadAndPrune()));
        BALLAST_ASSIGN_OR_RETURN(StepBuffers b, MakeStepBuffers(c, kN));
        BALLAST_RETURN_IF_ERROR(ctx.group->BeginStep());
        std::vector<ParallelBlock*> blocks = {offloading.get(), local.get()};
        BALLAST_RETURN_IF_ERROR(offloading->Forward(b.x.data(), kBatch, kSeq, b.y.data()));
        BALLAST_RETURN_IF_ERROR(offloading->Backward(b.dy.data(), b.dx.data()));
        absl::StatusOr<double> early = GroupGradSquaredNorm(blocks);
        EXPECT_EQ(early.status().code(), absl::StatusCode::kFailedPrecondition);
        EXPECT_THAT(early.status().message(), HasSubstr("block 2: GradSquaredNorm without"));

        BALLAST_RETURN_IF_ERROR(local->Forward(b.x.data(), kBatch, kSeq, b.y.data()));
        BALLAST_RETURN_IF_ERROR(local->Backward(b.dy.data(), b.dx.data()));
        BALLAST_ASSIGN_OR_RETURN(const double first, offloading->GradSquaredNorm());
        BALLAST_ASSIGN_OR_RETURN(const double second, local->GradSquaredNorm());
        BALLAST_ASSIGN_OR_RETURN(const double both, GroupGradSquaredNorm(blocks));
        EXPECT_GT(first, 0);
        EXPECT_GT(second, 0);
        EXPECT_NEAR(both, first + second, 1e-5 * (first + second));
        BALLAST_ASSIGN_OR_RETURN(const double none, GroupGradSquaredNorm({}));
        EXPECT_EQ(none, 0);
        blocks.push_back(nullptr);
        EXPECT_THAT(GroupGradSquaredNorm(blocks).status().message(), HasSubstr("a null block"));

        BALLAST_RETURN_IF_ERROR(offloading->AdamWStep({}));
        BALLAST_RETURN_IF_ERROR(local->AdamWStep({}));
        return ctx.group->EndStep();
      }).ok());
}

// Two micro-batches of 2 sequences accumulate exactly the gradients of one batch of 4,
// for a SwiGLU MLP and a causal GQA attention with RoPE, with and without recompute; and
// recompute holds no activations between Forward and Backward.
TEST(BlockTest, MicroBatchesAccumulateToTheFullBatchWithAndWithoutRecompute) {
  constexpr int32_t kFull = 4, kMicro = 2;
  constexpr size_t kFullN = kFull * kSeq * kHidden, kMicroN = kMicro * kSeq * kHidden;
  for (bool recompute : {false, true}) {
    SCOPED_TRACE(recompute ? "recompute" : "activations kept");
    ASSERT_TRUE(RunRanks(3, [&](RankContext& ctx) -> absl::Status {
                  Compute& c = ctx.backend->compute();
                  MlpConfig mlp_config;
                  mlp_config.id = BlockId(1);
                  mlp_config.activation = MlpActivation::kSwiGlu;
                  mlp_config.hidden = kHidden;
                  mlp_config.intermediate = kIntermediate;
                  mlp_config.unit_size = 8;
                  mlp_config.units.recompute = recompute;
                  AttentionConfig attn_config;
                  attn_config.id = BlockId(2);
                  attn_config.hidden = kHidden;
                  attn_config.num_heads = 8;
                  attn_config.head_dim = 4;
                  attn_config.num_query_groups = 4;
                  attn_config.causal = attn_config.rotary = true;
                  attn_config.units.recompute = recompute;
                  BALLAST_ASSIGN_OR_RETURN(auto mlp,
                                           ParallelMlp::Create(ctx.group.get(), mlp_config));
                  BALLAST_ASSIGN_OR_RETURN(auto attn,
                                           ParallelAttention::Create(ctx.group.get(), attn_config));
                  BALLAST_RETURN_IF_ERROR(ctx.group->OfferPlan(OffloadAndPrune({1, 2})));
                  BALLAST_ASSIGN_OR_RETURN(StepBuffers b, MakeStepBuffers(c, kFullN));
                  Buffer &x = b.x, &y = b.y, &dy = b.dy, &dx = b.dx;
                  BALLAST_RETURN_IF_ERROR(ctx.group->BeginStep());
                  for (ParallelBlock* block : {static_cast<ParallelBlock*>(mlp.get()),
                                               static_cast<ParallelBlock*>(attn.get())}) {
                    SCOPED_TRACE(block->id().value());
                    BALLAST_RETURN_IF_ERROR(block->Forward(x.data(), kFull, kSeq, y.data()));
                    // Rank 0 computes (its own units and rank 2's); under this plan the
                    // attention's ranks 1 and 2 compute nothing, so hold nothing anyway.
                    if (recompute || ctx.group->rank().value() == 0) {
                      EXPECT_EQ(block->activation_bytes() == 0, recompute);
                    }
                    BALLAST_RETURN_IF_ERROR(block->Backward(dy.data(), dx.data()));
                    const std::vector<float> full_dx = ToHost(c, dx.data(), kFullN);
                    BALLAST_ASSIGN_OR_RETURN(std::vector<float> full,
                                             block->GatherDense(ParamField::kGrad));
                    block->DiscardGradients();
                    std::vector<float> micro_dx;
                    for (size_t first : {size_t{0}, kMicroN}) {
                      BALLAST_RETURN_IF_ERROR(block->Forward(x.data() + first, kMicro, kSeq,
                                                             y.data()));
                      BALLAST_RETURN_IF_ERROR(block->Backward(dy.data() + first, dx.data()));
                      const std::vector<float> part = ToHost(c, dx.data(), kMicroN);
                      micro_dx.insert(micro_dx.end(), part.begin(), part.end());
                    }
                    EXPECT_THAT(block->Backward(dy.data(), dx.data()).message(),
                                HasSubstr("already had its Backward"));
                    BALLAST_ASSIGN_OR_RETURN(std::vector<float> accumulated,
                                             block->GatherDense(ParamField::kGrad));
                    double largest = 0;
                    for (float g : full) largest = std::max(largest, std::fabs(double{g}));
                    EXPECT_GT(largest, 0);
                    for (size_t i = 0; i < full.size(); ++i) {
                      EXPECT_NEAR(accumulated[i], full[i], 1e-5 * largest) << i;
                    }
                    for (size_t i = 0; i < kFullN; ++i) {
                      EXPECT_NEAR(micro_dx[i], full_dx[i], 1e-5) << i;
                    }
                    BALLAST_RETURN_IF_ERROR(block->AdamWStep({}));
                  }
                  return ctx.group->EndStep();
                }).ok());
  }
}

}  // namespace
}  // namespace ballast
