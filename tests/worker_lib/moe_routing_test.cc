// The MoE router on the host (worker_lib/internal/moe_routing.h): choices, gates, the aux
// loss, and RouterBackward against central differences of the loss it differentiates.
#include "worker_lib/internal/moe_routing.h"

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

// L = sum over chosen (t, e) of w[t, e] * gate + scale * aux; its gradient by central
// differences (routing fixed: the perturbation is too small to change a choice).
void ExpectBackwardMatchesDifferences(const MoeRouterOptions& options) {
  constexpr int32_t kTokens = 6;
  const int32_t experts = options.experts;
  std::vector<float> logits = testing::RandomNormal(kTokens * experts, 3, 1.0);
  const std::vector<float> w = testing::RandomNormal(kTokens * experts, 4, 1.0);
  constexpr float kScale = 0.5f;
  auto loss = [&](const std::vector<float>& z) {
    const MoeRouting r = Route(z.data(), kTokens, options);
    double l = kScale * r.aux_loss;
    for (int32_t t = 0; t < kTokens; ++t) {
      for (int32_t j = 0; j < options.top_k; ++j) {
        l += w[t * experts + r.expert[t * options.top_k + j]] * r.gate[t * options.top_k + j];
      }
    }
    return l;
  };
  const MoeRouting r = Route(logits.data(), kTokens, options);
  std::vector<float> dlogits(logits.size());
  RouterBackward(r, options, w.data(), kScale, dlogits.data());
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

TEST(MoeRoutingTest, BackwardMatchesDifferencesPreSoftmaxTop1WithAux) {
  ExpectBackwardMatchesDifferences(
      {.experts = 4, .top_k = 1, .pre_softmax = true, .aux_loss_coeff = 0.2f});
}

}  // namespace
}  // namespace ballast::internal
