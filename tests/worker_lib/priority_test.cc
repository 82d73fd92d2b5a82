// Priority policies (design brief section 2): which of a rank's units a plan's prune count
// takes, and how that choice moves when the priority window rolls.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <optional>
#include <random>
#include <set>

#include "ballast/parallel_mlp.h"
#include "ballast/tp_group.h"
#include "common/status_macros.h"
#include "testing/rank_threads.h"

namespace ballast {
namespace {

using ::ballast::testing::RankContext;
using ::ballast::testing::RunRanks;
using ::testing::UnorderedElementsAre;

constexpr int kHidden = 8;
constexpr int kIntermediate = 32;
constexpr int kUnitSize = 4;  // 8 units
constexpr int kBatch = 2;
constexpr int kSeq = 3;

using PrunedPerStep = std::vector<std::set<int32_t>>;

std::set<int32_t> PrunedUnits(const ParallelBlock& block) {
  std::set<int32_t> pruned;
  const std::vector<int32_t> units = block.LocalUnits();
  const std::vector<UnitFate> fates = block.LocalFates();
  for (size_t i = 0; i < units.size(); ++i) {
    if (fates[i] == UnitFate::kPruned) pruned.insert(units[i]);
  }
  return pruned;
}

// Trains one rank for `steps` steps with a plan pruning `prune` of its 8 units from step 0
// (naming `plan_priority`, the job's, when set); `before_step(step, mlp)` runs after
// BeginStep. Returns the pruned set of every step.
PrunedPerStep Train(const UnitConfig& units, int steps, int prune, const AdamWOptions& adamw,
                    const std::function<void(int, ParallelMlp&)>& before_step = nullptr,
                    const std::function<void(ParallelMlp&)>& setup = nullptr,
                    std::optional<Priority> plan_priority = std::nullopt) {
  PrunedPerStep pruned;
  absl::Status status = RunRanks(1, [&](RankContext& ctx) -> absl::Status {
    MlpConfig config{.id = BlockId(0), .hidden = kHidden, .intermediate = kIntermediate,
                     .unit_size = kUnitSize, .units = units};
    BALLAST_ASSIGN_OR_RETURN(auto mlp, ParallelMlp::Create(ctx.group.get(), config));
    if (setup) setup(*mlp);
    WorkloadPlan plan{.group = GroupId("test/tp"), .version = PlanVersion(1)};
    plan.priority = plan_priority;
    plan.blocks.push_back(BlockPlan{.block = BlockId(0), .pruned_units = {prune}});
    BALLAST_RETURN_IF_ERROR(ctx.group->OfferPlan(plan));
    Compute& c = ctx.backend->compute();
    const size_t n = kBatch * kSeq * kHidden;
    BALLAST_ASSIGN_OR_RETURN(Buffer x, c.Allocate(n));
    BALLAST_ASSIGN_OR_RETURN(Buffer y, c.Allocate(n));
    BALLAST_ASSIGN_OR_RETURN(Buffer dx, c.Allocate(n));
    std::mt19937 rng(5);
    std::normal_distribution<float> normal;
    std::vector<float> host(n);
    for (int step = 0; step < steps; ++step) {
      for (float& v : host) v = normal(rng);
      c.CopyFromHost(host.data(), x.data(), n);
      BALLAST_RETURN_IF_ERROR(ctx.group->BeginStep());
      if (before_step) before_step(step, *mlp);
      pruned.push_back(PrunedUnits(*mlp));
      BALLAST_RETURN_IF_ERROR(mlp->Forward(x.data(), kBatch, kSeq, y.data()));
      BALLAST_RETURN_IF_ERROR(mlp->Backward(y.data(), dx.data()));
      BALLAST_RETURN_IF_ERROR(mlp->AdamWStep(adamw));
      BALLAST_RETURN_IF_ERROR(ctx.group->EndStep());
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
  return pruned;
}

TEST(PriorityTest, RoundRobinPrunesEveryUnitInTurn) {
  UnitConfig units{.priority = Priority::kRoundRobin, .priority_window = 1};
  const PrunedPerStep pruned = Train(units, 4, 2, AdamWOptions{});
  ASSERT_EQ(pruned.size(), 4u);
  EXPECT_THAT(pruned[0], UnorderedElementsAre(6, 7));  // ties go to the highest ids first
  std::multiset<int32_t> all;
  for (const auto& s : pruned) all.insert(s.begin(), s.end());
  EXPECT_EQ(all, (std::multiset<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));  // each exactly once
}

TEST(PriorityTest, MagnitudePrunesTheSmallestUnits) {
  UnitConfig units{.priority = Priority::kMagnitude, .priority_window = 1};
  auto shrink_units_2_and_5 = [](ParallelMlp& mlp) {
    auto dense = mlp.GatherDense(ParamField::kValue);
    ASSERT_TRUE(dense.ok());
    MlpParams p = MlpParams::Split(*dense, kHidden, kIntermediate);
    for (int u : {2, 5}) {
      for (int j = u * kUnitSize; j < (u + 1) * kUnitSize; ++j) {
        for (int h = 0; h < kHidden; ++h) {
          p.w1[h * kIntermediate + j] *= 0.01f;
          p.w2[j * kHidden + h] *= 0.01f;
        }
      }
    }
    ASSERT_TRUE(mlp.LoadDense(p).ok());
  };
  const PrunedPerStep pruned =
      Train(units, 3, 2, AdamWOptions{.lr = 0.0f}, nullptr, shrink_units_2_and_5);
  EXPECT_THAT(pruned[0], UnorderedElementsAre(6, 7));  // no scores before the first window
  EXPECT_THAT(pruned[1], UnorderedElementsAre(2, 5));
  EXPECT_THAT(pruned[2], UnorderedElementsAre(2, 5));

  // The same block under a plan that names the job's priority, round-robin: it replaces the
  // trainer's magnitude from the first window on, and every unit takes its turn.
  Priority seen = Priority::kMagnitude;
  const PrunedPerStep job_priority = Train(
      units, 4, 2, AdamWOptions{.lr = 0.0f},
      [&](int, ParallelMlp& mlp) { seen = mlp.priority(); }, shrink_units_2_and_5,
      Priority::kRoundRobin);
  EXPECT_EQ(PriorityName(seen), "round-robin");
  std::multiset<int32_t> all;
  for (const auto& s : job_priority) all.insert(s.begin(), s.end());
  EXPECT_EQ(all, (std::multiset<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));

  // With a window of 2 the storage order holds until the roll at step 2, which ranks by
  // round-robin: units 6 and 7, pruned until then, are kept, and of the units never
  // pruned the highest ids go (ties by id), not the two smallest (2 and 5).
  UnitConfig two_step_window = units;
  two_step_window.priority_window = 2;
  const PrunedPerStep rolled = Train(two_step_window, 3, 2, AdamWOptions{.lr = 0.0f}, nullptr,
                                     shrink_units_2_and_5, Priority::kRoundRobin);
  EXPECT_THAT(rolled[0], UnorderedElementsAre(6, 7));
  EXPECT_THAT(rolled[1], UnorderedElementsAre(6, 7));
  EXPECT_THAT(rolled[2], UnorderedElementsAre(4, 5));
}

// L1 norm of each unit's parameters (W1 columns, b1 entries, W2 rows) in a dense copy.
std::vector<double> UnitL1(const std::vector<float>& a, const std::vector<float>& b) {
  const MlpParams pa = MlpParams::Split(a, kHidden, kIntermediate);
  const MlpParams pb = MlpParams::Split(b, kHidden, kIntermediate);
  std::vector<double> l1(kIntermediate / kUnitSize, 0.0);
  for (int j = 0; j < kIntermediate; ++j) {
    double& s = l1[j / kUnitSize];
    s += std::fabs(pa.b1[j] - pb.b1[j]);
    for (int h = 0; h < kHidden; ++h) {
      s += std::fabs(pa.w1[h * kIntermediate + j] - pb.w1[h * kIntermediate + j]);
      s += std::fabs(pa.w2[j * kHidden + h] - pb.w2[j * kHidden + h]);
    }
  }
  return l1;
}

TEST(PriorityTest, ChangePrunesTheLeastChangedAndRotatesPrunedUnitsBackIn) {
  UnitConfig units{.priority = Priority::kChange, .priority_window = 2};
  std::vector<float> at_start, at_roll;
  auto snapshot = [&](int step, ParallelMlp& mlp) {
    if (step != 0 && step != 2) return;
    auto dense = mlp.GatherDense(ParamField::kValue);
    ASSERT_TRUE(dense.ok());
    (step == 0 ? at_start : at_roll) = *dense;
  };
  const PrunedPerStep pruned = Train(units, 3, 2, AdamWOptions{.lr = 1e-2f}, snapshot);
  EXPECT_THAT(pruned[0], UnorderedElementsAre(6, 7));
  EXPECT_THAT(pruned[1], UnorderedElementsAre(6, 7));
  // At the roll, units 6 and 7 (pruned all window) keep their unmeasured score and come
  // back; of units 0..5 (trained 2 steps each) the two that changed least are pruned.
  const std::vector<double> change = UnitL1(at_roll, at_start);
  EXPECT_DOUBLE_EQ(change[6], 0.0);
  EXPECT_DOUBLE_EQ(change[7], 0.0);
  std::vector<int32_t> order = {0, 1, 2, 3, 4, 5};
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return change[a] < change[b]; });
  EXPECT_THAT(pruned[2], UnorderedElementsAre(order[0], order[1]));
}

TEST(PriorityTest, RandomIsSeededAndRedrawnEachWindow) {
  auto run = [](uint64_t seed) {
    return Train(UnitConfig{.priority = Priority::kRandom, .priority_window = 1, .seed = seed}, 6,
                 3, AdamWOptions{});
  };
  const PrunedPerStep a = run(11), b = run(11), c = run(12);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(std::set<std::set<int32_t>>(a.begin() + 1, a.end()).size(), 1u);
}

}  // namespace
}  // namespace ballast
