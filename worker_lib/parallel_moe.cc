#include "ballast/parallel_moe.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "ballast/tp_group.h"
#include "common/status_macros.h"
#include "internal/checked_math.h"
#include "internal/init.h"
#include "internal/moe_routing.h"

namespace ballast {
namespace {
// Sharded parameter indices: per expert, W1 and W3 transposed (ffn gate rows, then ffn up
// rows, each `hidden` wide: one GEMM gives SwiGLU's gate_up layout for one unit of ffn
// neurons), then W2 (ffn x hidden).
enum { kW13t = 0, kW2 = 1 };
// Activation buffers of a range (see CacheSizes).
enum { kPre = 0, kAct = 1, kOut = 2, kScratchA = 3, kScratchB = 4, kDots = 5 };

// Offsets of each dense parameter; see MoeParams.
struct MoeOffsets {
  size_t w1, w3, w2, router, b2, end;
  explicit MoeOffsets(const MoeConfig& c) {
    const size_t expert = static_cast<size_t>(c.hidden) * c.ffn;
    w1 = 0;
    w3 = w1 + c.num_experts * expert;
    w2 = w3 + c.num_experts * expert;
    router = w2 + c.num_experts * expert;
    b2 = router + static_cast<size_t>(c.hidden) * c.num_experts;
    end = b2 + c.hidden;
  }
};

// The tokens slot `s` of a range computes: all of its expert's, or the range's slice of
// them (a replica's, or the owner's part). Cut at the same fractions on every rank, so the
// owner's and the replicas' slices tile the expert's tokens.
struct TokenSlice {
  const int32_t* tokens;
  const float* gates;
  int n;
};
TokenSlice SliceOf(const internal::MoeRouting& routing, const std::vector<int32_t>& unit_ids,
                   const std::vector<std::pair<double, double>>& spans, int32_t s) {
  const int32_t e = unit_ids[s];
  const std::vector<int32_t>& tokens = routing.expert_tokens[e];
  const size_t n = tokens.size();
  size_t lo = 0, hi = n;
  if (!spans.empty()) {
    lo = static_cast<size_t>(std::llround(n * spans[s].first));
    hi = static_cast<size_t>(std::llround(n * spans[s].second));
  }
  return {tokens.data() + lo, routing.expert_gates[e].data() + lo, static_cast<int>(hi - lo)};
}

internal::MoeRouterOptions RouterOptions(const MoeConfig& c, double capacity_factor = 0.0) {
  return {.experts = c.num_experts,
          .top_k = c.top_k,
          .pre_softmax = c.pre_softmax,
          .aux_loss_coeff = c.aux_loss_coeff,
          .capacity_factor = capacity_factor};
}
}  // namespace

std::vector<float> MoeParams::Concat() const {
  std::vector<float> out;
  out.reserve(w1.size() + w3.size() + w2.size() + router.size() + b2.size());
  for (const auto* v : {&w1, &w3, &w2, &router, &b2}) out.insert(out.end(), v->begin(), v->end());
  return out;
}

MoeParams MoeParams::Split(const std::vector<float>& dense, const MoeConfig& config) {
  const MoeOffsets o(config);
  MoeParams p;
  if (dense.size() != o.end) return p;  // LoadDense names the sizes
  auto slice = [&](size_t from, size_t to) {
    return std::vector<float>(dense.begin() + from, dense.begin() + to);
  };
  p.w1 = slice(o.w1, o.w3);
  p.w3 = slice(o.w3, o.w2);
  p.w2 = slice(o.w2, o.router);
  p.router = slice(o.router, o.b2);
  p.b2 = slice(o.b2, o.end);
  return p;
}

ParallelMoe::ParallelMoe(TpGroup* group, const MoeConfig& config)
    : ParallelBlock(group, config.id, config.num_experts, config.hidden,
                    {{"w13t", 2 * static_cast<size_t>(config.ffn) * config.hidden},
                     {"w2", static_cast<size_t>(config.ffn) * config.hidden}},
                    // No running means: a pruned expert drops its tokens (see the header).
                    /*mean_unit_elems=*/1, config.units,
                    /*replicated_extra=*/static_cast<size_t>(config.hidden) * config.num_experts),
      config_(config) {}

ParallelMoe::~ParallelMoe() = default;

absl::StatusOr<std::unique_ptr<ParallelMoe>> ParallelMoe::Create(TpGroup* group,
                                                                 const MoeConfig& config) {
  if (group == nullptr) return absl::InvalidArgumentError("group is null");
  const std::string where = absl::StrCat("moe block ", config.id.value(), ": ");
  auto positive = [&](const char* name, int32_t v) -> absl::Status {
    if (v > 0) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(where, name, " ", v, " must be > 0"));
  };
  BALLAST_RETURN_IF_ERROR(positive("hidden", config.hidden));
  BALLAST_RETURN_IF_ERROR(positive("ffn", config.ffn));
  BALLAST_RETURN_IF_ERROR(positive("num_experts", config.num_experts));
  if (config.top_k < 1 || config.top_k > config.num_experts) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, "top_k ", config.top_k, " must be in [1, num_experts ", config.num_experts, "]"));
  }
  if (!(config.aux_loss_coeff >= 0.0f) || !std::isfinite(config.aux_loss_coeff)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "aux_loss_coeff ", config.aux_loss_coeff, " must be finite and >= 0"));
  }
  if (!internal::ProductAtMost({config.hidden, config.ffn, 2}) ||
      !internal::ProductAtMost({config.hidden, config.num_experts})) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "hidden x ffn or hidden x num_experts too large"));
  }
  std::unique_ptr<ParallelMoe> moe(new ParallelMoe(group, config));
  BALLAST_RETURN_IF_ERROR(moe->Init());
  return moe;
}

absl::Status ParallelMoe::LoadDense(const MoeParams& params) {
  const size_t expert = static_cast<size_t>(config_.hidden) * config_.ffn;
  const size_t experts = expert * config_.num_experts;
  const size_t router = static_cast<size_t>(config_.hidden) * config_.num_experts;
  if (params.w1.size() != experts || params.w3.size() != experts || params.w2.size() != experts ||
      params.router.size() != router || params.b2.size() != static_cast<size_t>(hidden())) {
    return absl::InvalidArgumentError(
        absl::StrCat("moe block ", id().value(), ": params sizes w1 ", params.w1.size(), " w3 ",
                     params.w3.size(), " w2 ", params.w2.size(), " router ", params.router.size(),
                     " b2 ", params.b2.size(), "; expected ", experts, ", ", experts, ", ", experts,
                     ", ", router, ", ", hidden()));
  }
  return LoadDenseVector(params.Concat());
}

double ParallelMoe::aux_loss() const { return routing_ ? routing_->aux_loss : 0.0; }

std::vector<int32_t> ParallelMoe::expert_tokens() const {
  return routing_ ? routing_->routed : std::vector<int32_t>(config_.num_experts, 0);
}

int64_t ParallelMoe::dropped_tokens() const { return routing_ ? routing_->dropped : 0; }

absl::Status ParallelMoe::SetRouterBias(const std::vector<float>& bias) {
  if (bias.empty()) {
    router_bias_ = Buffer();
    return absl::OkStatus();
  }
  if (bias.size() != static_cast<size_t>(config_.num_experts)) {
    return absl::InvalidArgumentError(absl::StrCat("moe block ", id().value(), ": router bias has ",
                                                   bias.size(), " values, expected ",
                                                   config_.num_experts, " (one per expert)"));
  }
  for (size_t e = 0; e < bias.size(); ++e) {
    if (!std::isfinite(bias[e])) {
      return absl::InvalidArgumentError(absl::StrCat("moe block ", id().value(), ": router bias[",
                                                     e, "] = ", bias[e], " is not finite"));
    }
  }
  BALLAST_RETURN_IF_ERROR(EnsureSize(router_bias_, bias.size()));
  compute().CopyFromHost(bias.data(), router_bias_.data(), bias.size());
  return absl::OkStatus();
}

size_t ParallelMoe::DenseSize() const { return MoeOffsets(config_).end; }

// The replicated parameters are [b2 (hidden) | router (hidden x experts)].
void ParallelMoe::UnitToDense(int32_t unit, const std::vector<const float*>& slabs,
                              const float* replicated, float* dense) const {
  const size_t h = config_.hidden, f = config_.ffn;
  const MoeOffsets o(config_);
  if (unit >= 0) {
    const size_t base = unit * h * f;
    for (size_t j = 0; j < f; ++j) {
      for (size_t i = 0; i < h; ++i) {
        dense[o.w1 + base + i * f + j] = slabs[kW13t][j * h + i];
        dense[o.w3 + base + i * f + j] = slabs[kW13t][(f + j) * h + i];
      }
    }
    std::copy(slabs[kW2], slabs[kW2] + f * h, dense + o.w2 + base);
  }
  if (replicated != nullptr) {
    std::copy(replicated, replicated + h, dense + o.b2);
    std::copy(replicated + h, replicated + h + h * config_.num_experts, dense + o.router);
  }
}

void ParallelMoe::DenseToUnit(int32_t unit, const float* dense, const std::vector<float*>& slabs,
                              float* replicated) const {
  const size_t h = config_.hidden, f = config_.ffn;
  const MoeOffsets o(config_);
  if (unit >= 0) {
    const size_t base = unit * h * f;
    for (size_t j = 0; j < f; ++j) {
      for (size_t i = 0; i < h; ++i) {
        slabs[kW13t][j * h + i] = dense[o.w1 + base + i * f + j];
        slabs[kW13t][(f + j) * h + i] = dense[o.w3 + base + i * f + j];
      }
    }
    std::copy(dense + o.w2 + base, dense + o.w2 + base + f * h, slabs[kW2]);
  }
  if (replicated != nullptr) {
    std::copy(dense + o.b2, dense + o.b2 + h, replicated);
    std::copy(dense + o.router, dense + o.router + h * config_.num_experts, replicated + h);
  }
}

absl::Status ParallelMoe::PrepareShape(int32_t batch, int32_t seq) {
  const int32_t widest = std::max({config_.hidden, 2 * config_.ffn, config_.num_experts});
  if (!internal::ProductAtMost({batch, seq, widest}) ||
      !internal::ProductAtMost({batch, seq, config_.num_experts, widest},
                               std::numeric_limits<int64_t>::max() / 8)) {
    return absl::InvalidArgumentError(
        absl::StrCat("moe block ", id().value(), ": batch ", batch, " x seq ", seq, " too large"));
  }
  return absl::OkStatus();
}

// Worst case: every expert of the range receives every token. Per token and expert: the
// pre-activations (gate and up), the activation and the expert's output (for dL/d gate);
// per token: two gather buffers and the row dots, shared by the range's experts.
std::vector<size_t> ParallelMoe::CacheSizes(int32_t units, int32_t batch, int32_t seq) const {
  const size_t t = static_cast<size_t>(batch) * seq, h = config_.hidden, f = config_.ffn;
  const size_t rows = t * units;
  return {rows * 2 * f, rows * f, rows * h, t * h, t * h, t};
}

absl::Status ParallelMoe::BeginForward(const float* x, int32_t batch, int32_t seq) {
  Compute& c = compute();
  const int32_t t = batch * seq, h = config_.hidden, e_count = config_.num_experts;
  const size_t n = static_cast<size_t>(t) * e_count;
  BALLAST_RETURN_IF_ERROR(EnsureSize(logits_, n));
  BALLAST_RETURN_IF_ERROR(EnsureSize(dgate_, n));
  BALLAST_RETURN_IF_ERROR(EnsureSize(dlogits_, n));
  // Rank 0's logits are the group's: GEMMs on different devices may round differently,
  // and routing must not differ between ranks.
  if (group_->rank().value() == 0) {
    c.Gemm(false, false, t, e_count, h, 1.0f, x, h, replicated() + h, e_count, 0.0f, logits_.data(),
           e_count);
    if (!router_bias_.empty()) {
      c.AddRowVector(logits_.data(), t, e_count, e_count, router_bias_.data());
    }
  } else {
    c.Fill(logits_.data(), 0.0f, n);
  }
  BALLAST_RETURN_IF_ERROR(TimedAllReduceSum(logits_.data(), n));
  std::vector<float> host(n);
  c.CopyToHost(logits_.data(), host.data(), n);
  // The plan's capacity cap applies here, before ranges are sliced: every rank drops the
  // same pairs, and the owner's and replicas' slices tile the kept tokens.
  routing_ = std::make_unique<internal::MoeRouting>(
      internal::Route(host.data(), t, RouterOptions(config_, capacity_factor())));
  // The router's load, known on the host already: pruned experts' tokens count, as they
  // were routed, and so do tokens over a capacity cap (the load is what the router chose;
  // tokens_computed counts what was kept). A recompute runs no BeginForward, so it is
  // never counted twice.
  CountForwardUnitTokens(routing_->routed);
  c.Fill(dgate_.data(), 0.0f, n);
  return absl::OkStatus();
}

void ParallelMoe::ForwardRange(const UnitRange& r, const float* x, int32_t batch, int32_t seq,
                               float beta, float* z) {
  Compute& c = compute();
  const int t = batch * seq, h = config_.hidden, f = config_.ffn;
  std::vector<Buffer>& cache = *r.cache;
  if (z != nullptr && beta == 0.0f) c.Fill(z, 0.0f, static_cast<size_t>(t) * h);
  size_t row = 0;  // the range's caches hold its experts' tokens one after another
  for (int32_t s = 0; s < r.units; ++s) {
    const auto [tokens, gates, n] = SliceOf(*routing_, r.unit_ids, r.spans, s);
    // The Forward's work, not a recompute's (null z): the speed signal divides
    // compute_seconds by the rows one Forward needs, as units_computed does for whole units.
    if (z != nullptr) CountTokensComputed(n);
    if (n == 0) continue;
    const float* w13 = r.params[kW13t] + static_cast<size_t>(s) * 2 * f * h;
    const float* w2 = r.params[kW2] + static_cast<size_t>(s) * f * h;
    float* pre = cache[kPre].data() + row * 2 * f;
    float* act = cache[kAct].data() + row * f;
    float* out = cache[kOut].data() + row * h;
    float* xs = cache[kScratchA].data();
    c.GatherRows(x, t, h, tokens, nullptr, n, h, xs, h);
    c.Gemm(false, true, n, 2 * f, h, 1.0f, xs, h, w13, h, 0.0f, pre, 2 * f);
    c.SwiGluForward(pre, act, n, 1, f);
    c.Gemm(false, false, n, h, f, 1.0f, act, f, w2, h, 0.0f, out, h);
    if (z != nullptr) {
      c.ScatterAddRows(out, h, tokens, gates, n, h, z, t, h);
    }
    row += n;
  }
}

void ParallelMoe::BackwardRange(const UnitRange& r, const float* x, const float* dz, int32_t batch,
                                int32_t seq, float beta, float grad_beta, float* dx) {
  Compute& c = compute();
  const int t = batch * seq, h = config_.hidden, f = config_.ffn, e_count = config_.num_experts;
  std::vector<Buffer>& cache = *r.cache;
  if (beta == 0.0f) c.Fill(dx, 0.0f, static_cast<size_t>(t) * h);
  float* a = cache[kScratchA].data();
  float* b = cache[kScratchB].data();
  float* dots = cache[kDots].data();
  size_t row = 0;
  for (int32_t s = 0; s < r.units; ++s) {
    const int32_t e = r.unit_ids[s];
    const auto [tokens, gates, n] = SliceOf(*routing_, r.unit_ids, r.spans, s);
    const float* w13 = r.params[kW13t] + static_cast<size_t>(s) * 2 * f * h;
    const float* w2 = r.params[kW2] + static_cast<size_t>(s) * f * h;
    float* g13 = r.grads[kW13t] + static_cast<size_t>(s) * 2 * f * h;
    float* g2 = r.grads[kW2] + static_cast<size_t>(s) * f * h;
    if (n == 0) {  // no tokens, no gradient: written as zero, or left to accumulate
      if (grad_beta == 0.0f) {
        c.Fill(g13, 0.0f, static_cast<size_t>(2) * f * h);
        c.Fill(g2, 0.0f, static_cast<size_t>(f) * h);
      }
      continue;
    }
    float* pre = cache[kPre].data() + row * 2 * f;
    float* act = cache[kAct].data() + row * f;
    const float* out = cache[kOut].data() + row * h;
    // dL/d gate = dy . E_e(x), into the tokens x experts matrix (column e).
    c.GatherRows(dz, t, h, tokens, nullptr, n, h, a, h);
    c.RowDots(out, h, a, h, n, h, dots);
    c.ScatterAddRows(dots, 1, tokens, nullptr, n, 1, dgate_.data() + e, t, e_count);
    // The expert's own backward, from gate * dy.
    c.GatherRows(dz, t, h, tokens, gates, n, h, a, h);
    c.Gemm(true, false, f, h, n, 1.0f, act, f, a, h, grad_beta, g2, h);
    c.Gemm(false, true, n, f, h, 1.0f, a, h, w2, h, 0.0f, act, f);  // d act, in place
    c.SwiGluBackward(pre, act, pre, n, 1, f);                       // d pre, in place
    c.GatherRows(x, t, h, tokens, nullptr, n, h, b, h);
    c.Gemm(true, false, 2 * f, h, n, 1.0f, pre, 2 * f, b, h, grad_beta, g13, h);
    c.Gemm(false, false, n, h, 2 * f, 1.0f, pre, 2 * f, w13, h, 0.0f, b, h);
    c.ScatterAddRows(b, h, tokens, nullptr, n, h, dx, t, h);
    row += n;
  }
}

absl::Status ParallelMoe::FinishBackward(const float* x, const float* /*dy*/, float* dx,
                                         float grad_beta) {
  Compute& c = compute();
  const int32_t t = routing_->tokens, h = config_.hidden, e_count = config_.num_experts;
  const size_t n = static_cast<size_t>(t) * e_count;
  // Every rank's experts added their tokens' dL/d gate; summed, every rank holds them all.
  BALLAST_RETURN_IF_ERROR(TimedAllReduceSum(dgate_.data(), n));
  std::vector<float> dgate(n), dlogits(n);
  c.CopyToHost(dgate_.data(), dgate.data(), n);
  internal::RouterBackward(*routing_, RouterOptions(config_), dgate.data(), aux_loss_scale_,
                           dlogits.data());
  c.CopyFromHost(dlogits.data(), dlogits_.data(), n);
  // The router's gradient, alike on every rank: x^T dlogits.
  c.Gemm(true, false, h, e_count, t, 1.0f, x, h, dlogits_.data(), e_count, grad_beta,
         replicated_grad() + h, e_count);
  // Its share of dx, once (rank 0), before dx's all-reduce.
  if (group_->rank().value() == 0) {
    c.Gemm(false, true, t, h, e_count, 1.0f, dlogits_.data(), e_count, replicated() + h, e_count,
           1.0f, dx, h);
  }
  return absl::OkStatus();
}

void ParallelMoe::ImputeRange(const UnitRange& /*range*/, const float* /*means*/, float* /*out*/) {
}  // a pruned expert drops its tokens

void ParallelMoe::InitDense(std::vector<float>& dense) const {
  const size_t h = config_.hidden, f = config_.ffn, e_count = config_.num_experts;
  const MoeOffsets o(config_);
  const uint64_t seed = config_seed();
  std::fill(dense.begin(), dense.end(), 0.0f);  // b2 starts at zero
  const float std_in = internal::XavierStd(h, f);
  internal::FillNormal(dense.data() + o.w1, e_count * h * f, std_in, seed, id().value(), 1);
  internal::FillNormal(dense.data() + o.w3, e_count * h * f, std_in, seed, id().value(), 3);
  internal::FillNormal(dense.data() + o.w2, e_count * h * f, internal::XavierStd(f, h), seed,
                       id().value(), 2);
  internal::FillNormal(dense.data() + o.router, h * e_count, internal::XavierStd(h, e_count), seed,
                       id().value(), 4);
}

}  // namespace ballast
