#include "testing/block_checks.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/status_macros.h"
#include "testing/rank_threads.h"

namespace ballast::testing {
namespace {

constexpr double kTolerance = 1e-5;

// After Forward and Backward of `block` (into b.y and b.dx), y, dx and every gradient
// match the dense reference.
absl::Status ExpectMatchesDense(RankContext& ctx, ParallelBlock& block, const CheckedBlock& c,
                                StepBuffers& b) {
  const DenseResult want =
      c.dense->Run(ToDouble(c.params), ToDouble(c.step->x), ToDouble(c.step->dy), c.batch, c.seq);
  const size_t n = static_cast<size_t>(c.batch) * c.seq * c.hidden;
  Compute& compute = ctx.backend->compute();
  const std::vector<float> got_y = ToHost(compute, b.y.data(), n);
  const std::vector<float> got_dx = ToHost(compute, b.dx.data(), n);
  BALLAST_RETURN_IF_ERROR(compute.Synchronize());
  BALLAST_ASSIGN_OR_RETURN(std::vector<float> grad, block.GatherDense(ParamField::kGrad));
  EXPECT_LE(MaxRelError(got_y, want.y), kTolerance) << "rank " << ctx.rank;
  EXPECT_LE(MaxRelError(got_dx, want.dx), kTolerance) << "rank " << ctx.rank;
  EXPECT_LE(MaxRelError(grad, want.grad), kTolerance) << "rank " << ctx.rank;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<StepBuffers> MakeStepBuffers(Compute& compute, const CheckedBlock& c) {
  const size_t n = static_cast<size_t>(c.batch) * c.seq * c.hidden;
  StepBuffers b;
  for (Buffer* buffer : {&b.x, &b.y, &b.z, &b.dy, &b.dz, &b.dx}) {
    BALLAST_ASSIGN_OR_RETURN(*buffer, compute.Allocate(n));
  }
  compute.CopyFromHost(c.step->x.data(), b.x.data(), n);
  compute.CopyFromHost(c.step->dy.data(), b.dy.data(), n);
  return b;
}

void ExpectRejectsBadShapesAndKeepsWorking(
    const CheckedBlock& c, const std::vector<std::pair<int32_t, int32_t>>& overflowing) {
  const std::vector<std::pair<int32_t, int32_t>> non_positive = {
      {0, c.seq}, {-1, c.seq}, {c.batch, 0}, {c.batch, -5}, {0, 0}};
  absl::Status status = RunRanks(2, [&](RankContext& ctx) -> absl::Status {
    BALLAST_ASSIGN_OR_RETURN(std::unique_ptr<ParallelBlock> block, c.factory(ctx));
    BALLAST_ASSIGN_OR_RETURN(StepBuffers b, MakeStepBuffers(ctx.backend->compute(), c));
    BALLAST_RETURN_IF_ERROR(ctx.group->BeginStep());

    EXPECT_FALSE(block->Backward(b.dy.data(), b.dx.data()).ok()) << "Backward before Forward";
    for (auto [batch, seq] : non_positive) {
      absl::Status bad = block->Forward(b.x.data(), batch, seq, b.y.data());
      EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument)
          << "batch " << batch << " seq " << seq << ": " << bad;
    }
    // Sizes that overflow int32 (and any buffer) must be refused, not wrapped around.
    for (auto [batch, seq] : overflowing) {
      EXPECT_FALSE(block->Forward(b.x.data(), batch, seq, b.y.data()).ok())
          << "batch " << batch << " seq " << seq;
    }
    EXPECT_FALSE(block->Forward(nullptr, c.batch, c.seq, b.y.data()).ok()) << "null x";
    EXPECT_FALSE(block->Forward(b.x.data(), c.batch, c.seq, nullptr).ok()) << "null y";
    // A rejected Forward is no Forward: there is still nothing to differentiate.
    EXPECT_FALSE(block->Backward(b.dy.data(), b.dx.data()).ok()) << "Backward after bad Forward";

    // The block is unharmed: a good step matches the dense reference.
    BALLAST_RETURN_IF_ERROR(block->Forward(b.x.data(), c.batch, c.seq, b.y.data()));
    EXPECT_FALSE(block->Backward(nullptr, b.dx.data()).ok()) << "null dy";
    EXPECT_FALSE(block->Backward(b.dy.data(), nullptr).ok()) << "null dx";
    BALLAST_RETURN_IF_ERROR(block->Backward(b.dy.data(), b.dx.data()));
    BALLAST_RETURN_IF_ERROR(ExpectMatchesDense(ctx, *block, c, b));
    BALLAST_RETURN_IF_ERROR(block->AdamWStep(c.adamw));
    return ctx.group->EndStep();
  });
  EXPECT_TRUE(status.ok()) << status;
}

void ExpectBlockOutsideThePlanStaysExact(const CheckedBlock& c, const BlockFactory& other,
                                         const WorkloadPlan& plan,
                                         const std::vector<int>& pruned_per_rank) {
  absl::Status status = RunRanks(2, [&](RankContext& ctx) -> absl::Status {
    BALLAST_ASSIGN_OR_RETURN(std::unique_ptr<ParallelBlock> checked, c.factory(ctx));
    BALLAST_ASSIGN_OR_RETURN(std::unique_ptr<ParallelBlock> planned, other(ctx));
    BALLAST_RETURN_IF_ERROR(ctx.group->OfferPlan(plan));
    BALLAST_RETURN_IF_ERROR(ctx.group->BeginStep());
    EXPECT_EQ(ctx.group->applied_version(), plan.version);
    for (UnitFate fate : checked->LocalFates()) EXPECT_EQ(fate, UnitFate::kLocal);
    int pruned = 0;
    for (UnitFate fate : planned->LocalFates()) pruned += fate == UnitFate::kPruned;
    EXPECT_EQ(pruned, pruned_per_rank[ctx.rank]) << "rank " << ctx.rank;

    BALLAST_ASSIGN_OR_RETURN(StepBuffers b, MakeStepBuffers(ctx.backend->compute(), c));
    // As in a layer: checked then planned forward, planned then checked backward.
    BALLAST_RETURN_IF_ERROR(checked->Forward(b.x.data(), c.batch, c.seq, b.y.data()));
    BALLAST_RETURN_IF_ERROR(planned->Forward(b.y.data(), c.batch, c.seq, b.z.data()));
    BALLAST_RETURN_IF_ERROR(planned->Backward(b.dy.data(), b.dz.data()));
    BALLAST_RETURN_IF_ERROR(checked->Backward(b.dy.data(), b.dx.data()));
    BALLAST_RETURN_IF_ERROR(ExpectMatchesDense(ctx, *checked, c, b));
    BALLAST_RETURN_IF_ERROR(planned->AdamWStep(c.adamw));
    BALLAST_RETURN_IF_ERROR(checked->AdamWStep(c.adamw));
    return ctx.group->EndStep();
  });
  EXPECT_TRUE(status.ok()) << status;
}

void ExpectUnitMeanRejectsUnitsNotOwnedHere(const BlockFactory& factory, int units) {
  absl::Status status = RunRanks(2, [&](RankContext& ctx) -> absl::Status {
    BALLAST_ASSIGN_OR_RETURN(std::unique_ptr<ParallelBlock> block, factory(ctx));
    EXPECT_FALSE(block->UnitMean(-1).ok());
    EXPECT_FALSE(block->UnitMean(units).ok());
    // Rank 0 owns the first half of the units, rank 1 the second.
    EXPECT_FALSE(block->UnitMean(ctx.rank == 0 ? units / 2 : 0).ok()) << "rank " << ctx.rank;
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

void ExpectOfferPlanRejects(RankContext& ctx, const std::vector<BadPlan>& bad) {
  for (const BadPlan& b : bad) {
    absl::Status status = ctx.group->OfferPlan(b.plan);
    EXPECT_FALSE(status.ok()) << "rank " << ctx.rank << ": " << b.what;
    EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr(b.field))
        << "rank " << ctx.rank << ": " << b.what;
  }
}

}  // namespace ballast::testing
