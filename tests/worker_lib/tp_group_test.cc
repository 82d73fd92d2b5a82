// Plan agreement (design brief section 3): plans reach ranks at different steps, in
// different orders, some never; every rank must apply the identical version every step.
#include "ballast/tp_group.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <numeric>
#include <atomic>
#include <random>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "ballast/parallel_mlp.h"
#include "common/status_macros.h"
#include "testing/faulty_backend.h"
#include "testing/rank_threads.h"

namespace ballast {
namespace {

using ::ballast::testing::RankContext;
using ::ballast::testing::RunRanks;
using ::testing::HasSubstr;

constexpr int kHidden = 8;
constexpr int kBatch = 2;
constexpr int kSeq = 3;

MlpConfig SmallMlp(int id = 1) {
  MlpConfig config;
  config.id = BlockId(id);
  config.hidden = kHidden;
  config.intermediate = 32;
  config.unit_size = 4;  // 8 units
  return config;
}

// Plan `version` for a p-rank group: rank (version % p) prunes one unit and, for p > 1,
// offloads one to its neighbour, so consecutive versions differ.
WorkloadPlan PlanFor(int64_t version, int p) {
  WorkloadPlan plan;
  plan.group = GroupId("test/tp");
  plan.version = PlanVersion(version);
  BlockPlan& bp = plan.blocks.emplace_back();
  bp.block = BlockId(1);
  bp.pruned_units.assign(p, 0);
  const int r = static_cast<int>(version % p);
  bp.pruned_units[r] = 1;
  if (p > 1) bp.offloads.push_back({RankId(r), RankId((r + 1) % p), 1});
  return plan;
}

// One training step of the block (forward and backward really run the plan).
absl::Status Step(RankContext& ctx, ParallelMlp& mlp) {
  Compute& c = ctx.backend->compute();
  const size_t n = kBatch * kSeq * kHidden;
  BALLAST_ASSIGN_OR_RETURN(Buffer x, c.Allocate(n));
  BALLAST_ASSIGN_OR_RETURN(Buffer y, c.Allocate(n));
  BALLAST_ASSIGN_OR_RETURN(Buffer dx, c.Allocate(n));
  c.Fill(x.data(), 0.5f, n);
  BALLAST_RETURN_IF_ERROR(ctx.group->BeginStep());
  BALLAST_RETURN_IF_ERROR(mlp.Forward(x.data(), kBatch, kSeq, y.data()));
  BALLAST_RETURN_IF_ERROR(mlp.Backward(y.data(), dx.data()));
  BALLAST_RETURN_IF_ERROR(mlp.AdamWStep(AdamWOptions{}));
  return ctx.group->EndStep();
}

TEST(PlanAgreementTest, RanksApplyTheSameVersionEveryStep) {
  constexpr int kRanks = 4;
  constexpr int kSteps = 12;
  // delivery[rank][step] = versions offered to that rank just before that step.
  std::vector<std::map<int, std::vector<int64_t>>> delivery(kRanks);
  delivery[0] = {{0, {1, 2}}, {3, {3}}, {4, {4}}, {6, {6, 5}}};
  delivery[1] = {{1, {2, 1}}, {2, {3, 4}}, {7, {5, 6}}};
  delivery[2] = {{0, {1}}, {4, {2, 4, 3}}, {5, {5}}, {8, {6}}};
  delivery[3] = {{3, {3, 1, 2}}, {5, {6, 5}}};  // never receives version 4
  std::vector<std::vector<int64_t>> applied(kRanks);

  absl::Status status = RunRanks(kRanks, [&](RankContext& ctx) -> absl::Status {
    BALLAST_ASSIGN_OR_RETURN(auto mlp, ParallelMlp::Create(ctx.group.get(), SmallMlp()));
    for (int step = 0; step < kSteps; ++step) {
      if (auto it = delivery[ctx.rank].find(step); it != delivery[ctx.rank].end()) {
        for (int64_t v : it->second) {
          absl::Status offered = ctx.group->OfferPlan(PlanFor(v, kRanks));
          // A plan older than the applied one is refused, which is expected here.
          if (!offered.ok() && ctx.group->applied_version().value() < v) return offered;
        }
      }
      BALLAST_RETURN_IF_ERROR(Step(ctx, *mlp));
      applied[ctx.rank].push_back(ctx.group->last_step_timings().plan_version.value());
    }
    return absl::OkStatus();
  });
  ASSERT_TRUE(status.ok()) << status;
  for (int r = 1; r < kRanks; ++r) EXPECT_EQ(applied[r], applied[0]) << "rank " << r;
  EXPECT_TRUE(std::is_sorted(applied[0].begin(), applied[0].end()));
  EXPECT_THAT(applied[0], ::testing::Not(::testing::Contains(4)));  // rank 3 never had it
  EXPECT_EQ(applied[0].back(), 6);
  // Rank 3 holds nothing before step 3, and rank 2 only v1 until step 4: v1 is the newest
  // common version at step 3, v3 at step 4 (v4 is missing on rank 3).
  EXPECT_EQ(applied[0][2], 0);
  EXPECT_EQ(applied[0][3], 1);
  EXPECT_EQ(applied[0][4], 3);
}

TEST(PlanAgreementTest, ConcurrentDeliveryFromOtherThreads) {
  constexpr int kRanks = 3;
  constexpr int kSteps = 30;
  constexpr int kVersions = 25;
  std::vector<std::vector<int64_t>> applied(kRanks);
  absl::Status status = RunRanks(kRanks, [&](RankContext& ctx) -> absl::Status {
    BALLAST_ASSIGN_OR_RETURN(auto mlp, ParallelMlp::Create(ctx.group.get(), SmallMlp()));
    // Each rank's "agent" delivers every version in its own shuffled order and rhythm.
    std::thread agent([&ctx] {
      std::mt19937 rng(1234 + ctx.rank);
      std::vector<int64_t> order(kVersions);
      std::iota(order.begin(), order.end(), 1);
      std::shuffle(order.begin(), order.end(), rng);
      for (int64_t v : order) {
        (void)ctx.group->OfferPlan(PlanFor(v, kRanks));  // stale ones are refused: fine
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
      }
    });
    absl::Status loop;
    for (int step = 0; step < kSteps && loop.ok(); ++step) {
      loop = Step(ctx, *mlp);
      applied[ctx.rank].push_back(ctx.group->applied_version().value());
    }
    agent.join();
    BALLAST_RETURN_IF_ERROR(loop);
    // Every rank now holds the newest version: the next step applies it everywhere.
    BALLAST_RETURN_IF_ERROR(Step(ctx, *mlp));
    applied[ctx.rank].push_back(ctx.group->applied_version().value());
    return absl::OkStatus();
  });
  ASSERT_TRUE(status.ok()) << status;
  for (int r = 1; r < kRanks; ++r) EXPECT_EQ(applied[r], applied[0]) << "rank " << r;
  EXPECT_TRUE(std::is_sorted(applied[0].begin(), applied[0].end()));
  EXPECT_EQ(applied[0].back(), kVersions);
}

// The coordinator's versions are wall-clock microseconds: far apart, and arriving while
// the agreement's all-reduce is in flight. Rank 0 also receives a newer plan than rank 1,
// which must not make it drop the one both hold.
TEST(PlanAgreementTest, TimestampVersionsOfferedDuringAgreementAreAppliedAlike) {
  constexpr int kRanks = 2;
  constexpr int kSteps = 200;
  constexpr int64_t kBase = 1795273401243250;  // a real coordinator version
  std::vector<std::vector<int64_t>> applied(kRanks);
  absl::Status status = RunRanks(kRanks, [&](RankContext& ctx) -> absl::Status {
    BALLAST_ASSIGN_OR_RETURN(auto mlp, ParallelMlp::Create(ctx.group.get(), SmallMlp()));
    // Before any step: both ranks hold v1, rank 0 also a newer v2 that rank 1 never gets.
    const int64_t v1 = kBase, v2 = kBase + 250000;
    BALLAST_RETURN_IF_ERROR(ctx.group->OfferPlan(PlanFor(v1, kRanks)));
    if (ctx.rank == 0) BALLAST_RETURN_IF_ERROR(ctx.group->OfferPlan(PlanFor(v2, kRanks)));
    BALLAST_RETURN_IF_ERROR(Step(ctx, *mlp));
    if (ctx.group->applied_version().value() != v1) {
      return absl::InternalError(absl::StrCat("applied ", ctx.group->applied_version().value(),
                                              ", want the common version ", v1));
    }
    // Then a stream of plans, far apart in version, from the "agent" thread while steps
    // (and their agreement all-reduces) run: the same versions on every rank (they come
    // from one coordinator), each rank on its own timing.
    std::atomic<bool> done{false};
    std::thread agent([&] {
      std::mt19937 versions(99), timing(7 + ctx.rank);
      for (int64_t v = kBase + 1000000; !done.load(); v += 1000 + versions() % 400000) {
        (void)ctx.group->OfferPlan(PlanFor(v, kRanks));
        std::this_thread::sleep_for(std::chrono::microseconds(timing() % 2000));
      }
    });
    absl::Status loop;
    for (int step = 0; step < kSteps && loop.ok(); ++step) {
      loop = Step(ctx, *mlp);
      applied[ctx.rank].push_back(ctx.group->applied_version().value());
    }
    done = true;
    agent.join();
    return loop;
  });
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(applied[1], applied[0]);
  EXPECT_TRUE(std::is_sorted(applied[0].begin(), applied[0].end()));
  EXPECT_GT(applied[0].back(), kBase + 1000000) << "no streamed plan was ever agreed on";
}

TEST(PlanAgreementTest, InvalidPlanIsRejectedAndLastGoodPlanStays) {
  absl::Status status = RunRanks(2, [](RankContext& ctx) -> absl::Status {
    BALLAST_ASSIGN_OR_RETURN(auto mlp, ParallelMlp::Create(ctx.group.get(), SmallMlp()));
    BALLAST_RETURN_IF_ERROR(ctx.group->OfferPlan(PlanFor(1, 2)));
    BALLAST_RETURN_IF_ERROR(Step(ctx, *mlp));

    WorkloadPlan bad = PlanFor(2, 2);
    bad.blocks[0].offloads[0].helper = RankId(5);
    absl::Status offered = ctx.group->OfferPlan(bad);
    if (offered.code() != absl::StatusCode::kInvalidArgument ||
        !absl::StrContains(offered.message(), "offloads[0].helper 5")) {
      return absl::InternalError(absl::StrCat("bad helper not rejected: ", offered.ToString()));
    }
    WorkloadPlan other = PlanFor(3, 2);
    other.group = GroupId("someone/else");
    if (!absl::StrContains(ctx.group->OfferPlan(other).message(), "group 'someone/else'")) {
      return absl::InternalError("foreign group not rejected");
    }
    if (!absl::StrContains(ctx.group->OfferPlan(PlanFor(1, 2)).message(), "not newer")) {
      return absl::InternalError("stale version not rejected");
    }
    WorkloadPlan changed = PlanFor(4, 2);
    BALLAST_RETURN_IF_ERROR(ctx.group->OfferPlan(changed));
    changed.blocks[0].pruned_units = {0, 0};
    if (!absl::StrContains(ctx.group->OfferPlan(changed).message(), "different content")) {
      return absl::InternalError("conflicting redelivery not rejected");
    }
    BALLAST_RETURN_IF_ERROR(ctx.group->OfferPlan(PlanFor(4, 2)));  // identical: accepted
    BALLAST_RETURN_IF_ERROR(Step(ctx, *mlp));
    if (ctx.group->applied_version().value() != 4) return absl::InternalError("v4 not applied");
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

TEST(PlanAgreementTest, PlanInvalidAtApplyTimeIsSkippedByEveryRank) {
  absl::Status status = RunRanks(3, [](RankContext& ctx) -> absl::Status {
    BALLAST_ASSIGN_OR_RETURN(auto keep, ParallelMlp::Create(ctx.group.get(), SmallMlp(1)));
    BALLAST_ASSIGN_OR_RETURN(auto doomed, ParallelMlp::Create(ctx.group.get(), SmallMlp(2)));
    WorkloadPlan plan = PlanFor(1, 3);
    plan.blocks[0].block = BlockId(2);
    BALLAST_RETURN_IF_ERROR(ctx.group->OfferPlan(plan));  // valid now
    doomed.reset();  // the block goes away before the plan is applied
    BALLAST_RETURN_IF_ERROR(Step(ctx, *keep));
    if (ctx.group->applied_version().value() != 0) return absl::InternalError("applied");
    if (!absl::StrContains(ctx.group->last_rejection().message(), "block unknown")) {
      return absl::InternalError(ctx.group->last_rejection().ToString());
    }
    BALLAST_RETURN_IF_ERROR(ctx.group->OfferPlan(PlanFor(2, 3)));
    BALLAST_RETURN_IF_ERROR(Step(ctx, *keep));
    if (ctx.group->applied_version().value() != 2) return absl::InternalError("v2 not applied");
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

TEST(TpGroupTest, StepProtocolMisuseIsAnError) {
  absl::Status status = RunRanks(1, [](RankContext& ctx) -> absl::Status {
    BALLAST_ASSIGN_OR_RETURN(auto mlp, ParallelMlp::Create(ctx.group.get(), SmallMlp()));
    if (ctx.group->EndStep().code() != absl::StatusCode::kFailedPrecondition) {
      return absl::InternalError("EndStep without BeginStep accepted");
    }
    std::vector<float> x(kBatch * kSeq * kHidden), y(x.size());
    if (mlp->Forward(x.data(), kBatch, kSeq, y.data()).code() !=
        absl::StatusCode::kFailedPrecondition) {
      return absl::InternalError("Forward outside a step accepted");
    }
    BALLAST_RETURN_IF_ERROR(ctx.group->BeginStep());
    if (ctx.group->BeginStep().code() != absl::StatusCode::kFailedPrecondition) {
      return absl::InternalError("nested BeginStep accepted");
    }
    if (mlp->Backward(y.data(), x.data()).code() != absl::StatusCode::kFailedPrecondition) {
      return absl::InternalError("Backward before Forward accepted");
    }
    if (mlp->AdamWStep(AdamWOptions{}).code() != absl::StatusCode::kFailedPrecondition) {
      return absl::InternalError("AdamWStep before Backward accepted");
    }
    auto twin = ParallelMlp::Create(ctx.group.get(), SmallMlp());
    if (twin.ok()) return absl::InternalError("block created inside a step");
    BALLAST_RETURN_IF_ERROR(ctx.group->EndStep());
    auto dup = ParallelMlp::Create(ctx.group.get(), SmallMlp());
    if (dup.status().code() != absl::StatusCode::kAlreadyExists) {
      return absl::InternalError("duplicate block id accepted");
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

// A void compute call that failed during the step (on CUDA: a launch; here injected) is
// reported by EndStep with the call it names, and the group can go on.
TEST(TpGroupTest, AComputeFailureDuringTheStepFailsEndStepNamingTheCall) {
  absl::StatusOr<std::unique_ptr<Backend>> cpu =
      CreateCpuBackend({.prefix = "tp-group-test-faulty-compute"});
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  ballast::testing::FaultyBackend backend(*std::move(cpu));
  absl::StatusOr<std::unique_ptr<TpGroup>> group =
      TpGroup::Create({.group = GroupId("job/tp0")}, &backend);
  ASSERT_TRUE(group.ok()) << group.status();
  absl::StatusOr<std::unique_ptr<ParallelMlp>> mlp = ParallelMlp::Create(group->get(), SmallMlp());
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  std::vector<float> x(kBatch * kSeq * kHidden, 0.5f), y(x.size());
  ASSERT_TRUE((*group)->BeginStep().ok());
  ASSERT_TRUE((*mlp)->Forward(x.data(), kBatch, kSeq, y.data()).ok());
  backend.FailNextSynchronize(
      absl::InternalError("cublasGemmEx(...) failed: CUBLAS_STATUS_EXECUTION_FAILED"));
  const absl::Status failed = (*group)->EndStep();
  EXPECT_EQ(failed.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(failed.message(), HasSubstr("cublasGemmEx(...) failed"));
  EXPECT_THAT(failed.message(), HasSubstr("group job/tp0 step 0"));
  // The step is over: the next one starts and ends normally.
  ASSERT_TRUE((*group)->BeginStep().ok());
  EXPECT_TRUE((*group)->EndStep().ok());
}

TEST(TpGroupTest, CreateValidatesOptions) {
  EXPECT_FALSE(TpGroup::Create(TpGroupOptions{.group = GroupId("g")}, nullptr).ok());
}

}  // namespace
}  // namespace ballast
