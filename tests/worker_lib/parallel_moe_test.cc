// ParallelMoe on real ranks (threads, Gloo over loopback) against the dense double
// reference (testing/moe_reference.h): every micro-batch's output and input gradient,
// every step's gathered gradients, and the weights after AdamW, under empty, offload (a
// whole expert on a helper), reshard, prune and split plans (an expert's tokens shared
// with replicas: BlockPlan::replicas) and capacity plans (BlockPlan::capacity_factor, alone
// and with a split and an offload), with top-1 and top-2 routing; and every step's token
// loads in the block's timing (BlockTiming::unit_tokens, tokens_computed).
#include "ballast/parallel_moe.h"

#include <cmath>
#include <cstdint>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ballast/tp_group.h"
#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "testing/dense_reference.h"
#include "testing/moe_reference.h"
#include "testing/rank_threads.h"

namespace ballast {
namespace {

using ::ballast::testing::DenseMoe;
using ::ballast::testing::DenseMoeAdamW;
using ::ballast::testing::MaxRelError;
using ::ballast::testing::RandomNormal;
using ::ballast::testing::RankContext;
using ::ballast::testing::RunRanks;
using ::ballast::testing::ToDouble;

constexpr BlockId kBlock(7);
constexpr double kTolerance = 2e-4;

enum class PlanKind { kNone, kReplica, kReshard, kPrune, kSplit, kSplitReshard, kSplitOffload };

struct MoeCase {
  std::string name;
  int ranks = 2;
  int top_k = 2;
  bool pre_softmax = false;
  float aux_loss_coeff = 0.01f;
  PlanKind plan = PlanKind::kNone;
  int micro_batches = 1;
  bool recompute = false;
  double capacity = 0;  // the plan's capacity_factor (a plan even with PlanKind::kNone)
};

void PrintTo(const MoeCase& c, std::ostream* os) { *os << c.name; }

MoeConfig ConfigFor(const MoeCase& c) {
  MoeConfig config;
  config.id = kBlock;
  config.hidden = 8;
  config.ffn = 12;
  config.num_experts = 6;
  config.top_k = c.top_k;
  config.pre_softmax = c.pre_softmax;
  config.aux_loss_coeff = c.aux_loss_coeff;
  config.units.recompute = c.recompute;
  config.units.priority = Priority::kRandom;
  config.units.seed = 5;
  return config;
}

// The plan offered before step 1 (nullopt: none).
std::optional<WorkloadPlan> PlanFor(const MoeCase& c) {
  WorkloadPlan plan;
  plan.group = GroupId("test/tp");
  plan.version = PlanVersion(1);
  BlockPlan& b = plan.blocks.emplace_back();
  b.block = kBlock;
  b.capacity_factor = c.capacity;
  const int last = c.ranks - 1;
  switch (c.plan) {
    case PlanKind::kNone:
      if (c.capacity == 0) return std::nullopt;
      break;
    case PlanKind::kReplica:  // the last rank's experts computed by rank 0 (a chain on 3)
      b.offloads.push_back({RankId(last), RankId(0), 2});
      if (c.ranks == 3) b.offloads.push_back({RankId(1), RankId(2), 1});
      break;
    case PlanKind::kReshard: {  // expert 0 moves to the last rank, which then offloads one
      b.owner_of_unit = EvenOwnership(6, c.ranks);
      b.owner_of_unit[0] = RankId(last);
      b.offloads.push_back({RankId(last), RankId(0), 1});
      break;
    }
    case PlanKind::kPrune:  // rank 0 drops one expert's tokens; the last offloads one
      b.pruned_units.assign(c.ranks, 0);
      b.pruned_units[0] = 1;
      b.offloads.push_back({RankId(last), RankId(0), 1});
      break;
    case PlanKind::kSplit:  // expert 0's tokens split three ways (or two); expert 5's all
                            // computed by rank 0, its owner computing none
      b.replicas.push_back({0, RankId(1), 0.3});
      if (c.ranks == 3) b.replicas.push_back({0, RankId(2), 0.3});
      b.replicas.push_back({5, RankId(0), 1.0});
      break;
    case PlanKind::kSplitReshard:  // expert 1 moves to the last rank and is split back
      b.owner_of_unit = EvenOwnership(6, c.ranks);
      b.owner_of_unit[1] = RankId(last);
      b.replicas.push_back({1, RankId(0), 0.45});
      b.replicas.push_back({3, RankId(0), 0.5});
      break;
    case PlanKind::kSplitOffload:  // expert 0 (rank 0's) split with the others, and one of
                                   // the last rank's experts computed by rank 0
      b.replicas.push_back({0, RankId(1), 0.4});
      if (c.ranks == 3) b.replicas.push_back({0, RankId(2), 0.3});
      b.offloads.push_back({RankId(last), RankId(0), 1});
      break;
  }
  return plan;
}

struct Recorded {
  // [step][micro] per rank.
  std::map<int, std::vector<std::vector<std::vector<float>>>> y, dx;
  std::vector<std::vector<bool>> pruned;                     // [step][expert], union over ranks
  std::vector<std::vector<float>> grad;                      // [step], rank 0's gather
  std::vector<std::vector<double>> aux;                      // [step][micro], rank 0
  std::map<int, std::vector<std::vector<int64_t>>> dropped;  // [step][micro][rank]
  std::vector<float> final_values;                           // after the last AdamW
  // [step][rank]: the block's timing after EndStep, and the rank's units and their fates.
  std::vector<std::vector<BlockTiming>> timing;
  std::vector<std::vector<std::vector<int32_t>>> units;
  std::vector<std::vector<std::vector<UnitFate>>> fates;
};

// The token rows each rank computes in one Forward that routed routed[e] tokens to expert
// e (`plan` null: none in force): an owner its local experts' tokens less the slices its
// replicas take, a helper an offloaded expert's tokens whole and a replica's slice, and
// nobody a pruned expert's. Slices are cut by the split rule (BlockPlan::replicas): the
// owner keeps [0, 1 - sum of shares), each replica the next share in plan order, the last
// up to 1, every boundary at llround(tokens x fraction).
std::vector<int64_t> WantTokensComputed(const BlockPlan* plan,
                                        const std::vector<std::vector<int32_t>>& units,
                                        const std::vector<std::vector<UnitFate>>& fates,
                                        const std::vector<int32_t>& routed) {
  std::vector<int64_t> want(units.size(), 0);
  auto cut = [](int32_t n, double fraction) { return std::llround(n * fraction); };
  std::map<int32_t, double> owner_end;  // unit -> where its owner's slice ends
  if (plan != nullptr) {
    for (const Replica& r : plan->replicas) owner_end[r.unit] -= r.share;
    for (auto& [unit, at] : owner_end) at += 1.0;
  }
  for (size_t r = 0; r < units.size(); ++r) {
    for (size_t i = 0; i < units[r].size(); ++i) {
      const int32_t e = units[r][i];
      if (fates[r][i] == UnitFate::kLocal) {
        const auto split = owner_end.find(e);
        want[r] += split == owner_end.end() ? routed[e] : cut(routed[e], split->second);
      } else if (fates[r][i] == UnitFate::kOffloaded) {
        // These plans offload from each owner to one helper at most.
        for (const Offload& o : plan->offloads) {
          if (o.owner.value() == static_cast<int32_t>(r)) want[o.helper.value()] += routed[e];
        }
      }
    }
  }
  if (plan != nullptr) {
    std::map<int32_t, double> begin = owner_end;
    std::map<int32_t, int> left;
    for (const Replica& p : plan->replicas) ++left[p.unit];
    for (const Replica& p : plan->replicas) {
      const double from = begin[p.unit];
      const double to = --left[p.unit] == 0 ? 1.0 : from + p.share;
      begin[p.unit] = to;
      want[p.helper.value()] += cut(routed[p.unit], to) - cut(routed[p.unit], from);
    }
  }
  return want;
}

// The step's token loads on every rank (BlockTiming::unit_tokens, tokens_computed), given
// the reference's routing of each of its Forwards: per expert, the tokens routed to it
// (`routed`, the load) and those its capacity kept (`kept`, what is computed). Returns the
// kept tokens pruned experts dropped.
int64_t CheckTokenLoads(const MoeCase& c, const MoeConfig& config, const BlockPlan* plan, int s,
                        int32_t tokens, const std::vector<std::vector<int32_t>>& routed,
                        const std::vector<std::vector<int32_t>>& kept, const Recorded& rec) {
  const size_t experts = config.num_experts;
  int64_t pruned_tokens = 0;
  int64_t kept_all = 0;
  std::vector<int64_t> want(c.ranks, 0);
  for (const std::vector<int32_t>& forward : kept) {
    for (size_t e = 0; e < experts; ++e) pruned_tokens += rec.pruned[s][e] ? forward[e] : 0;
    kept_all += std::accumulate(forward.begin(), forward.end(), int64_t{0});
    const std::vector<int64_t> computed =
        WantTokensComputed(plan, rec.units[s], rec.fates[s], forward);
    for (int r = 0; r < c.ranks; ++r) want[r] += computed[r];
  }
  int64_t computed_sum = 0;
  for (int r = 0; r < c.ranks; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    const BlockTiming& t = rec.timing[s][r];
    // One routing per Forward: a recompute's second Forward adds none.
    EXPECT_EQ(t.unit_tokens.size(), routed.size() * experts) << "forwards x experts values";
    if (t.unit_tokens.size() != routed.size() * experts) continue;
    for (size_t m = 0; m < routed.size(); ++m) {
      const std::vector<int32_t> forward(t.unit_tokens.begin() + m * experts,
                                         t.unit_tokens.begin() + (m + 1) * experts);
      EXPECT_EQ(forward, routed[m]) << "the reference's routing, forward " << m;
      EXPECT_EQ(std::accumulate(forward.begin(), forward.end(), 0), tokens * c.top_k)
          << "forward " << m;
    }
    EXPECT_EQ(t.tokens_computed, want[r]) << "owners, helpers and replicas' slices";
    computed_sum += t.tokens_computed;
  }
  // Every kept token is computed once, on some rank, unless its expert was pruned.
  EXPECT_EQ(computed_sum, kept_all - pruned_tokens);
  if (c.plan != PlanKind::kPrune) {
    EXPECT_EQ(pruned_tokens, 0);
  }
  return pruned_tokens;
}

void RunAndCompare(const MoeCase& c) {
  const MoeConfig config = ConfigFor(c);
  constexpr int kSteps = 3, kBatch = 2, kSeq = 5, kTokens = kBatch * kSeq;
  const size_t n = static_cast<size_t>(kTokens) * config.hidden;
  DenseMoe dense{.config = config};
  const size_t experts = static_cast<size_t>(config.hidden) * config.ffn * config.num_experts;
  const std::vector<float> params0 =
      RandomNormal(3 * experts + config.hidden * (config.num_experts + 1), 11, 0.3);
  // [step][micro] inputs.
  std::vector<std::vector<std::vector<float>>> xs(kSteps), dys(kSteps);
  for (int s = 0; s < kSteps; ++s) {
    for (int m = 0; m < c.micro_batches; ++m) {
      xs[s].push_back(RandomNormal(n, 100 + 10 * s + m, 1.0));
      dys[s].push_back(RandomNormal(n, 500 + 10 * s + m, 1.0));
    }
  }
  const AdamWOptions adamw{.lr = 0.02f, .weight_decay = 0.1f};
  const std::optional<WorkloadPlan> plan = PlanFor(c);

  std::mutex mu;
  Recorded rec;
  rec.pruned.assign(kSteps, std::vector<bool>(config.num_experts, false));
  rec.grad.resize(kSteps);
  rec.aux.assign(kSteps, {});
  rec.timing.assign(kSteps, std::vector<BlockTiming>(c.ranks));
  rec.units.assign(kSteps, std::vector<std::vector<int32_t>>(c.ranks));
  rec.fates.assign(kSteps, std::vector<std::vector<UnitFate>>(c.ranks));
  for (int s = 0; s < kSteps; ++s) {
    rec.y[s].assign(c.micro_batches, std::vector<std::vector<float>>(c.ranks));
    rec.dx[s].assign(c.micro_batches, std::vector<std::vector<float>>(c.ranks));
    rec.dropped[s].assign(c.micro_batches, std::vector<int64_t>(c.ranks, -1));
  }
  absl::Status status = RunRanks(c.ranks, [&](RankContext& ctx) -> absl::Status {
    BALLAST_ASSIGN_OR_RETURN(auto moe, ParallelMoe::Create(ctx.group.get(), config));
    BALLAST_RETURN_IF_ERROR(moe->LoadDense(MoeParams::Split(params0, config)));
    moe->set_aux_loss_scale(1.0f / c.micro_batches);
    Compute& compute = ctx.backend->compute();
    BALLAST_ASSIGN_OR_RETURN(Buffer x, compute.Allocate(n));
    BALLAST_ASSIGN_OR_RETURN(Buffer y, compute.Allocate(n));
    BALLAST_ASSIGN_OR_RETURN(Buffer dy, compute.Allocate(n));
    BALLAST_ASSIGN_OR_RETURN(Buffer dx, compute.Allocate(n));
    for (int s = 0; s < kSteps; ++s) {
      if (s == 1 && plan.has_value()) BALLAST_RETURN_IF_ERROR(ctx.group->OfferPlan(*plan));
      BALLAST_RETURN_IF_ERROR(ctx.group->BeginStep());
      if (s >= 1 && plan.has_value() && ctx.group->applied_version() != plan->version) {
        return absl::InternalError("the plan was not applied at step 1");
      }
      {
        const std::vector<int32_t> units = moe->LocalUnits();
        const std::vector<UnitFate> fates = moe->LocalFates();
        std::lock_guard<std::mutex> lock(mu);
        for (size_t i = 0; i < units.size(); ++i) {
          if (fates[i] == UnitFate::kPruned) rec.pruned[s][units[i]] = true;
        }
        rec.units[s][ctx.rank] = units;
        rec.fates[s][ctx.rank] = fates;
      }
      for (int m = 0; m < c.micro_batches; ++m) {
        compute.CopyFromHost(xs[s][m].data(), x.data(), n);
        compute.CopyFromHost(dys[s][m].data(), dy.data(), n);
        BALLAST_RETURN_IF_ERROR(moe->Forward(x.data(), kBatch, kSeq, y.data()));
        BALLAST_RETURN_IF_ERROR(moe->Backward(dy.data(), dx.data()));
        std::vector<float> y_host = testing::ToHost(compute, y.data(), n);
        std::vector<float> dx_host = testing::ToHost(compute, dx.data(), n);
        std::lock_guard<std::mutex> lock(mu);
        rec.y[s][m][ctx.rank] = std::move(y_host);
        rec.dx[s][m][ctx.rank] = std::move(dx_host);
        rec.dropped[s][m][ctx.rank] = moe->dropped_tokens();
        if (ctx.rank == 0) rec.aux[s].push_back(moe->aux_loss());
      }
      BALLAST_ASSIGN_OR_RETURN(std::vector<float> grad, moe->GatherDense(ParamField::kGrad));
      BALLAST_RETURN_IF_ERROR(moe->AdamWStep(adamw));
      BALLAST_RETURN_IF_ERROR(ctx.group->EndStep());
      std::lock_guard<std::mutex> lock(mu);
      rec.timing[s][ctx.rank] = moe->timing();
      if (ctx.rank == 0) rec.grad[s] = std::move(grad);
    }
    BALLAST_ASSIGN_OR_RETURN(std::vector<float> values, moe->GatherDense(ParamField::kValue));
    if (ctx.rank == 0) {
      std::lock_guard<std::mutex> lock(mu);
      rec.final_values = std::move(values);
    }
    return absl::OkStatus();
  });
  ASSERT_TRUE(status.ok()) << status;

  dense.params = ToDouble(params0);
  DenseMoeAdamW adam;
  int pruned_seen = 0;
  int64_t pruned_tokens = 0, dropped = 0;
  for (int s = 0; s < kSteps; ++s) {
    SCOPED_TRACE(absl::StrCat("step ", s));
    for (bool p : rec.pruned[s]) pruned_seen += p;
    std::vector<double> grad(dense.params.size(), 0.0);
    std::vector<std::vector<int32_t>> routed, kept;  // [micro] tokens per expert
    dense.capacity_factor = s >= 1 && plan.has_value() ? plan->blocks[0].capacity_factor : 0;
    for (int m = 0; m < c.micro_batches; ++m) {
      SCOPED_TRACE(absl::StrCat("micro-batch ", m));
      const DenseMoe::Result want = dense.Run(ToDouble(xs[s][m]), ToDouble(dys[s][m]), kTokens,
                                              rec.pruned[s], 1.0 / c.micro_batches);
      for (int r = 0; r < c.ranks; ++r) {
        EXPECT_LE(MaxRelError(rec.y[s][m][r], want.y), kTolerance) << "y on rank " << r;
        EXPECT_LE(MaxRelError(rec.dx[s][m][r], want.dx), kTolerance) << "dx on rank " << r;
        EXPECT_EQ(rec.dropped[s][m][r], want.dropped) << "pairs over the cap on rank " << r;
      }
      dropped += want.dropped;
      EXPECT_NEAR(rec.aux[s][m], want.aux_loss, 1e-6 + 1e-5 * std::abs(want.aux_loss));
      for (size_t i = 0; i < grad.size(); ++i) grad[i] += want.grad[i];
      routed.push_back(want.tokens_per_expert);
      kept.push_back(want.kept_per_expert);
    }
    pruned_tokens +=
        CheckTokenLoads(c, config, s >= 1 && plan.has_value() ? &plan->blocks[0] : nullptr, s,
                        kTokens, routed, kept, rec);
    EXPECT_LE(MaxRelError(rec.grad[s], grad), kTolerance) << "gathered gradients";
    adam.Step(config, adamw, rec.pruned[s], grad, dense.params);
  }
  EXPECT_LE(MaxRelError(rec.final_values, dense.params), kTolerance) << "weights after AdamW";
  if (c.plan == PlanKind::kPrune) {
    EXPECT_EQ(pruned_seen, kSteps - 1) << "one expert a step";
    EXPECT_GT(pruned_tokens, 0) << "no pruned expert had tokens to drop";
  }
  // A cap that drops nothing would test nothing; without one, nothing is dropped.
  if (c.capacity > 0) {
    EXPECT_GT(dropped, 0) << "the cap dropped no token";
  } else {
    EXPECT_EQ(dropped, 0);
  }
}

class MoeMatchesDenseTest : public ::testing::TestWithParam<MoeCase> {};

TEST_P(MoeMatchesDenseTest, EveryStepUnderThePlan) { RunAndCompare(GetParam()); }

std::vector<MoeCase> Cases() {
  std::vector<MoeCase> cases;
  for (int ranks : {2, 3}) {
    for (PlanKind plan : {PlanKind::kNone, PlanKind::kReplica, PlanKind::kReshard, PlanKind::kPrune,
                          PlanKind::kSplit, PlanKind::kSplitReshard}) {
      const std::string plan_name = plan == PlanKind::kNone      ? "Empty"
                                    : plan == PlanKind::kReplica ? "Replica"
                                    : plan == PlanKind::kReshard ? "Reshard"
                                    : plan == PlanKind::kPrune   ? "Prune"
                                    : plan == PlanKind::kSplit   ? "Split"
                                                                 : "SplitReshard";
      cases.push_back({.name = absl::StrCat(plan_name, "Top2Ranks", ranks),
                       .ranks = ranks,
                       .plan = plan,
                       .micro_batches = 2});
      cases.push_back({.name = absl::StrCat(plan_name, "Top1PreSoftmaxRanks", ranks),
                       .ranks = ranks,
                       .top_k = 1,
                       .pre_softmax = true,
                       .plan = plan});
    }
  }
  // Capacity caps (tight enough that this routing drops tokens, which RunAndCompare
  // asserts), alone and with an expert split with replicas and another offloaded.
  for (int ranks : {2, 3}) {
    for (PlanKind plan : {PlanKind::kNone, PlanKind::kSplitOffload}) {
      const std::string name =
          absl::StrCat("Capacity", plan == PlanKind::kNone ? "" : "SplitOffload");
      cases.push_back({.name = absl::StrCat(name, "Top2Ranks", ranks),
                       .ranks = ranks,
                       .plan = plan,
                       .micro_batches = 2,
                       .capacity = plan == PlanKind::kNone ? 1.0 : 0.5});
      cases.push_back({.name = absl::StrCat(name, "Top1PreSoftmaxRanks", ranks),
                       .ranks = ranks,
                       .top_k = 1,
                       .pre_softmax = true,
                       .plan = plan,
                       .micro_batches = 2,
                       .capacity = plan == PlanKind::kNone ? 0.5 : 1.0});
    }
  }
  cases.push_back({.name = "CapacitySplitOffloadTop2RecomputeRanks3",
                   .ranks = 3,
                   .plan = PlanKind::kSplitOffload,
                   .micro_batches = 2,
                   .recompute = true,
                   .capacity = 1.0});
  cases.push_back({.name = "SplitTop2RecomputeRanks3",
                   .ranks = 3,
                   .plan = PlanKind::kSplit,
                   .micro_batches = 2,
                   .recompute = true});
  cases.push_back({.name = "ReplicaTop2RecomputeNoAux",
                   .ranks = 3,
                   .aux_loss_coeff = 0.0f,
                   .plan = PlanKind::kReplica,
                   .micro_batches = 2,
                   .recompute = true});
  cases.push_back({.name = "Top1PostSoftmaxLearnsOnlyFromAux",
                   .ranks = 2,
                   .top_k = 1,
                   .aux_loss_coeff = 0.1f,
                   .plan = PlanKind::kReplica});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Plans, MoeMatchesDenseTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<MoeCase>& info) {
                           return info.param.name;
                         });

TEST(MoeCreateTest, RejectsBadConfigsNamingTheField) {
  absl::Status status = RunRanks(1, [](RankContext& ctx) -> absl::Status {
    MoeConfig good = ConfigFor({});
    const std::vector<std::pair<std::string, MoeConfig>> bad = [&] {
      std::vector<std::pair<std::string, MoeConfig>> out;
      MoeConfig c = good;
      c.hidden = 0;
      out.push_back({"hidden 0", c});
      c = good;
      c.ffn = -3;
      out.push_back({"ffn -3", c});
      c = good;
      c.num_experts = 0;
      out.push_back({"num_experts 0", c});
      c = good;
      c.top_k = 0;
      out.push_back({"top_k 0", c});
      c = good;
      c.top_k = 7;
      out.push_back({"top_k 7", c});
      c = good;
      c.aux_loss_coeff = -1;
      out.push_back({"aux_loss_coeff -1", c});
      return out;
    }();
    for (const auto& [field, config] : bad) {
      auto moe = ParallelMoe::Create(ctx.group.get(), config);
      if (moe.ok()) return absl::InternalError(absl::StrCat("accepted ", field));
      if (moe.status().message().find(field) == std::string::npos) {
        return absl::InternalError(
            absl::StrCat("error for ", field, " does not name it: ", moe.status().message()));
      }
    }
    BALLAST_ASSIGN_OR_RETURN(auto moe, ParallelMoe::Create(ctx.group.get(), good));
    MoeParams params = MoeParams::Split(std::vector<float>(10), good);
    absl::Status load = moe->LoadDense(params);
    if (load.ok() || load.message().find("router") == std::string::npos) {
      return absl::InternalError(absl::StrCat("LoadDense of wrong sizes: ", load.ToString()));
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

TEST(MoeRouterBiasTest, SkewsRoutingAndIsRefusedByNameWhenMalformed) {
  absl::Status status = RunRanks(2, [](RankContext& ctx) -> absl::Status {
    const MoeConfig config = ConfigFor({});
    BALLAST_ASSIGN_OR_RETURN(auto moe, ParallelMoe::Create(ctx.group.get(), config));
    absl::Status size = moe->SetRouterBias({1.0f, 2.0f});
    if (size.message().find("router bias has 2 values, expected 6") == std::string::npos) {
      return absl::InternalError(absl::StrCat("a short bias: ", size.ToString()));
    }
    absl::Status nan = moe->SetRouterBias({0, 0, std::nanf(""), 0, 0, 0});
    if (nan.message().find("router bias[2]") == std::string::npos) {
      return absl::InternalError(absl::StrCat("a NaN bias: ", nan.ToString()));
    }
    // A bias far above the logits' spread sends every token's first choice to expert 4
    // (on rank 1) and its second to expert 1.
    BALLAST_RETURN_IF_ERROR(moe->SetRouterBias({0, 50, 0, 0, 100, 0}));
    constexpr int kBatch = 2, kSeq = 5;
    const size_t n = static_cast<size_t>(kBatch) * kSeq * config.hidden;
    Compute& c = ctx.backend->compute();
    BALLAST_ASSIGN_OR_RETURN(Buffer x, c.Allocate(n));
    BALLAST_ASSIGN_OR_RETURN(Buffer y, c.Allocate(n));
    const std::vector<float> xs = RandomNormal(n, 9, 1.0);
    c.CopyFromHost(xs.data(), x.data(), n);
    BALLAST_RETURN_IF_ERROR(ctx.group->BeginStep());
    BALLAST_RETURN_IF_ERROR(moe->Forward(x.data(), kBatch, kSeq, y.data()));
    BALLAST_RETURN_IF_ERROR(ctx.group->EndStep());
    const std::vector<int32_t> want = {0, kBatch * kSeq, 0, 0, kBatch * kSeq, 0};
    if (moe->expert_tokens() != want) {
      return absl::InternalError("the bias did not route every token to experts 4 and 1");
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

TEST(MoePlanTest, MalformedExpertPlansAreRefusedByName) {
  absl::Status status = RunRanks(2, [](RankContext& ctx) -> absl::Status {
    BALLAST_ASSIGN_OR_RETURN(auto moe, ParallelMoe::Create(ctx.group.get(), ConfigFor({})));
    WorkloadPlan plan;
    plan.group = GroupId("test/tp");
    plan.version = PlanVersion(1);
    BlockPlan& b = plan.blocks.emplace_back();
    b.block = kBlock;
    b.offloads.push_back({RankId(1), RankId(0), 4});  // rank 1 owns 3 experts
    absl::Status offered = ctx.group->OfferPlan(plan);
    if (offered.ok()) return absl::InternalError("offloading 4 of 3 experts was accepted");
    b.offloads.clear();
    b.owner_of_unit = {RankId(0), RankId(0), RankId(0), RankId(1), RankId(1), RankId(5)};
    plan.version = PlanVersion(2);
    absl::Status resharded = ctx.group->OfferPlan(plan);
    if (resharded.ok()) return absl::InternalError("an expert owned by rank 5 was accepted");
    if (resharded.message().find("owner_of_unit") == std::string::npos) {
      return absl::InternalError(absl::StrCat("does not name the field: ", resharded.message()));
    }
    b.owner_of_unit.clear();
    b.replicas = {{0, RankId(1), 0.5}, {0, RankId(1), 0.25}};
    plan.version = PlanVersion(3);
    absl::Status twice = ctx.group->OfferPlan(plan);
    if (twice.message().find("replicas[1] repeats unit 0 on helper 1") == std::string::npos) {
      return absl::InternalError(absl::StrCat("a repeated replica: ", twice.ToString()));
    }
    b.replicas = {{2, RankId(1), 1.5}};
    absl::Status over = ctx.group->OfferPlan(plan);
    if (over.message().find("replicas[0].share 1.5 out of range (0, 1]") == std::string::npos) {
      return absl::InternalError(absl::StrCat("a share over 1: ", over.ToString()));
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

}  // namespace
}  // namespace ballast
