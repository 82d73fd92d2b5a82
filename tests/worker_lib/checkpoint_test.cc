// Block checkpoints on real ranks (threads, real Gloo): a run that saves, restores onto a
// fresh group (with another ownership) and goes on must match a run that never stopped.
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "ballast/block.h"
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

constexpr int32_t kHidden = 16, kIntermediate = 64, kBatch = 2, kSeq = 3;
constexpr size_t kTokens = kBatch * kSeq * kHidden;
const AdamWOptions kAdamW{.lr = 1e-2f, .eps = 1e-3f};

struct Blocks {
  std::unique_ptr<ParallelAttention> attn;
  std::unique_ptr<ParallelMlp> mlp;
};

absl::StatusOr<Blocks> MakeBlocks(RankContext& ctx, std::vector<RankId> mlp_owners) {
  AttentionConfig attn;
  attn.id = BlockId(0);
  attn.hidden = kHidden;
  attn.num_heads = 4;
  attn.head_dim = 4;
  attn.units.seed = 3;
  MlpConfig mlp;
  mlp.id = BlockId(1);
  mlp.hidden = kHidden;
  mlp.intermediate = kIntermediate;
  mlp.unit_size = 8;
  mlp.units.seed = 3;
  mlp.units.owner_of_unit = std::move(mlp_owners);
  Blocks blocks;
  BALLAST_ASSIGN_OR_RETURN(blocks.attn, ParallelAttention::Create(ctx.group.get(), attn));
  BALLAST_ASSIGN_OR_RETURN(blocks.mlp, ParallelMlp::Create(ctx.group.get(), mlp));
  return blocks;
}

// One training step of attention then MLP on step `s`'s input; returns the output.
absl::StatusOr<std::vector<float>> Step(RankContext& ctx, Blocks& b, int s) {
  Compute& c = ctx.backend->compute();
  const std::vector<float> x_host = RandomNormal(kTokens, 100 + s, 1.0);
  const std::vector<float> dz_host = RandomNormal(kTokens, 200 + s, 1.0);
  BALLAST_ASSIGN_OR_RETURN(Buffer x, c.Allocate(kTokens));
  BALLAST_ASSIGN_OR_RETURN(Buffer y, c.Allocate(kTokens));
  BALLAST_ASSIGN_OR_RETURN(Buffer z, c.Allocate(kTokens));
  BALLAST_ASSIGN_OR_RETURN(Buffer dz, c.Allocate(kTokens));
  BALLAST_ASSIGN_OR_RETURN(Buffer dy, c.Allocate(kTokens));
  BALLAST_ASSIGN_OR_RETURN(Buffer dx, c.Allocate(kTokens));
  c.CopyFromHost(x_host.data(), x.data(), kTokens);
  c.CopyFromHost(dz_host.data(), dz.data(), kTokens);
  BALLAST_RETURN_IF_ERROR(ctx.group->BeginStep());
  BALLAST_RETURN_IF_ERROR(b.attn->Forward(x.data(), kBatch, kSeq, y.data()));
  BALLAST_RETURN_IF_ERROR(b.mlp->Forward(y.data(), kBatch, kSeq, z.data()));
  BALLAST_RETURN_IF_ERROR(b.mlp->Backward(dz.data(), dy.data()));
  BALLAST_RETURN_IF_ERROR(b.attn->Backward(dy.data(), dx.data()));
  BALLAST_RETURN_IF_ERROR(b.mlp->AdamWStep(kAdamW));
  BALLAST_RETURN_IF_ERROR(b.attn->AdamWStep(kAdamW));
  BALLAST_RETURN_IF_ERROR(ctx.group->EndStep());
  return ToHost(c, z.data(), kTokens);
}

// Rank 1 prunes one MLP unit and offloads another to rank 0, so unit step counts differ.
WorkloadPlan PrunePlan() {
  WorkloadPlan plan;
  plan.group = GroupId("test/tp");
  plan.version = PlanVersion(1);
  BlockPlan& mlp = plan.blocks.emplace_back();
  mlp.block = BlockId(1);
  mlp.pruned_units = {0, 1};
  mlp.offloads.push_back({RankId(1), RankId(0), 1});
  return plan;
}

TEST(CheckpointTest, RestoreOntoOtherOwnershipContinuesTheSameRun) {
  constexpr int kBefore = 3, kAfter = 3;
  // Reference: one uninterrupted run (even ownership); the pruning plan is in force for the
  // steps before the checkpoint, then withdrawn.
  std::vector<std::vector<float>> reference(kAfter);
  ASSERT_TRUE(RunRanks(2, [&](RankContext& ctx) -> absl::Status {
                BALLAST_ASSIGN_OR_RETURN(Blocks b, MakeBlocks(ctx, {}));
                BALLAST_RETURN_IF_ERROR(ctx.group->OfferPlan(PrunePlan()));
                for (int s = 0; s < kBefore; ++s) BALLAST_RETURN_IF_ERROR(Step(ctx, b, s).status());
                WorkloadPlan all_local{.group = GroupId("test/tp"), .version = PlanVersion(2)};
                BALLAST_RETURN_IF_ERROR(ctx.group->OfferPlan(all_local));
                for (int s = kBefore; s < kBefore + kAfter; ++s) {
                  BALLAST_ASSIGN_OR_RETURN(std::vector<float> z, Step(ctx, b, s));
                  if (ctx.rank == 0) reference[s - kBefore] = z;
                }
                return absl::OkStatus();
              }).ok());

  // Interrupted: save after kBefore steps, restore onto a new group with uneven ownership.
  BlockCheckpoint attn_ckpt, mlp_ckpt;
  ASSERT_TRUE(RunRanks(2, [&](RankContext& ctx) -> absl::Status {
                BALLAST_ASSIGN_OR_RETURN(Blocks b, MakeBlocks(ctx, {}));
                BALLAST_RETURN_IF_ERROR(ctx.group->OfferPlan(PrunePlan()));
                for (int s = 0; s < kBefore; ++s) BALLAST_RETURN_IF_ERROR(Step(ctx, b, s).status());
                BALLAST_ASSIGN_OR_RETURN(BlockCheckpoint a, b.attn->SaveCheckpoint());
                BALLAST_ASSIGN_OR_RETURN(BlockCheckpoint m, b.mlp->SaveCheckpoint());
                if (ctx.rank == 0) {
                  attn_ckpt = a;
                  mlp_ckpt = m;
                }
                return absl::OkStatus();
              }).ok());
  // The pruned unit took fewer steps than the others.
  EXPECT_THAT(mlp_ckpt.unit_steps, ::testing::Contains(kBefore));
  EXPECT_THAT(mlp_ckpt.unit_steps, ::testing::Contains(0));

  std::vector<RankId> uneven(kIntermediate / 8, RankId(1));
  for (int u = 0; u < 6; ++u) uneven[u] = RankId(0);
  ASSERT_TRUE(RunRanks(2, [&](RankContext& ctx) -> absl::Status {
                BALLAST_ASSIGN_OR_RETURN(Blocks b, MakeBlocks(ctx, uneven));
                BALLAST_RETURN_IF_ERROR(b.attn->RestoreCheckpoint(attn_ckpt));
                BALLAST_RETURN_IF_ERROR(b.mlp->RestoreCheckpoint(mlp_ckpt));
                for (int s = kBefore; s < kBefore + kAfter; ++s) {
                  BALLAST_ASSIGN_OR_RETURN(std::vector<float> z, Step(ctx, b, s));
                  const std::vector<float>& want = reference[s - kBefore];
                  for (size_t i = 0; i < z.size(); ++i) {
                    // Only the summation order differs (other ownership).
                    if (std::abs(z[i] - want[i]) > 1e-4f * std::max(1.0f, std::abs(want[i]))) {
                      return absl::InternalError(absl::StrCat("step ", s, " element ", i, ": got ",
                                                              z[i], ", want ", want[i]));
                    }
                  }
                }
                return absl::OkStatus();
              }).ok());
}

TEST(CheckpointTest, RejectsMismatchedCheckpointsNamingTheField) {
  absl::Status status = RunRanks(1, [&](RankContext& ctx) -> absl::Status {
    BALLAST_ASSIGN_OR_RETURN(Blocks b, MakeBlocks(ctx, {}));
    BALLAST_ASSIGN_OR_RETURN(BlockCheckpoint good, b.mlp->SaveCheckpoint());
    BlockCheckpoint bad = good;
    bad.adam_v.pop_back();
    absl::Status s = b.mlp->RestoreCheckpoint(bad);
    if (!absl::IsInvalidArgument(s) || !absl::StrContains(s.message(), "adam_v")) {
      return absl::InternalError(absl::StrCat("short adam_v: ", s.ToString()));
    }
    bad = good;
    bad.unit_steps[2] = -1;
    s = b.mlp->RestoreCheckpoint(bad);
    if (!absl::IsInvalidArgument(s) || !absl::StrContains(s.message(), "unit 2")) {
      return absl::InternalError(absl::StrCat("negative step: ", s.ToString()));
    }
    // The attention checkpoint does not fit the MLP.
    BALLAST_ASSIGN_OR_RETURN(BlockCheckpoint attn, b.attn->SaveCheckpoint());
    if (b.mlp->RestoreCheckpoint(attn).ok()) return absl::InternalError("attention into MLP");
    // Inside a step, both are refused; after it, the good checkpoint still restores.
    BALLAST_RETURN_IF_ERROR(ctx.group->BeginStep());
    if (!absl::IsFailedPrecondition(b.mlp->RestoreCheckpoint(good))) {
      return absl::InternalError("restore inside a step");
    }
    if (!absl::IsFailedPrecondition(b.mlp->SaveCheckpoint().status())) {
      return absl::InternalError("save inside a step");
    }
    BALLAST_RETURN_IF_ERROR(ctx.group->EndStep());
    return b.mlp->RestoreCheckpoint(good);
  });
  EXPECT_TRUE(status.ok()) << status;
}

}  // namespace
}  // namespace ballast
