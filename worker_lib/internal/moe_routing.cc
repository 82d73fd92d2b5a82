#include "internal/moe_routing.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace ballast::internal {
namespace {

// Softmax of n values into out (double).
void Softmax(const float* x, int32_t n, double* out) {
  const double top = *std::max_element(x, x + n);
  double sum = 0;
  for (int32_t i = 0; i < n; ++i) sum += out[i] = std::exp(static_cast<double>(x[i]) - top);
  for (int32_t i = 0; i < n; ++i) out[i] /= sum;
}

// dz = p * (dp - <dp, p>): the gradient through a softmax, accumulated into dz.
void SoftmaxBackward(const double* p, const double* dp, int32_t n, double* dz) {
  double dot = 0;
  for (int32_t i = 0; i < n; ++i) dot += dp[i] * p[i];
  for (int32_t i = 0; i < n; ++i) dz[i] += p[i] * (dp[i] - dot);
}

}  // namespace

MoeRouting Route(const float* logits, int32_t tokens, const MoeRouterOptions& options) {
  const int32_t e_count = options.experts, k = options.top_k;
  MoeRouting r;
  r.tokens = tokens;
  r.expert.resize(static_cast<size_t>(tokens) * k);
  r.gate.resize(r.expert.size());
  r.probs.resize(static_cast<size_t>(tokens) * e_count);
  r.expert_tokens.assign(e_count, {});
  r.expert_gates.assign(e_count, {});
  std::vector<int32_t> order(e_count);
  std::vector<double> chosen(k);
  for (int32_t t = 0; t < tokens; ++t) {
    const float* row = logits + static_cast<size_t>(t) * e_count;
    double* p = r.probs.data() + static_cast<size_t>(t) * e_count;
    Softmax(row, e_count, p);
    // Ranking by logits or by probabilities is the same order; ties: lower index first.
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      return row[a] != row[b] ? row[a] > row[b] : a < b;
    });
    if (options.pre_softmax) {
      for (int32_t j = 0; j < k; ++j) chosen[j] = p[order[j]];
    } else {
      std::vector<float> top(k);
      for (int32_t j = 0; j < k; ++j) top[j] = row[order[j]];
      Softmax(top.data(), k, chosen.data());
    }
    for (int32_t j = 0; j < k; ++j) {
      r.expert[static_cast<size_t>(t) * k + j] = order[j];
      r.gate[static_cast<size_t>(t) * k + j] = static_cast<float>(chosen[j]);
    }
  }
  // Tokens per expert in ascending token order, up to its capacity: the first tokens in
  // token order are the ones kept (Megatron's "position" policy), the same on every rank,
  // so owner and replicas slice the same kept list.
  const auto capacity =
      static_cast<int32_t>(ExpertCapacity(options.capacity_factor, tokens, k, e_count));
  r.routed.assign(e_count, 0);
  for (int32_t t = 0; t < tokens; ++t) {
    for (int32_t j = 0; j < k; ++j) {
      const size_t i = static_cast<size_t>(t) * k + j;
      const int32_t e = r.expert[i];
      if (r.routed[e]++ >= capacity) {
        ++r.dropped;
        continue;
      }
      r.expert_tokens[e].push_back(t);
      r.expert_gates[e].push_back(r.gate[i]);
    }
  }
  if (options.aux_loss_coeff != 0.0f && tokens > 0) {
    double sum = 0;
    for (int32_t e = 0; e < e_count; ++e) {
      double p_sum = 0;
      for (int32_t t = 0; t < tokens; ++t) p_sum += r.probs[static_cast<size_t>(t) * e_count + e];
      sum += p_sum * static_cast<double>(r.routed[e]);  // before the cap: see the header
    }
    r.aux_loss =
        options.aux_loss_coeff * e_count * sum / (static_cast<double>(tokens) * tokens * k);
  }
  return r;
}

void RouterBackward(const MoeRouting& r, const MoeRouterOptions& options, const float* dgate,
                    float aux_scale, float* dlogits) {
  const int32_t e_count = options.experts, k = options.top_k;
  const int32_t tokens = r.tokens;
  // The aux loss's gradient w.r.t. each token's probabilities is the same for every token.
  std::vector<double> d_aux(e_count, 0.0);
  const bool aux = options.aux_loss_coeff != 0.0f && aux_scale != 0.0f && tokens > 0;
  if (aux) {
    const double c = static_cast<double>(aux_scale) * options.aux_loss_coeff * e_count /
                     (static_cast<double>(tokens) * tokens * k);
    for (int32_t e = 0; e < e_count; ++e) d_aux[e] = c * r.routed[e];
  }
  std::vector<double> dz(e_count), dp(e_count), gates(k), dg(k), dtop(k);
  for (int32_t t = 0; t < tokens; ++t) {
    const double* p = r.probs.data() + static_cast<size_t>(t) * e_count;
    const float* dg_row = dgate + static_cast<size_t>(t) * e_count;
    std::fill(dz.begin(), dz.end(), 0.0);
    if (options.pre_softmax) {
      std::fill(dp.begin(), dp.end(), 0.0);
      for (int32_t j = 0; j < k; ++j) {
        const int32_t e = r.expert[static_cast<size_t>(t) * k + j];
        dp[e] = dg_row[e];
      }
      SoftmaxBackward(p, dp.data(), e_count, dz.data());
    } else {
      for (int32_t j = 0; j < k; ++j) {
        const size_t i = static_cast<size_t>(t) * k + j;
        gates[j] = r.gate[i];
        dg[j] = dg_row[r.expert[i]];
        dtop[j] = 0;
      }
      SoftmaxBackward(gates.data(), dg.data(), k, dtop.data());
      for (int32_t j = 0; j < k; ++j) dz[r.expert[static_cast<size_t>(t) * k + j]] += dtop[j];
    }
    if (aux) SoftmaxBackward(p, d_aux.data(), e_count, dz.data());
    float* out = dlogits + static_cast<size_t>(t) * e_count;
    for (int32_t e = 0; e < e_count; ++e) out[e] = static_cast<float>(dz[e]);
  }
}

}  // namespace ballast::internal
