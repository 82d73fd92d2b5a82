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
                                       int32_t num_heads, int32_t head_dim) {
  const size_t a = static_cast<size_t>(num_heads) * head_dim, ha = a * hidden;
  AttentionParams p;
  size_t at = 0;
  for (auto [v, n] : {std::pair{&p.wq, ha}, {&p.wk, ha}, {&p.wv, ha}, {&p.bq, a}, {&p.bk, a},
                      {&p.bv, a}, {&p.wo, ha}, {&p.bo, static_cast<size_t>(hidden)}}) {
    v->assign(dense.begin() + at, dense.begin() + at + n);
    at += n;
  }
  return p;
}

ParallelAttention::ParallelAttention(TpGroup* group, const AttentionConfig& config)
    : ParallelBlock(group, config.id, config.num_heads, config.hidden,
                    {{"wqkv_t", 3 * static_cast<size_t>(config.head_dim) * config.hidden},
                     {"bqkv", 3 * static_cast<size_t>(config.head_dim)},
                     {"wo", static_cast<size_t>(config.head_dim) * config.hidden}},
                    config.head_dim, config.units),
      head_dim_(config.head_dim) {}

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
  if (!internal::ProductAtMost({3, config.num_heads, config.head_dim, config.hidden})) {
    return absl::InvalidArgumentError(absl::StrCat(where, "parameters too large"));
  }
  std::unique_ptr<ParallelAttention> attn(new ParallelAttention(group, config));
  BALLAST_RETURN_IF_ERROR(attn->Init());
  return attn;
}

absl::Status ParallelAttention::LoadDense(const AttentionParams& p) {
  const size_t a = static_cast<size_t>(num_heads()) * head_dim_, ha = a * hidden();
  const size_t h = hidden();
  if (p.wq.size() != ha || p.wk.size() != ha || p.wv.size() != ha || p.bq.size() != a ||
      p.bk.size() != a || p.bv.size() != a || p.wo.size() != ha || p.bo.size() != h) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attention block ", id().value(), ": params sizes wq/wk/wv ", p.wq.size(), "/",
        p.wk.size(), "/", p.wv.size(), " bq/bk/bv ", p.bq.size(), "/", p.bk.size(), "/",
        p.bv.size(), " wo ", p.wo.size(), " bo ", p.bo.size(), "; expected ", ha, ", ", a, ", ",
        ha, ", ", h));
  }
  return LoadDenseVector(p.Concat());
}

size_t ParallelAttention::DenseSize() const {
  const size_t a = static_cast<size_t>(num_heads()) * head_dim_;
  return 4 * a * hidden() + 3 * a + hidden();
}

// Offsets of each dense parameter; see AttentionParams.
struct AttentionOffsets {
  size_t a, wq, wk, wv, bq, bk, bv, wo, bo;
  AttentionOffsets(size_t heads, size_t d, size_t h)
      : a(heads * d),
        wq(0),
        wk(a * h),
        wv(2 * a * h),
        bq(3 * a * h),
        bk(bq + a),
        bv(bk + a),
        wo(bv + a),
        bo(wo + a * h) {}
};

void ParallelAttention::UnitToDense(int32_t unit, const std::vector<const float*>& slabs,
                                    const float* replicated, float* dense) const {
  const size_t d = head_dim_, h_dim = hidden();
  const AttentionOffsets o(num_heads(), d, h_dim);
  if (unit >= 0) {
    const size_t first = unit * d;
    const size_t w_at[3] = {o.wq, o.wk, o.wv}, b_at[3] = {o.bq, o.bk, o.bv};
    for (size_t part = 0; part < 3; ++part) {
      for (size_t r = 0; r < d; ++r) {
        for (size_t h = 0; h < h_dim; ++h) {
          dense[w_at[part] + h * o.a + first + r] = slabs[kWqkv][(part * d + r) * h_dim + h];
        }
        dense[b_at[part] + first + r] = slabs[kBqkv][part * d + r];
      }
    }
    for (size_t r = 0; r < d; ++r) {
      for (size_t h = 0; h < h_dim; ++h) {
        dense[o.wo + (first + r) * h_dim + h] = slabs[kWo][r * h_dim + h];
      }
    }
  }
  if (replicated != nullptr) std::copy(replicated, replicated + h_dim, dense + o.bo);
}

void ParallelAttention::DenseToUnit(int32_t unit, const float* dense,
                                    const std::vector<float*>& slabs, float* replicated) const {
  const size_t d = head_dim_, h_dim = hidden();
  const AttentionOffsets o(num_heads(), d, h_dim);
  if (unit >= 0) {
    const size_t first = unit * d;
    const size_t w_at[3] = {o.wq, o.wk, o.wv}, b_at[3] = {o.bq, o.bk, o.bv};
    for (size_t part = 0; part < 3; ++part) {
      for (size_t r = 0; r < d; ++r) {
        for (size_t h = 0; h < h_dim; ++h) {
          slabs[kWqkv][(part * d + r) * h_dim + h] = dense[w_at[part] + h * o.a + first + r];
        }
        slabs[kBqkv][part * d + r] = dense[b_at[part] + first + r];
      }
    }
    for (size_t r = 0; r < d; ++r) {
      for (size_t h = 0; h < h_dim; ++h) {
        slabs[kWo][r * h_dim + h] = dense[o.wo + (first + r) * h_dim + h];
      }
    }
  }
  if (replicated != nullptr) std::copy(dense + o.bo, dense + o.bo + h_dim, replicated);
}

absl::Status ParallelAttention::ValidateShape(int32_t batch, int32_t seq) const {
  // Every buffer index (QKV, attention probabilities, activations) must fit an int.
  if (!internal::ProductAtMost({batch, seq, 3, num_heads(), head_dim_}) ||
      !internal::ProductAtMost({batch, seq, seq, num_heads()}) ||
      !internal::ProductAtMost({batch, seq, hidden()})) {
    return absl::InvalidArgumentError(absl::StrCat("attention block ", id().value(), ": batch ",
                                                   batch, " x seq ", seq, " too large"));
  }
  return absl::OkStatus();
}

std::vector<size_t> ParallelAttention::CacheSizes(int32_t units, int32_t batch,
                                                  int32_t seq) const {
  const size_t t = static_cast<size_t>(batch) * seq, dk = static_cast<size_t>(head_dim_) * units;
  const size_t probs = static_cast<size_t>(batch) * units * seq * seq;
  return {t * 3 * dk, probs, t * dk, t * dk, t * 3 * dk, probs};
}

void ParallelAttention::ForwardRange(const UnitRange& r, const float* x, int32_t batch,
                                     int32_t seq, float beta, float* z) {
  Compute& c = compute();
  const int t = batch * seq, h = hidden(), d = head_dim_, k = r.units, s = seq;
  const int dk = d * k, ld_qkv = 3 * dk;
  const int64_t per_sample_qkv = static_cast<int64_t>(s) * ld_qkv;
  const int64_t per_sample_probs = static_cast<int64_t>(k) * s * s;  // probs: [b][head][s][s]
  float* qkv = (*r.cache)[kQkv].data();
  float* probs = (*r.cache)[kProbs].data();
  float* ctx = (*r.cache)[kCtx].data();
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));

  c.Gemm(false, true, t, ld_qkv, h, 1.0f, x, h, r.params[kWqkv], h, 0.0f, qkv, ld_qkv);
  c.AddRowVector(qkv, t, ld_qkv, ld_qkv, r.params[kBqkv]);
  for (int j = 0; j < k; ++j) {  // scores = Q K^T, batched over samples
    c.GemmStridedBatched(false, true, s, s, d, 1.0f, qkv + j * 3 * d, ld_qkv, per_sample_qkv,
                         qkv + j * 3 * d + d, ld_qkv, per_sample_qkv, 0.0f,
                         probs + static_cast<int64_t>(j) * s * s, s, per_sample_probs, batch);
  }
  c.SoftmaxRows(probs, batch * k * s, s, scale);
  for (int j = 0; j < k; ++j) {  // ctx = P V
    c.GemmStridedBatched(false, false, s, d, s, 1.0f, probs + static_cast<int64_t>(j) * s * s, s,
                         per_sample_probs, qkv + j * 3 * d + 2 * d, ld_qkv, per_sample_qkv, 0.0f,
                         ctx + j * d, dk, static_cast<int64_t>(s) * dk, batch);
  }
  c.Gemm(false, false, t, h, dk, 1.0f, ctx, dk, r.params[kWo], h, beta, z, h);
  if (r.mean_out != nullptr) c.ColumnSum(ctx, t, dk, dk, 1.0f / t, 0.0f, r.mean_out);
}

void ParallelAttention::BackwardRange(const UnitRange& r, const float* x, const float* dz,
                                      int32_t batch, int32_t seq, float beta, float* dx) {
  Compute& c = compute();
  const int t = batch * seq, h = hidden(), d = head_dim_, k = r.units, s = seq;
  const int dk = d * k, ld_qkv = 3 * dk;
  const int64_t per_sample_qkv = static_cast<int64_t>(s) * ld_qkv;
  const int64_t per_sample_ctx = static_cast<int64_t>(s) * dk;
  const int64_t per_sample_probs = static_cast<int64_t>(k) * s * s;
  const float* qkv = (*r.cache)[kQkv].data();
  const float* probs = (*r.cache)[kProbs].data();
  const float* ctx = (*r.cache)[kCtx].data();
  float* dctx = (*r.cache)[kDCtx].data();
  float* dqkv = (*r.cache)[kDQkv].data();
  float* dscores = (*r.cache)[kDScores].data();
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));

  c.Gemm(true, false, dk, h, t, 1.0f, ctx, dk, dz, h, 0.0f, r.grads[kWo], h);
  c.Gemm(false, true, t, dk, h, 1.0f, dz, h, r.params[kWo], h, 0.0f, dctx, dk);
  for (int j = 0; j < k; ++j) {
    const int64_t pj = static_cast<int64_t>(j) * s * s;
    // dP = dctx V^T; dV = P^T dctx.
    c.GemmStridedBatched(false, true, s, s, d, 1.0f, dctx + j * d, dk, per_sample_ctx,
                         qkv + j * 3 * d + 2 * d, ld_qkv, per_sample_qkv, 0.0f, dscores + pj, s,
                         per_sample_probs, batch);
    c.GemmStridedBatched(true, false, s, d, s, 1.0f, probs + pj, s, per_sample_probs,
                         dctx + j * d, dk, per_sample_ctx, 0.0f, dqkv + j * 3 * d + 2 * d, ld_qkv,
                         per_sample_qkv, batch);
  }
  c.SoftmaxBackwardRows(probs, dscores, batch * k * s, s, scale);
  for (int j = 0; j < k; ++j) {
    const int64_t pj = static_cast<int64_t>(j) * s * s;
    // dQ = dS K; dK = dS^T Q.
    c.GemmStridedBatched(false, false, s, d, s, 1.0f, dscores + pj, s, per_sample_probs,
                         qkv + j * 3 * d + d, ld_qkv, per_sample_qkv, 0.0f, dqkv + j * 3 * d,
                         ld_qkv, per_sample_qkv, batch);
    c.GemmStridedBatched(true, false, s, d, s, 1.0f, dscores + pj, s, per_sample_probs,
                         qkv + j * 3 * d, ld_qkv, per_sample_qkv, 0.0f, dqkv + j * 3 * d + d,
                         ld_qkv, per_sample_qkv, batch);
  }
  c.Gemm(true, false, ld_qkv, h, t, 1.0f, dqkv, ld_qkv, x, h, 0.0f, r.grads[kWqkv], h);
  c.ColumnSum(dqkv, t, ld_qkv, ld_qkv, 1.0f, 0.0f, r.grads[kBqkv]);
  c.Gemm(false, false, t, h, ld_qkv, 1.0f, dqkv, ld_qkv, r.params[kWqkv], h, beta, dx, h);
}

void ParallelAttention::ImputeRange(const UnitRange& r, const float* means, float* out) {
  const int h = hidden(), n = r.units * head_dim_;
  compute().Gemm(false, false, 1, h, n, 1.0f, means, n, r.params[kWo], h, 1.0f, out, h);
}

void ParallelAttention::InitDense(std::vector<float>& dense) const {
  const size_t d = head_dim_, h_dim = hidden();
  const AttentionOffsets o(num_heads(), d, h_dim);
  std::fill(dense.begin(), dense.end(), 0.0f);
  const float std_in = internal::XavierStd(h_dim, o.a);
  int tag = 1;
  for (size_t at : {o.wq, o.wk, o.wv}) {
    internal::FillNormal(dense.data() + at, o.a * h_dim, std_in, config_seed(), id().value(),
                         tag++);
  }
  internal::FillNormal(dense.data() + o.wo, o.a * h_dim, internal::XavierStd(o.a, h_dim),
                       config_seed(), id().value(), tag);
}

}  // namespace ballast
