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
  out.reserve(w1.size() + b1.size() + w2.size() + b2.size());
  for (const auto* v : {&w1, &b1, &w2, &b2}) out.insert(out.end(), v->begin(), v->end());
  return out;
}

MlpParams MlpParams::Split(const std::vector<float>& dense, int32_t hidden,
                           int32_t intermediate) {
  MlpParams p;
  const size_t hi = static_cast<size_t>(hidden) * intermediate;
  auto it = dense.begin();
  p.w1.assign(it, it + hi);
  p.b1.assign(it + hi, it + hi + intermediate);
  p.w2.assign(it + hi + intermediate, it + 2 * hi + intermediate);
  p.b2.assign(it + 2 * hi + intermediate, it + 2 * hi + intermediate + hidden);
  return p;
}

ParallelMlp::ParallelMlp(TpGroup* group, const MlpConfig& config)
    : ParallelBlock(group, config.id, config.intermediate / config.unit_size, config.hidden,
                    // W1 is stored transposed so a unit's slab is unit_size contiguous rows:
                    // a range of units is then one row-major matrix for a single GEMM.
                    {{"w1t", static_cast<size_t>(config.unit_size) * config.hidden},
                     {"b1", static_cast<size_t>(config.unit_size)},
                     {"w2", static_cast<size_t>(config.unit_size) * config.hidden}},
                    config.unit_size, config.units),
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
  if (static_cast<int64_t>(config.hidden) * config.intermediate >
      std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(where, "hidden x intermediate too large"));
  }
  std::unique_ptr<ParallelMlp> mlp(new ParallelMlp(group, config));
  BALLAST_RETURN_IF_ERROR(mlp->Init());
  return mlp;
}

absl::Status ParallelMlp::LoadDense(const MlpParams& params) {
  const size_t hi = static_cast<size_t>(hidden()) * intermediate_;
  if (params.w1.size() != hi || params.b1.size() != static_cast<size_t>(intermediate_) ||
      params.w2.size() != hi || params.b2.size() != static_cast<size_t>(hidden())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mlp block ", id().value(), ": params sizes w1 ", params.w1.size(), " b1 ",
        params.b1.size(), " w2 ", params.w2.size(), " b2 ", params.b2.size(), "; expected ", hi,
        ", ", intermediate_, ", ", hi, ", ", hidden()));
  }
  return LoadDenseVector(params.Concat());
}

size_t ParallelMlp::DenseSize() const {
  return 2 * static_cast<size_t>(hidden()) * intermediate_ + intermediate_ + hidden();
}

void ParallelMlp::UnitToDense(int32_t unit, const std::vector<const float*>& slabs,
                              const float* replicated, float* dense) const {
  const size_t h_dim = hidden(), i_dim = intermediate_, u_dim = unit_size_;
  const size_t b1_at = h_dim * i_dim, w2_at = b1_at + i_dim, b2_at = w2_at + i_dim * h_dim;
  if (unit >= 0) {
    const size_t first = unit * u_dim;
    for (size_t j = 0; j < u_dim; ++j) {
      for (size_t h = 0; h < h_dim; ++h) {
        dense[h * i_dim + first + j] = slabs[kW1t][j * h_dim + h];
        dense[w2_at + (first + j) * h_dim + h] = slabs[kW2][j * h_dim + h];
      }
      dense[b1_at + first + j] = slabs[kB1][j];
    }
  }
  if (replicated != nullptr) std::copy(replicated, replicated + h_dim, dense + b2_at);
}

void ParallelMlp::DenseToUnit(int32_t unit, const float* dense, const std::vector<float*>& slabs,
                              float* replicated) const {
  const size_t h_dim = hidden(), i_dim = intermediate_, u_dim = unit_size_;
  const size_t b1_at = h_dim * i_dim, w2_at = b1_at + i_dim, b2_at = w2_at + i_dim * h_dim;
  if (unit >= 0) {
    const size_t first = unit * u_dim;
    for (size_t j = 0; j < u_dim; ++j) {
      for (size_t h = 0; h < h_dim; ++h) {
        slabs[kW1t][j * h_dim + h] = dense[h * i_dim + first + j];
        slabs[kW2][j * h_dim + h] = dense[w2_at + (first + j) * h_dim + h];
      }
      slabs[kB1][j] = dense[b1_at + first + j];
    }
  }
  if (replicated != nullptr) std::copy(dense + b2_at, dense + b2_at + h_dim, replicated);
}

absl::Status ParallelMlp::ValidateShape(int32_t batch, int32_t seq) const {
  if (!internal::ProductAtMost({batch, seq, std::max(hidden(), intermediate_)})) {
    return absl::InvalidArgumentError(absl::StrCat("mlp block ", id().value(), ": batch ", batch,
                                                   " x seq ", seq, " too large"));
  }
  return absl::OkStatus();
}

std::vector<size_t> ParallelMlp::CacheSizes(int32_t units, int32_t batch, int32_t seq) const {
  const size_t n = static_cast<size_t>(batch) * seq * units * unit_size_;
  return {n, n};  // pre-activation, activation (reused for its gradient in backward)
}

void ParallelMlp::ForwardRange(const UnitRange& r, const float* x, int32_t batch, int32_t seq,
                               float beta, float* z) {
  Compute& c = compute();
  const int t = batch * seq, h = hidden(), n = r.units * unit_size_;
  float* pre = (*r.cache)[0].data();
  float* act = (*r.cache)[1].data();
  c.Gemm(false, true, t, n, h, 1.0f, x, h, r.params[kW1t], h, 0.0f, pre, n);
  c.AddRowVector(pre, t, n, n, r.params[kB1]);
  c.GeluForward(pre, act, t, n, n);
  c.Gemm(false, false, t, h, n, 1.0f, act, n, r.params[kW2], h, beta, z, h);
  if (r.mean_out != nullptr) c.ColumnSum(act, t, n, n, 1.0f / t, 0.0f, r.mean_out);
}

void ParallelMlp::BackwardRange(const UnitRange& r, const float* x, const float* dz,
                                int32_t batch, int32_t seq, float beta, float* dx) {
  Compute& c = compute();
  const int t = batch * seq, h = hidden(), n = r.units * unit_size_;
  const float* pre = (*r.cache)[0].data();
  float* act = (*r.cache)[1].data();
  c.Gemm(true, false, n, h, t, 1.0f, act, n, dz, h, 0.0f, r.grads[kW2], h);
  float* d = act;  // the activation is no longer needed: reuse it for its gradient
  c.Gemm(false, true, t, n, h, 1.0f, dz, h, r.params[kW2], h, 0.0f, d, n);
  c.GeluBackward(pre, d, d, t, n, n);
  c.Gemm(true, false, n, h, t, 1.0f, d, n, x, h, 0.0f, r.grads[kW1t], h);
  c.ColumnSum(d, t, n, n, 1.0f, 0.0f, r.grads[kB1]);
  c.Gemm(false, false, t, h, n, 1.0f, d, n, r.params[kW1t], h, beta, dx, h);
}

void ParallelMlp::ImputeRange(const UnitRange& r, const float* means, float* out) {
  const int h = hidden(), n = r.units * unit_size_;
  compute().Gemm(false, false, 1, h, n, 1.0f, means, n, r.params[kW2], h, 1.0f, out, h);
}

void ParallelMlp::InitDense(std::vector<float>& dense) const {
  const size_t h_dim = hidden(), i_dim = intermediate_;
  const uint64_t seed = config_seed();
  std::fill(dense.begin(), dense.end(), 0.0f);  // biases start at zero
  internal::FillNormal(dense.data(), h_dim * i_dim, internal::XavierStd(h_dim, i_dim), seed,
                       id().value(), 1);
  internal::FillNormal(dense.data() + h_dim * i_dim + i_dim, h_dim * i_dim,
                       internal::XavierStd(i_dim, h_dim), seed, id().value(), 2);
}

}  // namespace ballast
