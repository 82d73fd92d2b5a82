// The MoE router on the host (worker_lib/internal/moe_routing.h): choices, gates, the aux
// loss, and RouterBackward against central differences of the loss it differentiates.
#include "worker_lib/internal/moe_routing.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "testing/dense_reference.h"

namespace ballast::internal {
namespace {

TEST(MoeRoutingTest, TopKWithTiesToTheLowerExpertAndPostSoftmaxGates) {
  // Token 0: experts 1 and 3 tie for first; token 1: all equal.
  const std::vector<float> logits = {0.0f, 2.0f, 1.0f, 2.0f, 0.5f, 0.5f, 0.5f, 0.5f};
  const MoeRouting r = Route(logits.data(), 2, {.experts = 4, .top_k = 2});
  EXPECT_EQ(r.expert, (std::vector<int32_t>{1, 3, 0, 1}));
  for (float g : r.gate) EXPECT_FLOAT_EQ(g, 0.5f);  // softmax over two equal logits
  EXPECT_EQ(r.expert_tokens[1], (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(r.expert_tokens[2], (std::vector<int32_t>{}));
  EXPECT_EQ(r.expert_tokens[0], (std::vector<int32_t>{1}));
}

TEST(MoeRoutingTest, PreSoftmaxGatesAreTheFullSoftmaxProbabilities) {
  const std::vector<float> logits = {1.0f, 0.0f, -1.0f};
  const MoeRouting r = Route(logits.data(), 1, {.experts = 3, .top_k = 1, .pre_softmax = true});
  const double sum = std::exp(1.0) + 1.0 + std::exp(-1.0);
  EXPECT_EQ(r.expert[0], 0);
  EXPECT_NEAR(r.gate[0], std::exp(1.0) / sum, 1e-6);
  const MoeRouting post = Route(logits.data(), 1, {.experts = 3, .top_k = 1});
  EXPECT_FLOAT_EQ(post.gate[0], 1.0f);  // top-1 post-softmax: the router learns from aux only
}

TEST(MoeRoutingTest, AuxLossIsTheCoefficientWhenRoutingIsUniform) {
  // Uniform probabilities make sum_e P_e c_e = (T / E) * T k, so aux = coeff exactly.
  const std::vector<float> logits(5 * 4, 0.25f);
  const MoeRouting r = Route(logits.data(), 5, {.experts = 4, .top_k = 2, .aux_loss_coeff = 0.3f});
  EXPECT_NEAR(r.aux_loss, 0.3f, 1e-9);  // the coefficient as given, a float
}

TEST(MoeRoutingTest, CapacityKeepsEachExpertsFirstTokensAndCountsTheRest) {
  EXPECT_EQ(ExpertCapacity(0.0, 10, 2, 6), 10);  // no cap
  EXPECT_EQ(ExpertCapacity(1.0, 10, 2, 6), 4);   // ceil(20 / 6)
  EXPECT_EQ(ExpertCapacity(0.5, 12, 2, 4), 3);   // exactly 3: not rounded up to 4
  EXPECT_EQ(ExpertCapacity(1e-9, 10, 1, 6), 1);  // at least one token
  EXPECT_EQ(ExpertCapacity(1e9, 10, 1, 6), 10);  // at most every token
  // Five tokens all to expert 1 first, expert 0 second; a cap of
  // max(1, ceil(0.5 * 5 * 2 / 3)) = 2 keeps tokens 0 and 1 on each, drops six pairs.
  std::vector<float> logits;
  for (int t = 0; t < 5; ++t) logits.insert(logits.end(), {1.0f, 2.0f, 0.0f});
  const MoeRouterOptions uncapped = {.experts = 3, .top_k = 2, .aux_loss_coeff = 0.1f};
  MoeRouterOptions capped = uncapped;
  capped.capacity_factor = 0.5;
  const MoeRouting all = Route(logits.data(), 5, uncapped);
  const MoeRouting r = Route(logits.data(), 5, capped);
  EXPECT_EQ(r.expert_tokens[1], (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(r.expert_tokens[0], (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(r.expert_gates[1].size(), 2u);
  EXPECT_EQ(r.routed, (std::vector<int32_t>{5, 5, 0}));  // the router's load, before the cap
  EXPECT_EQ(r.dropped, 6);
  EXPECT_EQ(all.dropped, 0);
  EXPECT_EQ(r.gate, all.gate);          // not renormalised over the kept experts
  EXPECT_EQ(r.aux_loss, all.aux_loss);  // counts what was routed
}

// L = sum over chosen (t, e) of w[t, e] * gate + scale * aux; its gradient by central
// differences (routing fixed: the perturbation is too small to change a choice). With a
// capacity cap, only kept pairs enter L, and dgate is 0 where the cap dropped a pair (as
// no rank writes one there).
void ExpectBackwardMatchesDifferences(const MoeRouterOptions& options) {
  constexpr int32_t kTokens = 6;
  const int32_t experts = options.experts;
  std::vector<float> logits = testing::RandomNormal(kTokens * experts, 3, 1.0);
  const std::vector<float> w = testing::RandomNormal(kTokens * experts, 4, 1.0);
  constexpr float kScale = 0.5f;
  auto kept = [&](const MoeRouting& r, int32_t t, int32_t e) {
    const std::vector<int32_t>& tokens = r.expert_tokens[e];
    return std::find(tokens.begin(), tokens.end(), t) != tokens.end();
  };
  auto loss = [&](const std::vector<float>& z) {
    const MoeRouting r = Route(z.data(), kTokens, options);
    double l = kScale * r.aux_loss;
    for (int32_t t = 0; t < kTokens; ++t) {
      for (int32_t j = 0; j < options.top_k; ++j) {
        const int32_t e = r.expert[t * options.top_k + j];
        if (kept(r, t, e)) l += w[t * experts + e] * r.gate[t * options.top_k + j];
      }
    }
    return l;
  };
  const MoeRouting r = Route(logits.data(), kTokens, options);
  if (options.capacity_factor > 0) {
    EXPECT_GT(r.dropped, 0) << "a cap that drops nothing";
  }
  std::vector<float> dgate(w.size(), 0.0f);
  for (int32_t t = 0; t < kTokens; ++t) {
    for (int32_t e = 0; e < experts; ++e) {
      if (kept(r, t, e)) dgate[t * experts + e] = w[t * experts + e];
    }
  }
  std::vector<float> dlogits(logits.size());
  RouterBackward(r, options, dgate.data(), kScale, dlogits.data());
  for (size_t i = 0; i < logits.size(); ++i) {
    const float keep = logits[i];
    constexpr float kStep = 1e-2f;
    logits[i] = keep + kStep;
    const double up = loss(logits);
    logits[i] = keep - kStep;
    const double down = loss(logits);
    logits[i] = keep;
    EXPECT_NEAR(dlogits[i], (up - down) / (2 * kStep), 2e-3) << "logit " << i;
  }
}

TEST(MoeRoutingTest, BackwardMatchesDifferencesPostSoftmaxTop2WithAux) {
  ExpectBackwardMatchesDifferences({.experts = 5, .top_k = 2, .aux_loss_coeff = 0.2f});
}

TEST(MoeRoutingTest, BackwardMatchesDifferencesUnderACapacityCap) {
  ExpectBackwardMatchesDifferences(
      {.experts = 5, .top_k = 2, .aux_loss_coeff = 0.2f, .capacity_factor = 0.5});
  ExpectBackwardMatchesDifferences({.experts = 4,
                                    .top_k = 1,
                                    .pre_softmax = true,
                                    .aux_loss_coeff = 0.2f,
                                    .capacity_factor = 0.5});
}

TEST(MoeRoutingTest, BackwardMatchesDifferencesPreSoftmaxTop1WithAux) {
  ExpectBackwardMatchesDifferences(
      {.experts = 4, .top_k = 1, .pre_softmax = true, .aux_loss_coeff = 0.2f});
}

}  // namespace
}  // namespace ballast::internal
