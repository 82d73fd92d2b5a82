// What ParallelBlock offers framework adapters (python/ballast/torch) beyond the training
// step: skip_bias_add forwards, the global gradient norm and gradient scaling for clipping,
// and the output bias. Real ranks (threads, real Gloo), under a plan that offloads and
// prunes, so every unit fate is covered.
#include "ballast/block.h"

#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
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

absl::StatusOr<std::unique_ptr<ParallelMlp>> MakeMlp(RankContext& ctx) {
  MlpConfig config;
  config.id = BlockId(1);
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

// Rank 2 offloads one unit to rank 0, rank 1 prunes one of its two.
WorkloadPlan OffloadAndPrune() {
  WorkloadPlan plan;
  plan.group = GroupId("test/tp");
  plan.version = PlanVersion(1);
  BlockPlan& b = plan.blocks.emplace_back();
  b.block = BlockId(1);
  b.pruned_units = {0, 1, 0};
  b.offloads.push_back({RankId(2), RankId(0), 1});
  return plan;
}

TEST(BlockTest, SkipBiasAddLeavesOutExactlyTheOutputBias) {
  ASSERT_TRUE(RunRanks(3, [](RankContext& ctx) -> absl::Status {
                Compute& c = ctx.backend->compute();
                BALLAST_ASSIGN_OR_RETURN(auto mlp, MakeMlp(ctx));
                BALLAST_RETURN_IF_ERROR(ctx.group->OfferPlan(OffloadAndPrune()));
                const std::vector<float> x_host = RandomNormal(kN, 1, 1.0);
                BALLAST_ASSIGN_OR_RETURN(Buffer x, c.Allocate(kN));
                BALLAST_ASSIGN_OR_RETURN(Buffer with, c.Allocate(kN));
                BALLAST_ASSIGN_OR_RETURN(Buffer without, c.Allocate(kN));
                c.CopyFromHost(x_host.data(), x.data(), kN);
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
        const std::vector<float> x_host = RandomNormal(kN, 1, 1.0);
        const std::vector<float> dy_host = RandomNormal(kN, 2, 1.0);
        BALLAST_ASSIGN_OR_RETURN(Buffer x, c.Allocate(kN));
        BALLAST_ASSIGN_OR_RETURN(Buffer y, c.Allocate(kN));
        BALLAST_ASSIGN_OR_RETURN(Buffer dy, c.Allocate(kN));
        BALLAST_ASSIGN_OR_RETURN(Buffer dx, c.Allocate(kN));
        c.CopyFromHost(x_host.data(), x.data(), kN);
        c.CopyFromHost(dy_host.data(), dy.data(), kN);
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

}  // namespace
}  // namespace ballast
