// What ParallelBlock offers framework adapters (python/ballast/torch) beyond the training
// step: skip_bias_add forwards, the global gradient norm and gradient scaling for clipping,
// the output bias, micro-batches (gradient accumulation, activation recompute), and
// torch's gradient contract (UnitConfig::keep_gradients). Real ranks (threads, real Gloo),
// under a plan that offloads and prunes, so every unit fate is covered. Exactness of the
// LLM options against PyTorch is tests/python/torch_llm_test.py.
#include "ballast/block.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "ballast/parallel_attention.h"
#include "ballast/parallel_mlp.h"
#include "ballast/plan.h"
#include "ballast/tp_group.h"
#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/block_plans.h"
#include "testing/dense_reference.h"
#include "testing/rank_threads.h"

namespace ballast {
namespace {

using ::ballast::testing::BlockPlans;
using ::ballast::testing::DenseAdamWState;
using ::ballast::testing::DenseAdamWStep;
using ::ballast::testing::DenseBlock;
using ::ballast::testing::DenseResult;
using ::ballast::testing::MaxRelError;
using ::ballast::testing::Off;
using ::ballast::testing::Plan;
using ::ballast::testing::RandomNormal;
using ::ballast::testing::RankContext;
using ::ballast::testing::RunRanks;
using ::ballast::testing::RunRanksOptions;
using ::ballast::testing::StartAdamW;
using ::ballast::testing::ToDouble;
using ::ballast::testing::ToHost;
using ::ballast::testing::UnitTreatment;
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
  std::vector<BlockPlan> plans;
  for (int32_t id : blocks) {
    plans.push_back(BlockPlans(BlockId(id)).Prune({0, 1, 0}, {Off(2, 0, 1)}));
  }
  return Plan(1, std::move(plans));
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
// On the CPU, and with host-staged collectives: the CPU's staging logic, and 3 CUDA ranks
// sharing one GPU (skipped without one).
class MicroBatchTest : public ::testing::TestWithParam<std::string> {};

TEST_P(MicroBatchTest, MicroBatchesAccumulateToTheFullBatchWithAndWithoutRecompute) {
  constexpr int32_t kFull = 4, kMicro = 2;
  constexpr size_t kFullN = kFull * kSeq * kHidden, kMicroN = kMicro * kSeq * kHidden;
  if (!ballast::testing::BackendUsable(GetParam(), 3)) {
    GTEST_SKIP() << GetParam() << " cannot run 3 ranks here";
  }
  RunRanksOptions options;
  options.backend = GetParam();
  for (bool recompute : {false, true}) {
    SCOPED_TRACE(recompute ? "recompute" : "activations kept");
    ASSERT_TRUE(
        RunRanks(
            3,
            [&](RankContext& ctx) -> absl::Status {
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
              BALLAST_ASSIGN_OR_RETURN(auto mlp, ParallelMlp::Create(ctx.group.get(), mlp_config));
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
                  BALLAST_RETURN_IF_ERROR(block->Forward(x.data() + first, kMicro, kSeq, y.data()));
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
            },
            options)
            .ok());
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, MicroBatchTest,
                         ::testing::Values("cpu", "cpu-staged", "cuda-staged"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param == "cpu"          ? std::string("Cpu")
                                  : info.param == "cpu-staged" ? std::string("CpuStaged")
                                                               : std::string("CudaStaged");
                         });

// Torch's gradient contract (UnitConfig::keep_gradients, what ballast.torch builds): two
// Backwards separated by an AdamWStep and a step boundary leave the sum of both gradients,
// and the next AdamWStep applies that sum; a unit pruned in the second step keeps its
// pending gradient and sits that update out. By default (C++ loops) the second step starts
// afresh. Rank 2 offloads a unit to rank 0 in both steps, so in the second the helper's
// returned gradients take the owner's accumulating path. Checked against the dense
// double-precision reference.
TEST(BlockTest, KeptGradientsAddUpAcrossAdamWStepsAndStepsUntilDiscarded) {
  // Rank 1 owns units 2 and 3; storage follows unit order until a priority window rolls,
  // so pruning one of its units prunes unit 3.
  constexpr int32_t kPrunedUnit = 3;
  const DenseBlock dense = DenseBlock::Mlp(kHidden, kIntermediate, 8);
  // A large eps keeps AdamW's update smooth in the gradient: float and double round-off
  // cannot flip the direction of a near-zero gradient's step.
  const AdamWOptions adamw{.lr = 1e-2f, .eps = 1e-1f};
  const std::vector<float> x = RandomNormal(2 * kN, 1, 1.0), dy = RandomNormal(2 * kN, 2, 1.0);
  const auto half = [](const std::vector<float>& v, int i) {
    return ToDouble(std::vector<float>(v.begin() + i * kN, v.begin() + (i + 1) * kN));
  };
  for (bool keep : {false, true}) {
    SCOPED_TRACE(keep ? "keep_gradients" : "default");
    ASSERT_TRUE(
        RunRanks(3, [&](RankContext& ctx) -> absl::Status {
          Compute& c = ctx.backend->compute();
          MlpConfig config;
          config.id = BlockId(1);
          config.hidden = kHidden;
          config.intermediate = kIntermediate;
          config.unit_size = 8;
          config.units.seed = 5;
          config.units.keep_gradients = keep;
          BALLAST_ASSIGN_OR_RETURN(auto mlp, ParallelMlp::Create(ctx.group.get(), config));
          WorkloadPlan plan = OffloadAndPrune();
          plan.blocks[0].pruned_units.clear();
          BALLAST_RETURN_IF_ERROR(ctx.group->OfferPlan(plan));
          BALLAST_ASSIGN_OR_RETURN(StepBuffers b, MakeStepBuffers(c, 2 * kN));
          BALLAST_ASSIGN_OR_RETURN(std::vector<float> params0,
                                   mlp->GatherDense(ParamField::kValue));

          BALLAST_RETURN_IF_ERROR(ctx.group->BeginStep());
          BALLAST_RETURN_IF_ERROR(mlp->Forward(b.x.data(), kBatch, kSeq, b.y.data()));
          BALLAST_RETURN_IF_ERROR(mlp->Backward(b.dy.data(), b.dx.data()));
          BALLAST_RETURN_IF_ERROR(mlp->AdamWStep(adamw));
          EXPECT_EQ(mlp->has_gradients(), keep);
          BALLAST_RETURN_IF_ERROR(ctx.group->EndStep());
          BALLAST_ASSIGN_OR_RETURN(std::vector<float> params1,
                                   mlp->GatherDense(ParamField::kValue));

          plan = OffloadAndPrune();
          plan.version = PlanVersion(2);
          BALLAST_RETURN_IF_ERROR(ctx.group->OfferPlan(plan));
          BALLAST_RETURN_IF_ERROR(ctx.group->BeginStep());
          EXPECT_EQ(mlp->has_gradients(), keep);
          if (ctx.rank == 1) {
            EXPECT_EQ(mlp->LocalUnits(), (std::vector<int32_t>{2, kPrunedUnit}));
            EXPECT_EQ(mlp->LocalFates().back(), UnitFate::kPruned);
          }
          BALLAST_RETURN_IF_ERROR(mlp->Forward(b.x.data() + kN, kBatch, kSeq, b.y.data() + kN));
          BALLAST_RETURN_IF_ERROR(mlp->Backward(b.dy.data() + kN, b.dx.data() + kN));
          BALLAST_ASSIGN_OR_RETURN(std::vector<float> grad, mlp->GatherDense(ParamField::kGrad));
          BALLAST_ASSIGN_OR_RETURN(const double norm, mlp->GradSquaredNorm());
          BALLAST_RETURN_IF_ERROR(mlp->AdamWStep(adamw));
          BALLAST_ASSIGN_OR_RETURN(std::vector<float> params2,
                                   mlp->GatherDense(ParamField::kValue));

          // Only DiscardGradients (zero_grad) ends a kept accumulation.
          EXPECT_EQ(mlp->has_gradients(), keep);
          mlp->DiscardGradients();
          EXPECT_FALSE(mlp->has_gradients());
          EXPECT_THAT(mlp->AdamWStep(adamw).message(),
                      HasSubstr(keep ? "AdamWStep without a Backward since "
                                       "DiscardGradients"
                                     : "AdamWStep without a Backward in this step"));
          BALLAST_RETURN_IF_ERROR(ctx.group->EndStep());

          // The reference: step 1's gradient at the initial weights, step 2's at
          // the updated ones with unit 3 pruned, and AdamW on each step's sum.
          const DenseResult first =
              dense.Run(ToDouble(params0), half(x, 0), half(dy, 0), kBatch, kSeq);
          UnitTreatment pruned;
          pruned.pruned.assign(dense.num_units(), false);
          pruned.pruned[kPrunedUnit] = true;
          const DenseResult second =
              dense.Run(ToDouble(params1), half(x, 1), half(dy, 1), kBatch, kSeq, pruned);
          std::vector<double> want = second.grad;
          if (keep) {
            for (size_t i = 0; i < want.size(); ++i) want[i] += first.grad[i];
          }
          EXPECT_LE(MaxRelError(grad, want), 1e-5) << "rank " << ctx.rank;
          const std::vector<bool> unit3 = dense.ElementsOfUnits(pruned.pruned);
          double pending = 0, want_norm = 0;
          for (size_t i = 0; i < want.size(); ++i) {
            if (unit3[i]) pending = std::max(pending, std::fabs(double{grad[i]}));
            want_norm += want[i] * want[i];
          }
          EXPECT_EQ(pending > 0, keep) << "the pruned unit's pending gradient";
          EXPECT_NEAR(norm, want_norm, 1e-5 * want_norm);
          DenseAdamWState state = StartAdamW(ToDouble(params0));
          DenseAdamWStep(adamw, first.grad, {}, &state);
          EXPECT_LE(MaxRelError(params1, state.w), 1e-5) << "rank " << ctx.rank;
          DenseAdamWStep(adamw, want, unit3, &state);
          EXPECT_LE(MaxRelError(params2, state.w), 1e-5) << "rank " << ctx.rank;
          return absl::OkStatus();
        }).ok());
  }
}

}  // namespace
}  // namespace ballast
