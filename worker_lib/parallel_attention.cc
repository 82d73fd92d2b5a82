#include "ballast/parallel_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "internal/checked_math.h"
#include "internal/init.h"

namespace ballast {
namespace {
// Sharded parameter indices. A head's QKV slab is its q, k and v rows of the transposed
// projection (3 * head_dim rows of `hidden`), so a range of heads is one GEMM operand and
// the GEMM output holds, per head, [q | k | v] columns side by side.
enum { kWqkv = 0, kBqkv = 1, kWo = 2 };
// Activation caches, in CacheSizes order.
enum { kQkv = 0, kProbs = 1, kCtx = 2, kDCtx = 3, kDQkv = 4, kDScores = 5 };
}  // namespace

std::vector<float> AttentionParams::Concat() const {
  std::vector<float> out;
  for (const auto* v : {&wq, &wk, &wv, &bq, &bk, &bv, &wo, &bo}) {
    out.insert(out.end(), v->begin(), v->end());
  }
  return out;
}

AttentionParams AttentionParams::Split(const std::vector<float>& dense, int32_t hidden,
                                       int32_t num_heads, int32_t head_dim,
                                       int32_t num_query_groups) {
  const int32_t groups = num_query_groups > 0 ? num_query_groups : num_heads;
  const size_t a = static_cast<size_t>(num_heads) * head_dim, ha = a * hidden;
  const size_t kv = static_cast<size_t>(groups) * head_dim, hkv = kv * hidden;
  AttentionParams p;
  size_t at = 0;
  for (auto [v, n] : {std::pair{&p.wq, ha}, {&p.wk, hkv}, {&p.wv, hkv}, {&p.bq, a}, {&p.bk, kv},
                      {&p.bv, kv}, {&p.wo, ha}, {&p.bo, static_cast<size_t>(hidden)}}) {
    v->assign(dense.begin() + at, dense.begin() + at + n);
    at += n;
  }
  return p;
}

namespace {
int32_t GroupsOf(const AttentionConfig& config) {
  return config.num_query_groups > 0 ? config.num_query_groups : config.num_heads;
}
int32_t HeadsPerGroup(const AttentionConfig& config) {
  const int32_t groups = GroupsOf(config);
  return groups > 0 ? config.num_heads / groups : 0;
}
}  // namespace

ParallelAttention::ParallelAttention(TpGroup* group, const AttentionConfig& config)
    : ParallelBlock(
          group, config.id, GroupsOf(config), config.hidden,
          // A group's slab: its g query heads, then its K head, then its V head.
          {{"wqkv_t",
            (HeadsPerGroup(config) + 2) * static_cast<size_t>(config.head_dim) * config.hidden},
           {"bqkv", (HeadsPerGroup(config) + 2) * static_cast<size_t>(config.head_dim)},
           {"wo", HeadsPerGroup(config) * static_cast<size_t>(config.head_dim) * config.hidden}},
          HeadsPerGroup(config) * static_cast<size_t>(config.head_dim), config.units),
      head_dim_(config.head_dim),
      heads_per_group_(HeadsPerGroup(config)),
      causal_(config.causal),
      rotary_(config.rotary),
      rotary_base_(config.rotary_base) {}

absl::StatusOr<std::unique_ptr<ParallelAttention>> ParallelAttention::Create(
    TpGroup* group, const AttentionConfig& config) {
  if (group == nullptr) return absl::InvalidArgumentError("group is null");
  const std::string where = absl::StrCat("attention block ", config.id.value(), ": ");
  if (config.hidden <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, "hidden ", config.hidden, " must be > 0"));
  }
  if (config.num_heads <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "num_heads ", config.num_heads, " must be > 0"));
  }
  if (config.head_dim <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "head_dim ", config.head_dim, " must be > 0"));
  }
  if (config.num_query_groups < 0 ||
      (config.num_query_groups > 0 && config.num_heads % config.num_query_groups != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, "num_query_groups ", config.num_query_groups, " must divide num_heads ",
        config.num_heads, " (each K/V head serves a whole number of query heads)"));
  }
  if (config.rotary && config.head_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, "rotary needs an even head_dim (RoPE rotates pairs), got head_dim ",
        config.head_dim));
  }
  if (config.rotary && !(config.rotary_base > 1.0f && std::isfinite(config.rotary_base))) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "rotary_base ", config.rotary_base, " must be finite and > 1"));
  }
  if (!internal::ProductAtMost({3, config.num_heads, config.head_dim, config.hidden})) {
    return absl::InvalidArgumentError(absl::StrCat(where, "parameters too large"));
  }
  std::unique_ptr<ParallelAttention> attn(new ParallelAttention(group, config));
  BALLAST_RETURN_IF_ERROR(attn->Init());
  return attn;
}

// Sizes and offsets of each dense parameter; see AttentionParams.
struct AttentionOffsets {
  size_t a, kv, wq, wk, wv, bq, bk, bv, wo, bo;
  AttentionOffsets(size_t heads, size_t groups, size_t d, size_t h)
      : a(heads * d),
        kv(groups * d),
        wq(0),
        wk(a * h),
        wv(wk + kv * h),
        bq(wv + kv * h),
        bk(bq + a),
        bv(bk + kv),
        wo(bv + kv),
        bo(wo + a * h) {}
};

absl::Status ParallelAttention::LoadDense(const AttentionParams& p) {
  const AttentionOffsets o(num_heads(), num_query_groups(), head_dim_, hidden());
  const size_t ha = o.a * hidden(), hkv = o.kv * hidden(), h = hidden();
  if (p.wq.size() != ha || p.wk.size() != hkv || p.wv.size() != hkv || p.bq.size() != o.a ||
      p.bk.size() != o.kv || p.bv.size() != o.kv || p.wo.size() != ha || p.bo.size() != h) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attention block ", id().value(), ": params sizes wq/wk/wv ", p.wq.size(), "/",
        p.wk.size(), "/", p.wv.size(), " bq/bk/bv ", p.bq.size(), "/", p.bk.size(), "/",
        p.bv.size(), " wo ", p.wo.size(), " bo ", p.bo.size(), "; expected ", ha, "/", hkv, "/",
        hkv, ", ", o.a, "/", o.kv, "/", o.kv, ", ", ha, ", ", h));
  }
  return LoadDenseVector(p.Concat());
}

size_t ParallelAttention::DenseSize() const {
  const AttentionOffsets o(num_heads(), num_query_groups(), head_dim_, hidden());
  return o.bo + hidden();
}

namespace {
// Where row r of a unit's QKV slab lives in the dense layout: the dense column `col` of the
// matrix at `w` (row stride `ld`) and of the bias at `b`.
struct SlabRow {
  size_t w, b, ld, col;
};

SlabRow DenseRowOf(const AttentionOffsets& o, int32_t unit, size_t r, size_t g, size_t d) {
  if (r < g * d) return {o.wq, o.bq, o.a, unit * g * d + r};  // query heads of the group
  if (r < (g + 1) * d) return {o.wk, o.bk, o.kv, unit * d + (r - g * d)};
  return {o.wv, o.bv, o.kv, unit * d + (r - (g + 1) * d)};
}
}  // namespace

void ParallelAttention::UnitToDense(int32_t unit, const std::vector<const float*>& slabs,
                                    const float* replicated, float* dense) const {
  const size_t d = head_dim_, g = heads_per_group_, h_dim = hidden();
  const AttentionOffsets o(num_heads(), num_query_groups(), d, h_dim);
  if (unit >= 0) {
    for (size_t r = 0; r < (g + 2) * d; ++r) {
      const SlabRow at = DenseRowOf(o, unit, r, g, d);
      for (size_t h = 0; h < h_dim; ++h) dense[at.w + h * at.ld + at.col] = slabs[kWqkv][r * h_dim + h];
      dense[at.b + at.col] = slabs[kBqkv][r];
    }
    const size_t first = unit * g * d;
    for (size_t r = 0; r < g * d; ++r) {
      for (size_t h = 0; h < h_dim; ++h) {
        dense[o.wo + (first + r) * h_dim + h] = slabs[kWo][r * h_dim + h];
      }
    }
  }
  if (replicated != nullptr) std::copy(replicated, replicated + h_dim, dense + o.bo);
}

void ParallelAttention::DenseToUnit(int32_t unit, const float* dense,
                                    const std::vector<float*>& slabs, float* replicated) const {
  const size_t d = head_dim_, g = heads_per_group_, h_dim = hidden();
  const AttentionOffsets o(num_heads(), num_query_groups(), d, h_dim);
  if (unit >= 0) {
    for (size_t r = 0; r < (g + 2) * d; ++r) {
      const SlabRow at = DenseRowOf(o, unit, r, g, d);
      for (size_t h = 0; h < h_dim; ++h) slabs[kWqkv][r * h_dim + h] = dense[at.w + h * at.ld + at.col];
      slabs[kBqkv][r] = dense[at.b + at.col];
    }
    const size_t first = unit * g * d;
    for (size_t r = 0; r < g * d; ++r) {
      for (size_t h = 0; h < h_dim; ++h) {
        slabs[kWo][r * h_dim + h] = dense[o.wo + (first + r) * h_dim + h];
      }
    }
  }
  if (replicated != nullptr) std::copy(dense + o.bo, dense + o.bo + h_dim, replicated);
}

absl::Status ParallelAttention::PrepareShape(int32_t batch, int32_t seq) {
  // Every buffer index (QKV, attention probabilities, activations) must fit an int.
  if (!internal::ProductAtMost({batch, seq, heads_per_group_ + 2, num_units(), head_dim_}) ||
      !internal::ProductAtMost({batch, seq, seq, num_heads()}) ||
      !internal::ProductAtMost({batch, seq, hidden()})) {
    return absl::InvalidArgumentError(absl::StrCat("attention block ", id().value(), ": batch ",
                                                   batch, " x seq ", seq, " too large"));
  }
  return rotary_ ? EnsureRotaryTables(seq) : absl::OkStatus();
}

absl::Status ParallelAttention::EnsureRotaryTables(int32_t seq) {
  if (seq <= rotary_seq_) return absl::OkStatus();  // a longer table serves shorter sequences
  const int32_t half = head_dim_ / 2;
  std::vector<float> cos(static_cast<size_t>(seq) * half), sin(cos.size());
  for (int32_t p = 0; p < seq; ++p) {
    for (int32_t j = 0; j < half; ++j) {
      // theta_j = base^(-2j/d), as in RoFormer and Llama.
      const double angle = p * std::pow(static_cast<double>(rotary_base_), -2.0 * j / head_dim_);
      cos[static_cast<size_t>(p) * half + j] = static_cast<float>(std::cos(angle));
      sin[static_cast<size_t>(p) * half + j] = static_cast<float>(std::sin(angle));
    }
  }
  BALLAST_ASSIGN_OR_RETURN(rotary_cos_, compute().Allocate(cos.size()));
  BALLAST_ASSIGN_OR_RETURN(rotary_sin_, compute().Allocate(sin.size()));
  compute().CopyFromHost(cos.data(), rotary_cos_.data(), cos.size());
  compute().CopyFromHost(sin.data(), rotary_sin_.data(), sin.size());
  rotary_seq_ = seq;
  return absl::OkStatus();
}

std::vector<size_t> ParallelAttention::CacheSizes(int32_t units, int32_t batch,
                                                  int32_t seq) const {
  const size_t t = static_cast<size_t>(batch) * seq, g = heads_per_group_, d = head_dim_;
  const size_t qkv = t * (g + 2) * d * units, ctx = t * g * d * units;
  const size_t probs = static_cast<size_t>(batch) * units * g * seq * seq;
  return {qkv, probs, ctx, ctx, qkv, probs};
}

// Column layout of one range's QKV activations (tokens x (g + 2) * d * units): unit j's
// query head i at j * (g + 2) * d + i * d, its K at ... + g * d, its V at ... + (g + 1) * d.
// Probabilities: [sample][unit][query head][s][s]; context: tokens x (units * g * d), query
// head (j, i) at columns (j * g + i) * d, the order of Wo's rows.
void ParallelAttention::ForwardRange(const UnitRange& r, const float* x, int32_t batch,
                                     int32_t seq, float beta, float* z) {
  Compute& c = compute();
  const int t = batch * seq, h = hidden(), d = head_dim_, g = heads_per_group_, k = r.units;
  const int s = seq, unit_cols = (g + 2) * d, ld_qkv = unit_cols * k, ld_ctx = g * d * k;
  const int64_t per_sample_qkv = static_cast<int64_t>(s) * ld_qkv;
  const int64_t per_sample_probs = static_cast<int64_t>(k) * g * s * s;
  float* qkv = (*r.cache)[kQkv].data();
  float* probs = (*r.cache)[kProbs].data();
  float* ctx = (*r.cache)[kCtx].data();
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));

  c.Gemm(false, true, t, ld_qkv, h, 1.0f, x, h, r.params[kWqkv], h, 0.0f, qkv, ld_qkv);
  c.AddRowVector(qkv, t, ld_qkv, ld_qkv, r.params[kBqkv]);
  if (rotary_) {  // the g query heads and the K head of every unit: g + 1 heads from its start
    c.Rotary(qkv, t, s, ld_qkv, k, unit_cols, g + 1, d, rotary_cos_.data(), rotary_sin_.data(),
             false);
  }
  for (int j = 0; j < k; ++j) {  // scores = Q K^T, batched over samples
    const float* key = qkv + j * unit_cols + g * d;
    for (int i = 0; i < g; ++i) {
      c.GemmStridedBatched(false, true, s, s, d, 1.0f, qkv + j * unit_cols + i * d, ld_qkv,
                           per_sample_qkv, key, ld_qkv, per_sample_qkv, 0.0f,
                           probs + static_cast<int64_t>(j * g + i) * s * s, s, per_sample_probs,
                           batch);
    }
  }
  c.SoftmaxRows(probs, batch * k * g * s, s, scale, causal_);
  for (int j = 0; j < k; ++j) {  // ctx = P V
    const float* value = qkv + j * unit_cols + (g + 1) * d;
    for (int i = 0; i < g; ++i) {
      c.GemmStridedBatched(false, false, s, d, s, 1.0f,
                           probs + static_cast<int64_t>(j * g + i) * s * s, s, per_sample_probs,
                           value, ld_qkv, per_sample_qkv, 0.0f, ctx + (j * g + i) * d, ld_ctx,
                           static_cast<int64_t>(s) * ld_ctx, batch);
    }
  }
  if (z == nullptr) return;  // recomputing activations for backward
  c.Gemm(false, false, t, h, ld_ctx, 1.0f, ctx, ld_ctx, r.params[kWo], h, beta, z, h);
  if (r.mean_out != nullptr) c.ColumnSum(ctx, t, ld_ctx, ld_ctx, 1.0f / t, 0.0f, r.mean_out);
}

void ParallelAttention::BackwardRange(const UnitRange& r, const float* x, const float* dz,
                                      int32_t batch, int32_t seq, float beta, float grad_beta,
                                      float* dx) {
  Compute& c = compute();
  const int t = batch * seq, h = hidden(), d = head_dim_, g = heads_per_group_, k = r.units;
  const int s = seq, unit_cols = (g + 2) * d, ld_qkv = unit_cols * k, ld_ctx = g * d * k;
  const int64_t per_sample_qkv = static_cast<int64_t>(s) * ld_qkv;
  const int64_t per_sample_ctx = static_cast<int64_t>(s) * ld_ctx;
  const int64_t per_sample_probs = static_cast<int64_t>(k) * g * s * s;
  const float* qkv = (*r.cache)[kQkv].data();
  const float* probs = (*r.cache)[kProbs].data();
  const float* ctx = (*r.cache)[kCtx].data();
  float* dctx = (*r.cache)[kDCtx].data();
  float* dqkv = (*r.cache)[kDQkv].data();
  float* dscores = (*r.cache)[kDScores].data();
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));

  c.Gemm(true, false, ld_ctx, h, t, 1.0f, ctx, ld_ctx, dz, h, grad_beta, r.grads[kWo], h);
  c.Gemm(false, true, t, ld_ctx, h, 1.0f, dz, h, r.params[kWo], h, 0.0f, dctx, ld_ctx);
  for (int j = 0; j < k; ++j) {
    const float* value = qkv + j * unit_cols + (g + 1) * d;
    float* dvalue = dqkv + j * unit_cols + (g + 1) * d;
    for (int i = 0; i < g; ++i) {
      const int64_t pj = static_cast<int64_t>(j * g + i) * s * s;
      const float* dctx_head = dctx + (j * g + i) * d;
      // dP = dctx V^T; dV = sum over the group's query heads of P^T dctx.
      c.GemmStridedBatched(false, true, s, s, d, 1.0f, dctx_head, ld_ctx, per_sample_ctx, value,
                           ld_qkv, per_sample_qkv, 0.0f, dscores + pj, s, per_sample_probs,
                           batch);
      c.GemmStridedBatched(true, false, s, d, s, 1.0f, probs + pj, s, per_sample_probs, dctx_head,
                           ld_ctx, per_sample_ctx, i == 0 ? 0.0f : 1.0f, dvalue, ld_qkv,
                           per_sample_qkv, batch);
    }
  }
  c.SoftmaxBackwardRows(probs, dscores, batch * k * g * s, s, scale);
  for (int j = 0; j < k; ++j) {
    const float* key = qkv + j * unit_cols + g * d;
    float* dkey = dqkv + j * unit_cols + g * d;
    for (int i = 0; i < g; ++i) {
      const int64_t pj = static_cast<int64_t>(j * g + i) * s * s;
      // dQ = dS K; dK = sum over the group's query heads of dS^T Q.
      c.GemmStridedBatched(false, false, s, d, s, 1.0f, dscores + pj, s, per_sample_probs, key,
                           ld_qkv, per_sample_qkv, 0.0f, dqkv + j * unit_cols + i * d, ld_qkv,
                           per_sample_qkv, batch);
      c.GemmStridedBatched(true, false, s, d, s, 1.0f, dscores + pj, s, per_sample_probs,
                           qkv + j * unit_cols + i * d, ld_qkv, per_sample_qkv,
                           i == 0 ? 0.0f : 1.0f, dkey, ld_qkv, per_sample_qkv, batch);
    }
  }
  if (rotary_) {  // back through the rotation: its transpose, the inverse rotation
    c.Rotary(dqkv, t, s, ld_qkv, k, unit_cols, g + 1, d, rotary_cos_.data(), rotary_sin_.data(),
             true);
  }
  c.Gemm(true, false, ld_qkv, h, t, 1.0f, dqkv, ld_qkv, x, h, grad_beta, r.grads[kWqkv], h);
  c.ColumnSum(dqkv, t, ld_qkv, ld_qkv, 1.0f, grad_beta, r.grads[kBqkv]);
  c.Gemm(false, false, t, h, ld_qkv, 1.0f, dqkv, ld_qkv, r.params[kWqkv], h, beta, dx, h);
}

void ParallelAttention::ImputeRange(const UnitRange& r, const float* means, float* out) {
  const int h = hidden(), n = r.units * heads_per_group_ * head_dim_;
  compute().Gemm(false, false, 1, h, n, 1.0f, means, n, r.params[kWo], h, 1.0f, out, h);
}

void ParallelAttention::InitDense(std::vector<float>& dense) const {
  const size_t h_dim = hidden();
  const AttentionOffsets o(num_heads(), num_query_groups(), head_dim_, h_dim);
  std::fill(dense.begin(), dense.end(), 0.0f);
  internal::FillNormal(dense.data() + o.wq, o.a * h_dim, internal::XavierStd(h_dim, o.a),
                       config_seed(), id().value(), 1);
  internal::FillNormal(dense.data() + o.wk, o.kv * h_dim, internal::XavierStd(h_dim, o.kv),
                       config_seed(), id().value(), 2);
  internal::FillNormal(dense.data() + o.wv, o.kv * h_dim, internal::XavierStd(h_dim, o.kv),
                       config_seed(), id().value(), 3);
  internal::FillNormal(dense.data() + o.wo, o.a * h_dim, internal::XavierStd(o.a, h_dim),
                       config_seed(), id().value(), 4);
}

}  // namespace ballast
