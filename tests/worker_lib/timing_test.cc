// Timing (design brief section 4): compute is measured apart from collective waits, so a
// rank with more work shows more compute seconds while its peer shows the wait.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <mutex>

#include "absl/strings/str_cat.h"
#include "ballast/parallel_mlp.h"
#include "ballast/tp_group.h"
#include "common/status_macros.h"
#include "testing/rank_threads.h"

namespace ballast {
namespace {

using ::ballast::testing::RankContext;
using ::ballast::testing::RunRanks;

constexpr int kHidden = 64;
constexpr int kBatch = 4;
constexpr int kSeq = 64;
constexpr int kSteps = 6;

struct RankTotals {
  double compute = 0;
  double comm = 0;
  int32_t units = 0;
  double seconds_per_unit = 0;
};

// A step's input (filled with 0.1), output and input gradient for an MLP of `config`.
struct Activations {
  Buffer x, y, dx;
};
absl::StatusOr<Activations> MakeActivations(Compute& c, const MlpConfig& config) {
  const size_t n = static_cast<size_t>(kBatch) * kSeq * config.hidden;
  Activations a;
  BALLAST_ASSIGN_OR_RETURN(a.x, c.Allocate(n));
  BALLAST_ASSIGN_OR_RETURN(a.y, c.Allocate(n));
  BALLAST_ASSIGN_OR_RETURN(a.dx, c.Allocate(n));
  c.Fill(a.x.data(), 0.1f, n);
  return a;
}

// Runs `ranks` ranks of one MLP block under `plan` (null: none) for `steps` steps of
// `micro_batches` forward-backward pairs; returns each rank's timings of every step.
absl::StatusOr<std::vector<std::vector<StepTimings>>> RunPlan(int ranks, const MlpConfig& config,
                                                              const WorkloadPlan* plan, int steps,
                                                              int micro_batches = 1) {
  std::vector<std::vector<StepTimings>> seen(ranks);
  absl::Status status = RunRanks(ranks, [&](RankContext& ctx) -> absl::Status {
    BALLAST_ASSIGN_OR_RETURN(auto mlp, ParallelMlp::Create(ctx.group.get(), config));
    if (plan != nullptr) BALLAST_RETURN_IF_ERROR(ctx.group->OfferPlan(*plan));
    BALLAST_ASSIGN_OR_RETURN(Activations a, MakeActivations(ctx.backend->compute(), config));
    for (int step = 0; step < steps; ++step) {
      BALLAST_RETURN_IF_ERROR(ctx.group->BeginStep());
      for (int micro = 0; micro < micro_batches; ++micro) {
        BALLAST_RETURN_IF_ERROR(mlp->Forward(a.x.data(), kBatch, kSeq, a.y.data()));
        BALLAST_RETURN_IF_ERROR(mlp->Backward(a.y.data(), a.dx.data()));
      }
      BALLAST_RETURN_IF_ERROR(ctx.group->EndStep());
      const StepTimings& t = ctx.group->last_step_timings();
      if (t.blocks.size() != 1 || t.step != step) return absl::InternalError("timings shape");
      // Token loads are for blocks whose units divide (experts), never an MLP's.
      if (!t.blocks[0].unit_tokens.empty() || t.blocks[0].tokens_computed != 0) {
        return absl::InternalError("an MLP block reported token loads");
      }
      seen[ctx.rank].push_back(t);
    }
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  return seen;
}

// One rank's compute and communication summed over its steps but the first (which
// allocates buffers), and its last step's units and seconds per unit.
RankTotals Totals(const std::vector<StepTimings>& steps) {
  RankTotals totals;
  for (size_t step = 1; step < steps.size(); ++step) {
    const StepTimings& t = steps[step];
    totals.compute += t.compute_seconds();
    totals.comm += t.comm_seconds();
    totals.units = t.blocks[0].units_computed;
    totals.seconds_per_unit = t.blocks[0].seconds_per_unit;
  }
  return totals;
}

// A small MLP block: 16 wide, units of 8 neurons.
MlpConfig SmallMlp(int32_t units) {
  MlpConfig config;
  config.id = BlockId(0);
  config.hidden = 16;
  config.intermediate = 8 * units;
  config.unit_size = 8;
  return config;
}

// A plan for block 0 with `offloads` (and `pruned_units`).
WorkloadPlan PlanOf(std::vector<Offload> offloads, std::vector<int32_t> pruned_units = {}) {
  WorkloadPlan plan;
  plan.group = GroupId("test/tp");
  plan.version = PlanVersion(1);
  BlockPlan& bp = plan.blocks.emplace_back();
  bp.block = BlockId(0);
  bp.pruned_units = std::move(pruned_units);
  bp.offloads = std::move(offloads);
  return plan;
}

TEST(TimingTest, ComputeAndCollectiveWaitsAreSeparated) {
  MlpConfig config;
  config.id = BlockId(0);
  config.hidden = kHidden;
  config.intermediate = 1024;
  config.unit_size = 32;  // 32 units
  config.units.owner_of_unit.assign(32, RankId(1));
  for (int u = 0; u < 28; ++u) config.units.owner_of_unit[u] = RankId(0);  // 7 : 1
  absl::StatusOr<std::vector<std::vector<StepTimings>>> run = RunPlan(2, config, nullptr, kSteps);
  ASSERT_TRUE(run.ok()) << run.status();
  const std::vector<RankTotals> totals = {Totals((*run)[0]), Totals((*run)[1])};
  EXPECT_EQ(totals[0].units, 28);
  EXPECT_EQ(totals[1].units, 4);
  // 7x the work: more compute on rank 0, and rank 1 spends the difference waiting.
  EXPECT_GT(totals[0].compute, totals[1].compute);
  EXPECT_GT(totals[1].comm, totals[0].comm);
  EXPECT_GT(totals[0].seconds_per_unit, 0);
  EXPECT_GT(totals[1].seconds_per_unit, 0);
}

TEST(TimingTest, HelperCountsTheUnitsItComputesForOthers) {
  const MlpConfig config = SmallMlp(8);  // 4 units each
  const WorkloadPlan plan = PlanOf({{RankId(1), RankId(0), 2}}, {0, 1});
  absl::StatusOr<std::vector<std::vector<StepTimings>>> run = RunPlan(2, config, &plan, kSteps);
  ASSERT_TRUE(run.ok()) << run.status();
  const std::vector<RankTotals> totals = {Totals((*run)[0]), Totals((*run)[1])};
  EXPECT_EQ(totals[0].units, 4 + 2);  // its own 4 plus 2 of rank 1's
  EXPECT_EQ(totals[1].units, 4 - 1 - 2);
}

// Link samples (BlockTiming::received): once in 16 offloading steps (block 0's turn is
// steps 0, 16, 32), the helper reports the weights it received and from whom, with two
// micro-batches as with one (weights go out once a step). Other steps, and the owner,
// carry none.
TEST(TimingTest, OffloadTransfersAreSampledOnTheBlocksTurn) {
  const MlpConfig config = SmallMlp(8);  // 4 units each
  const WorkloadPlan plan = PlanOf({{RankId(1), RankId(0), 2}});
  constexpr int kSampleSteps = 33;
  absl::StatusOr<std::vector<std::vector<StepTimings>>> run =
      RunPlan(2, config, &plan, kSampleSteps, /*micro_batches=*/2);
  ASSERT_TRUE(run.ok()) << run.status();
  int samples = 0;
  for (int step = 0; step < kSampleSteps; ++step) {
    const BlockTiming& helper = (*run)[0][step].blocks[0];
    EXPECT_EQ((*run)[1][step].blocks[0].received_from, -1) << "the owner, step " << step;
    if (step % 16 != 0 || helper.units_computed != 4 + 2) {  // not its turn, or no plan yet
      EXPECT_EQ(helper.received_from, -1) << "step " << step;
      continue;
    }
    ++samples;
    EXPECT_EQ(helper.received_from, 1) << "step " << step;
    // The weights of 2 units: W1 rows and W2 columns of 8 neurons each, 16 wide, and the
    // 8 biases.
    EXPECT_EQ(helper.received_bytes, 2 * (8 * 16 + 8 + 16 * 8) * 4) << "step " << step;
    EXPECT_GT(helper.received_seconds, 0);
    EXPECT_LE(helper.received_seconds, helper.comm_seconds);
  }
  EXPECT_GE(samples, 2) << "steps 16 and 32 run the plan and are block 0's turn";
}

// A step reports its Backward calls (BlockTiming::micro_batches: each returns the offloaded
// units' gradients), also after the AdamWStep that consumes them, and a forward-only step
// none.
TEST(TimingTest, AStepCountsItsMicroBatches) {
  const MlpConfig config = SmallMlp(8);
  absl::Status status = RunRanks(2, [&](RankContext& ctx) -> absl::Status {
    BALLAST_ASSIGN_OR_RETURN(auto mlp, ParallelMlp::Create(ctx.group.get(), config));
    BALLAST_ASSIGN_OR_RETURN(Activations a, MakeActivations(ctx.backend->compute(), config));
    for (int micro_batches : {3, 1, 0}) {
      BALLAST_RETURN_IF_ERROR(ctx.group->BeginStep());
      BALLAST_RETURN_IF_ERROR(mlp->Forward(a.x.data(), kBatch, kSeq, a.y.data()));
      for (int micro = 0; micro < micro_batches; ++micro) {
        if (micro > 0) {
          BALLAST_RETURN_IF_ERROR(mlp->Forward(a.x.data(), kBatch, kSeq, a.y.data()));
        }
        BALLAST_RETURN_IF_ERROR(mlp->Backward(a.y.data(), a.dx.data()));
      }
      if (micro_batches > 0) BALLAST_RETURN_IF_ERROR(mlp->AdamWStep({}));
      BALLAST_RETURN_IF_ERROR(ctx.group->EndStep());
      const int32_t reported = ctx.group->last_step_timings().blocks.at(0).micro_batches;
      if (reported != micro_batches) {
        return absl::InternalError(absl::StrCat("rank ", ctx.rank, ": ", micro_batches,
                                                " micro-batches reported as ", reported));
      }
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

// An owner offloading to two helpers at once feeds both from one uplink: neither helper's
// transfer measures the link. No samples.
TEST(TimingTest, AnOwnerFeedingSeveralHelpersGivesNoSample) {
  const MlpConfig config = SmallMlp(12);  // 4 units each
  const WorkloadPlan plan = PlanOf({{RankId(2), RankId(0), 1}, {RankId(2), RankId(1), 1}});
  // Block 0's turns: steps 0 and 16.
  absl::StatusOr<std::vector<std::vector<StepTimings>>> run =
      RunPlan(3, config, &plan, /*steps=*/17);
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ((*run)[0][16].blocks[0].units_computed, 4 + 1) << "step 16 runs the plan";
  for (int rank = 0; rank < 3; ++rank) {
    for (const StepTimings& t : (*run)[rank]) {
      EXPECT_EQ(t.blocks[0].received_from, -1) << "rank " << rank;
    }
  }
}

}  // namespace
}  // namespace ballast
