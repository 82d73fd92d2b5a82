#include "ballast/parallel_mlp.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "internal/checked_math.h"
#include "internal/init.h"

namespace ballast {
namespace {
// Sharded parameter indices, in the order of the specs below.
enum { kW1t = 0, kB1 = 1, kW2 = 2 };
}  // namespace

std::vector<float> MlpParams::Concat() const {
  std::vector<float> out;
  out.reserve(w1.size() + b1.size() + w3.size() + b3.size() + w2.size() + b2.size());
  for (const auto* v : {&w1, &b1, &w3, &b3, &w2, &b2}) out.insert(out.end(), v->begin(), v->end());
  return out;
}

MlpParams MlpParams::Split(const std::vector<float>& dense, int32_t hidden, int32_t intermediate,
                           MlpActivation activation) {
  const size_t hi = static_cast<size_t>(hidden) * intermediate, i = intermediate;
  const bool gated = activation == MlpActivation::kSwiGlu;
  MlpParams p;
  size_t at = 0;
  for (auto [v, n] : {std::pair{&p.w1, hi}, {&p.b1, i}, {&p.w3, gated ? hi : 0},
                      {&p.b3, gated ? i : 0}, {&p.w2, hi}, {&p.b2, static_cast<size_t>(hidden)}}) {
    v->assign(dense.begin() + at, dense.begin() + at + n);
    at += n;
  }
  return p;
}

namespace {
// Input-side rows per neuron: gate (and up, under SwiGLU).
size_t InputRows(const MlpConfig& config) {
  return config.activation == MlpActivation::kSwiGlu ? 2 : 1;
}

// Offsets of each dense parameter; see MlpParams.
struct MlpOffsets {
  size_t w1, b1, w3, b3, w2, b2;
  MlpOffsets(size_t h, size_t i, bool gated)
      : w1(0),
        b1(h * i),
        w3(b1 + i),
        b3(w3 + (gated ? h * i : 0)),
        w2(b3 + (gated ? i : 0)),
        b2(w2 + i * h) {}
};
}  // namespace

ParallelMlp::ParallelMlp(TpGroup* group, const MlpConfig& config)
    : ParallelBlock(group, config.id, config.intermediate / config.unit_size, config.hidden,
                    // W1 (and W3) are stored transposed so a unit's slab is contiguous rows
                    // (gate rows, then up rows): a range of units is then one row-major
                    // matrix for a single GEMM.
                    {{"w1t", InputRows(config) * config.unit_size * config.hidden},
                     {"b1", InputRows(config) * config.unit_size},
                     {"w2", static_cast<size_t>(config.unit_size) * config.hidden}},
                    config.unit_size, config.units),
      activation_(config.activation),
      intermediate_(config.intermediate),
      unit_size_(config.unit_size) {}

absl::StatusOr<std::unique_ptr<ParallelMlp>> ParallelMlp::Create(TpGroup* group,
                                                                 const MlpConfig& config) {
  if (group == nullptr) return absl::InvalidArgumentError("group is null");
  const std::string where = absl::StrCat("mlp block ", config.id.value(), ": ");
  if (config.hidden <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, "hidden ", config.hidden, " must be > 0"));
  }
  if (config.intermediate <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "intermediate ", config.intermediate, " must be > 0"));
  }
  if (config.unit_size <= 0 || config.intermediate % config.unit_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, "unit_size ", config.unit_size,
                                                   " must be > 0 and divide intermediate ",
                                                   config.intermediate));
  }
  if (config.activation != MlpActivation::kGelu && config.activation != MlpActivation::kSwiGlu) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, "activation ", static_cast<int>(config.activation), " is not gelu or swiglu"));
  }
  if (static_cast<int64_t>(config.hidden) * config.intermediate * 2 >
      std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(where, "hidden x intermediate too large"));
  }
  std::unique_ptr<ParallelMlp> mlp(new ParallelMlp(group, config));
  BALLAST_RETURN_IF_ERROR(mlp->Init());
  return mlp;
}

absl::Status ParallelMlp::LoadDense(const MlpParams& params) {
  const size_t hi = static_cast<size_t>(hidden()) * intermediate_;
  const size_t i = intermediate_, gated_hi = gated() ? hi : 0, gated_i = gated() ? i : 0;
  if (params.w1.size() != hi || params.b1.size() != i || params.w3.size() != gated_hi ||
      params.b3.size() != gated_i || params.w2.size() != hi ||
      params.b2.size() != static_cast<size_t>(hidden())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mlp block ", id().value(), ": params sizes w1 ", params.w1.size(), " b1 ",
        params.b1.size(), " w3 ", params.w3.size(), " b3 ", params.b3.size(), " w2 ",
        params.w2.size(), " b2 ", params.b2.size(), "; expected ", hi, ", ", i, ", ", gated_hi,
        ", ", gated_i, ", ", hi, ", ", hidden(), gated() ? "" : " (w3 and b3 are for swiglu)"));
  }
  return LoadDenseVector(params.Concat());
}

size_t ParallelMlp::DenseSize() const {
  return MlpOffsets(hidden(), intermediate_, gated()).b2 + hidden();
}

void ParallelMlp::UnitToDense(int32_t unit, const std::vector<const float*>& slabs,
                              const float* replicated, float* dense) const {
  const size_t h_dim = hidden(), i_dim = intermediate_, u_dim = unit_size_;
  const MlpOffsets o(h_dim, i_dim, gated());
  if (unit >= 0) {
    const size_t first = unit * u_dim;
    for (size_t j = 0; j < u_dim; ++j) {
      for (size_t h = 0; h < h_dim; ++h) {
        dense[o.w1 + h * i_dim + first + j] = slabs[kW1t][j * h_dim + h];
        if (gated()) dense[o.w3 + h * i_dim + first + j] = slabs[kW1t][(u_dim + j) * h_dim + h];
        dense[o.w2 + (first + j) * h_dim + h] = slabs[kW2][j * h_dim + h];
      }
      dense[o.b1 + first + j] = slabs[kB1][j];
      if (gated()) dense[o.b3 + first + j] = slabs[kB1][u_dim + j];
    }
  }
  if (replicated != nullptr) std::copy(replicated, replicated + h_dim, dense + o.b2);
}

void ParallelMlp::DenseToUnit(int32_t unit, const float* dense, const std::vector<float*>& slabs,
                              float* replicated) const {
  const size_t h_dim = hidden(), i_dim = intermediate_, u_dim = unit_size_;
  const MlpOffsets o(h_dim, i_dim, gated());
  if (unit >= 0) {
    const size_t first = unit * u_dim;
    for (size_t j = 0; j < u_dim; ++j) {
      for (size_t h = 0; h < h_dim; ++h) {
        slabs[kW1t][j * h_dim + h] = dense[o.w1 + h * i_dim + first + j];
        if (gated()) slabs[kW1t][(u_dim + j) * h_dim + h] = dense[o.w3 + h * i_dim + first + j];
        slabs[kW2][j * h_dim + h] = dense[o.w2 + (first + j) * h_dim + h];
      }
      slabs[kB1][j] = dense[o.b1 + first + j];
      if (gated()) slabs[kB1][u_dim + j] = dense[o.b3 + first + j];
    }
  }
  if (replicated != nullptr) std::copy(dense + o.b2, dense + o.b2 + h_dim, replicated);
}

absl::Status ParallelMlp::PrepareShape(int32_t batch, int32_t seq) {
  if (!internal::ProductAtMost({batch, seq, std::max(hidden(), 2 * intermediate_)})) {
    return absl::InvalidArgumentError(absl::StrCat("mlp block ", id().value(), ": batch ", batch,
                                                   " x seq ", seq, " too large"));
  }
  return absl::OkStatus();
}

std::vector<size_t> ParallelMlp::CacheSizes(int32_t units, int32_t batch, int32_t seq) const {
  const size_t n = static_cast<size_t>(batch) * seq * units * unit_size_;
  // Pre-activation (gate and up under SwiGLU; reused for its own gradient in backward) and
  // activation (reused for its gradient).
  return {gated() ? 2 * n : n, n};
}

// A range's pre-activations are tokens x (rows * n) with n = units * unit_size: per unit,
// unit_size gate columns then (SwiGLU) unit_size up columns, the order of the W1t slabs.
void ParallelMlp::ForwardRange(const UnitRange& r, const float* x, int32_t batch, int32_t seq,
                               float beta, float* z) {
  Compute& c = compute();
  const int t = batch * seq, h = hidden(), n = r.units * unit_size_;
  const int n_in = gated() ? 2 * n : n;
  float* pre = (*r.cache)[0].data();
  float* act = (*r.cache)[1].data();
  c.Gemm(false, true, t, n_in, h, 1.0f, x, h, r.params[kW1t], h, 0.0f, pre, n_in);
  c.AddRowVector(pre, t, n_in, n_in, r.params[kB1]);
  if (gated()) {
    c.SwiGluForward(pre, act, t, r.units, unit_size_);
  } else {
    c.GeluForward(pre, act, t, n, n);
  }
  if (z == nullptr) return;  // recomputing activations for backward
  c.Gemm(false, false, t, h, n, 1.0f, act, n, r.params[kW2], h, beta, z, h);
  if (r.mean_out != nullptr) c.ColumnSum(act, t, n, n, 1.0f / t, 0.0f, r.mean_out);
}

void ParallelMlp::BackwardRange(const UnitRange& r, const float* x, const float* dz,
                                int32_t batch, int32_t seq, float beta, float grad_beta,
                                float* dx) {
  Compute& c = compute();
  const int t = batch * seq, h = hidden(), n = r.units * unit_size_;
  const int n_in = gated() ? 2 * n : n;
  float* pre = (*r.cache)[0].data();
  float* act = (*r.cache)[1].data();
  c.Gemm(true, false, n, h, t, 1.0f, act, n, dz, h, grad_beta, r.grads[kW2], h);
  float* dact = act;  // the activation is no longer needed: reuse it for its gradient
  c.Gemm(false, true, t, n, h, 1.0f, dz, h, r.params[kW2], h, 0.0f, dact, n);
  float* dpre = gated() ? pre : act;  // the gradient w.r.t. the pre-activations, in place
  if (gated()) {
    c.SwiGluBackward(pre, dact, dpre, t, r.units, unit_size_);
  } else {
    c.GeluBackward(pre, dact, dpre, t, n, n);
  }
  c.Gemm(true, false, n_in, h, t, 1.0f, dpre, n_in, x, h, grad_beta, r.grads[kW1t], h);
  c.ColumnSum(dpre, t, n_in, n_in, 1.0f, grad_beta, r.grads[kB1]);
  c.Gemm(false, false, t, h, n_in, 1.0f, dpre, n_in, r.params[kW1t], h, beta, dx, h);
}

void ParallelMlp::ImputeRange(const UnitRange& r, const float* means, float* out) {
  const int h = hidden(), n = r.units * unit_size_;
  compute().Gemm(false, false, 1, h, n, 1.0f, means, n, r.params[kW2], h, 1.0f, out, h);
}

void ParallelMlp::InitDense(std::vector<float>& dense) const {
  const size_t h_dim = hidden(), i_dim = intermediate_;
  const MlpOffsets o(h_dim, i_dim, gated());
  const uint64_t seed = config_seed();
  std::fill(dense.begin(), dense.end(), 0.0f);  // biases start at zero
  const float std_in = internal::XavierStd(h_dim, i_dim);
  internal::FillNormal(dense.data() + o.w1, h_dim * i_dim, std_in, seed, id().value(), 1);
  internal::FillNormal(dense.data() + o.w2, h_dim * i_dim, internal::XavierStd(i_dim, h_dim),
                       seed, id().value(), 2);
  if (gated()) {
    internal::FillNormal(dense.data() + o.w3, h_dim * i_dim, std_in, seed, id().value(), 3);
  }
}

}  // namespace ballast
