#include "testing/moe_reference.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace ballast::testing {
namespace {

struct Layout {
  size_t w1, w3, w2, router, b2, end;
  explicit Layout(const MoeConfig& c) {
    const size_t expert = static_cast<size_t>(c.hidden) * c.ffn * c.num_experts;
    w1 = 0;
    w3 = expert;
    w2 = 2 * expert;
    router = 3 * expert;
    b2 = router + static_cast<size_t>(c.hidden) * c.num_experts;
    end = b2 + c.hidden;
  }
};

std::vector<double> Softmax(const std::vector<double>& z) {
  const double top = *std::max_element(z.begin(), z.end());
  std::vector<double> p(z.size());
  double sum = 0;
  for (size_t i = 0; i < z.size(); ++i) sum += p[i] = std::exp(z[i] - top);
  for (double& v : p) v /= sum;
  return p;
}

// Gradient through a softmax p for upstream dp.
std::vector<double> SoftmaxGrad(const std::vector<double>& p, const std::vector<double>& dp) {
  double dot = 0;
  for (size_t i = 0; i < p.size(); ++i) dot += p[i] * dp[i];
  std::vector<double> dz(p.size());
  for (size_t i = 0; i < p.size(); ++i) dz[i] = p[i] * (dp[i] - dot);
  return dz;
}

double Sigmoid(double a) { return 1.0 / (1.0 + std::exp(-a)); }

}  // namespace

DenseMoe::Result DenseMoe::Run(const std::vector<double>& x, const std::vector<double>& dy,
                               int32_t tokens, const std::vector<bool>& pruned,
                               double aux_scale) const {
  const MoeConfig& c = config;
  const size_t h = c.hidden, f = c.ffn, n_e = c.num_experts, k = c.top_k;
  const Layout o(c);
  const double* w = params.data();
  Result r;
  r.y.assign(tokens * h, 0.0);
  r.dx.assign(tokens * h, 0.0);
  r.grad.assign(params.size(), 0.0);
  r.tokens_per_expert.assign(n_e, 0);

  // Routing.
  std::vector<std::vector<double>> probs(tokens);
  std::vector<std::vector<size_t>> chosen(tokens);
  std::vector<std::vector<double>> gates(tokens);
  for (int32_t t = 0; t < tokens; ++t) {
    std::vector<double> logits(n_e, 0.0);
    for (size_t e = 0; e < n_e; ++e) {
      for (size_t i = 0; i < h; ++i) logits[e] += x[t * h + i] * w[o.router + i * n_e + e];
    }
    probs[t] = Softmax(logits);
    std::vector<size_t> order(n_e);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return logits[a] > logits[b]; });
    chosen[t].assign(order.begin(), order.begin() + k);
    std::vector<double> top(k);
    for (size_t j = 0; j < k; ++j) top[j] = logits[chosen[t][j]];
    if (c.pre_softmax) {
      for (size_t j = 0; j < k; ++j) gates[t].push_back(probs[t][chosen[t][j]]);
    } else {
      gates[t] = Softmax(top);
    }
    for (size_t e : chosen[t]) ++r.tokens_per_expert[e];
  }
  // The cap: an expert's first `capacity` tokens in token order are kept.
  std::vector<std::vector<bool>> kept(tokens, std::vector<bool>(k, true));
  r.kept_per_expert.assign(n_e, 0);
  const double capacity =
      capacity_factor > 0 ? std::max(1.0, std::ceil(capacity_factor * tokens * k / n_e)) : tokens;
  for (int32_t t = 0; t < tokens; ++t) {
    for (size_t j = 0; j < k; ++j) {
      int32_t& n = r.kept_per_expert[chosen[t][j]];
      kept[t][j] = n < capacity;
      n += kept[t][j];
      r.dropped += !kept[t][j];
    }
  }
  double aux = 0;
  for (size_t e = 0; e < n_e; ++e) {
    double p_sum = 0;
    for (int32_t t = 0; t < tokens; ++t) p_sum += probs[t][e];
    aux += p_sum * r.tokens_per_expert[e];
  }
  const double aux_norm =
      c.aux_loss_coeff * static_cast<double>(n_e) / (static_cast<double>(tokens) * tokens * k);
  r.aux_loss = aux * aux_norm;

  for (int32_t t = 0; t < tokens; ++t) {
    const double* xt = x.data() + t * h;
    const double* dyt = dy.data() + t * h;
    std::vector<double> dgate(k, 0.0);
    for (size_t j = 0; j < k; ++j) {
      const size_t e = chosen[t][j];
      if ((!pruned.empty() && pruned[e]) || !kept[t][j]) continue;
      const double* w1 = w + o.w1 + e * h * f;
      const double* w3 = w + o.w3 + e * h * f;
      const double* w2 = w + o.w2 + e * f * h;
      std::vector<double> a(f, 0.0), b(f, 0.0), act(f), out(h, 0.0);
      for (size_t q = 0; q < f; ++q) {
        for (size_t i = 0; i < h; ++i) {
          a[q] += xt[i] * w1[i * f + q];
          b[q] += xt[i] * w3[i * f + q];
        }
        act[q] = a[q] * Sigmoid(a[q]) * b[q];
      }
      for (size_t i = 0; i < h; ++i) {
        for (size_t q = 0; q < f; ++q) out[i] += act[q] * w2[q * h + i];
        r.y[t * h + i] += gates[t][j] * out[i];
        dgate[j] += dyt[i] * out[i];
      }
      // The expert's backward from gate * dy.
      std::vector<double> dout(h), dact(f, 0.0);
      for (size_t i = 0; i < h; ++i) dout[i] = gates[t][j] * dyt[i];
      double* g1 = r.grad.data() + o.w1 + e * h * f;
      double* g3 = r.grad.data() + o.w3 + e * h * f;
      double* g2 = r.grad.data() + o.w2 + e * f * h;
      for (size_t q = 0; q < f; ++q) {
        for (size_t i = 0; i < h; ++i) {
          g2[q * h + i] += act[q] * dout[i];
          dact[q] += dout[i] * w2[q * h + i];
        }
        const double s = Sigmoid(a[q]);
        const double da = dact[q] * b[q] * s * (1 + a[q] * (1 - s));
        const double db = dact[q] * a[q] * s;
        for (size_t i = 0; i < h; ++i) {
          g1[i * f + q] += xt[i] * da;
          g3[i * f + q] += xt[i] * db;
          r.dx[t * h + i] += da * w1[i * f + q] + db * w3[i * f + q];
        }
      }
    }
    // The router: through the gates, and the aux loss through the full softmax.
    std::vector<double> dlogits(n_e, 0.0);
    if (c.pre_softmax) {
      std::vector<double> dp(n_e, 0.0);
      for (size_t j = 0; j < k; ++j) dp[chosen[t][j]] = dgate[j];
      dlogits = SoftmaxGrad(probs[t], dp);
    } else {
      const std::vector<double> dtop = SoftmaxGrad(gates[t], dgate);
      for (size_t j = 0; j < k; ++j) dlogits[chosen[t][j]] += dtop[j];
    }
    std::vector<double> daux(n_e);
    for (size_t e = 0; e < n_e; ++e) daux[e] = aux_scale * aux_norm * r.tokens_per_expert[e];
    const std::vector<double> dz_aux = SoftmaxGrad(probs[t], daux);
    for (size_t e = 0; e < n_e; ++e) dlogits[e] += dz_aux[e];
    for (size_t i = 0; i < h; ++i) {
      for (size_t e = 0; e < n_e; ++e) {
        r.grad[o.router + i * n_e + e] += xt[i] * dlogits[e];
        r.dx[t * h + i] += dlogits[e] * w[o.router + i * n_e + e];
      }
      r.y[t * h + i] += w[o.b2 + i];
      r.grad[o.b2 + i] += dyt[i];
    }
  }
  return r;
}

void DenseMoeAdamW::Step(const MoeConfig& c, const AdamWOptions& a, const std::vector<bool>& pruned,
                         const std::vector<double>& grad, std::vector<double>& params) {
  const Layout o(c);
  const size_t expert = static_cast<size_t>(c.hidden) * c.ffn;
  if (m.empty()) {
    m.assign(params.size(), 0.0);
    v.assign(params.size(), 0.0);
    steps.assign(c.num_experts + 1, 0);
  }
  auto update = [&](size_t first, size_t n, int64_t step) {
    const double c1 = 1 - std::pow(a.beta1, step), c2 = 1 - std::pow(a.beta2, step);
    for (size_t i = first; i < first + n; ++i) {
      m[i] = a.beta1 * m[i] + (1 - a.beta1) * grad[i];
      v[i] = a.beta2 * v[i] + (1 - a.beta2) * grad[i] * grad[i];
      params[i] -=
          a.lr * (a.weight_decay * params[i] + (m[i] / c1) / (std::sqrt(v[i] / c2) + a.eps));
    }
  };
  for (int32_t e = 0; e < c.num_experts; ++e) {
    if (!pruned.empty() && pruned[e]) continue;
    const int64_t step = ++steps[e];
    for (size_t base : {o.w1, o.w3, o.w2}) update(base + e * expert, expert, step);
  }
  update(o.router, o.end - o.router, ++steps.back());
}

}  // namespace ballast::testing
