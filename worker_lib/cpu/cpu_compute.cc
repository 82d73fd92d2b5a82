#include "cpu/cpu_compute.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "internal/compute_checks.h"

namespace ballast::internal {
namespace {

// 64-byte alignment keeps OpenBLAS on its aligned fast paths.
constexpr size_t kAlignment = 64;

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCoeff = 0.044715f;

// tanh as a clamped 13/6 rational function (Eigen's float coefficients; a few ulp from
// std::tanh). Unlike a libm call it vectorises, and GELU is a pass over every MLP
// activation: with std::tanh it cost a third of a ViT-Base MLP's forward and backward.
inline float FastTanh(float x) {
  constexpr float kClamp = 7.90531110763549805f;  // tanh is +-1 in float beyond
  x = std::min(std::max(x, -kClamp), kClamp);
  const float x2 = x * x;
  float p = x2 * -2.76076847742355e-16f + 2.00018790482477e-13f;
  p = x2 * p + -8.60467152213735e-11f;
  p = x2 * p + 5.12229709037114e-08f;
  p = x2 * p + 1.48572235717979e-05f;
  p = x2 * p + 6.37261928875436e-04f;
  p = x2 * p + 4.89352455891786e-03f;
  float q = x2 * 1.19825839466702e-06f + 1.18534705686654e-04f;
  q = x2 * q + 2.26843463243900e-03f;
  q = x2 * q + 4.89352518554385e-03f;
  return x * p / q;
}

class ClockTimer final : public IntervalTimer {
 public:
  explicit ClockTimer(const Clock* clock) : clock_(clock) {}
  void Start() override { start_ = clock_->Monotonic(); }
  void Stop() override { total_ += clock_->Monotonic() - start_; }
  absl::StatusOr<double> Seconds() override { return absl::ToDoubleSeconds(total_); }
  void Reset() override { total_ = absl::ZeroDuration(); }

 private:
  const Clock* clock_;
  absl::Duration start_;
  absl::Duration total_;
};

}  // namespace

absl::StatusOr<Buffer> CpuCompute::Allocate(size_t n) {
  if (n == 0) return Buffer();
  const size_t bytes = (n * sizeof(float) + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, bytes);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", bytes, " bytes"));
  }
  std::memset(p, 0, bytes);
  return Buffer(static_cast<float*>(p), n, [](float* q) { std::free(q); });
}

void CpuCompute::CopyFromHost(const float* host, float* dst, size_t n) {
  if (n > 0) std::memcpy(dst, host, n * sizeof(float));
}
void CpuCompute::CopyToHost(const float* src, float* host, size_t n) {
  if (n > 0) std::memcpy(host, src, n * sizeof(float));
}
void CpuCompute::Copy(const float* src, float* dst, size_t n) {
  if (!failure_->Defer(CheckCopy(src, dst, n))) return;
  if (n > 0 && src != dst) std::memcpy(dst, src, n * sizeof(float));
}
void CpuCompute::Fill(float* x, float value, size_t n) { std::fill(x, x + n, value); }

namespace {

// Gemm once its arguments are checked.
void RowMajorGemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                  int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    // BLAS leaves C untouched for k == 0 only when beta == 1; make it explicit.
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < n; ++j) c[i * ldc + j] = beta == 0 ? 0.0f : beta * c[i * ldc + j];
    }
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace

void CpuCompute::Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                      int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  if (!failure_->Defer(CheckGemm("Gemm", trans_a, trans_b, m, n, k, lda, ldb, ldc))) return;
  RowMajorGemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void CpuCompute::GemmStridedBatched(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                                    const float* a, int lda, int64_t stride_a, const float* b,
                                    int ldb, int64_t stride_b, float beta, float* c, int ldc,
                                    int64_t stride_c, int batch) {
  if (!failure_->Defer(CheckGemm("GemmStridedBatched", trans_a, trans_b, m, n, k, lda, ldb, ldc)) ||
      !failure_->Defer(CheckBatch("GemmStridedBatched", batch))) {
    return;
  }
  for (int i = 0; i < batch; ++i) {
    RowMajorGemm(trans_a, trans_b, m, n, k, alpha, a + i * stride_a, lda, b + i * stride_b, ldb,
                 beta, c + i * stride_c, ldc);
  }
}

void CpuCompute::Axpy(float alpha, const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

void CpuCompute::Scale(float alpha, float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] *= alpha;
}

void CpuCompute::AddRowVector(float* x, int rows, int cols, int ld, const float* v) {
  if (!failure_->Defer(CheckRowMajor("AddRowVector", rows, cols, ld))) return;
  for (int r = 0; r < rows; ++r) {
    float* row = x + static_cast<int64_t>(r) * ld;
    for (int c = 0; c < cols; ++c) row[c] += v[c];
  }
}

void CpuCompute::ColumnSum(const float* x, int rows, int cols, int ld, float alpha, float beta,
                           float* out) {
  if (!failure_->Defer(CheckRowMajor("ColumnSum", rows, cols, ld))) return;
  for (int c = 0; c < cols; ++c) out[c] = beta == 0 ? 0.0f : beta * out[c];
  for (int r = 0; r < rows; ++r) {
    const float* row = x + static_cast<int64_t>(r) * ld;
    for (int c = 0; c < cols; ++c) out[c] += alpha * row[c];
  }
}

void CpuCompute::GeluForward(const float* pre, float* out, int rows, int cols, int ld) {
  if (!failure_->Defer(CheckRowMajor("GeluForward", rows, cols, ld))) return;
  for (int r = 0; r < rows; ++r) {
    const float* p = pre + static_cast<int64_t>(r) * ld;
    float* o = out + static_cast<int64_t>(r) * ld;
    for (int c = 0; c < cols; ++c) {
      const float x = p[c];
      o[c] = 0.5f * x * (1.0f + FastTanh(kSqrt2OverPi * (x + kGeluCoeff * x * x * x)));
    }
  }
}

void CpuCompute::GeluBackward(const float* pre, const float* dout, float* dpre, int rows, int cols,
                              int ld) {
  if (!failure_->Defer(CheckRowMajor("GeluBackward", rows, cols, ld))) return;
  for (int r = 0; r < rows; ++r) {
    const int64_t off = static_cast<int64_t>(r) * ld;
    for (int c = 0; c < cols; ++c) {
      const float x = pre[off + c];
      const float t = FastTanh(kSqrt2OverPi * (x + kGeluCoeff * x * x * x));
      const float dt = (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * kGeluCoeff * x * x);
      dpre[off + c] = dout[off + c] * (0.5f * (1.0f + t) + 0.5f * x * dt);
    }
  }
}

void CpuCompute::SoftmaxRows(float* x, int rows, int cols, float scale, bool causal) {
  if (!failure_->Defer(CheckRowMajor("SoftmaxRows", rows, cols, cols))) return;
  for (int r = 0; r < rows; ++r) {
    float* row = x + static_cast<int64_t>(r) * cols;
    const int seen = causal ? r % cols + 1 : cols;  // columns this query may attend to
    float max_v = -INFINITY;
    for (int c = 0; c < seen; ++c) max_v = std::max(max_v, scale * row[c]);
    float sum = 0;
    for (int c = 0; c < seen; ++c) {
      row[c] = std::exp(scale * row[c] - max_v);
      sum += row[c];
    }
    const float inv = 1.0f / sum;
    for (int c = 0; c < seen; ++c) row[c] *= inv;
    for (int c = seen; c < cols; ++c) row[c] = 0.0f;
  }
}

void CpuCompute::Rotary(float* x, int rows, int seq, int ld, int groups, int group_stride,
                        int heads, int head_dim, const float* cos, const float* sin, bool inverse) {
  if (!failure_->Defer(CheckRotary(rows, seq, ld, groups, group_stride, heads, head_dim))) return;
  const int half = head_dim / 2;
  const float sign = inverse ? -1.0f : 1.0f;
  for (int r = 0; r < rows; ++r) {
    const float* c_pos = cos + static_cast<int64_t>(r % seq) * half;
    const float* s_pos = sin + static_cast<int64_t>(r % seq) * half;
    for (int g = 0; g < groups; ++g) {
      for (int i = 0; i < heads; ++i) {
        float* a = x + static_cast<int64_t>(r) * ld + g * group_stride + i * head_dim;
        float* b = a + half;
        for (int j = 0; j < half; ++j) {
          const float aj = a[j], bj = b[j], sj = sign * s_pos[j];
          a[j] = aj * c_pos[j] - bj * sj;
          b[j] = bj * c_pos[j] + aj * sj;
        }
      }
    }
  }
}

void CpuCompute::SwiGluForward(const float* gate_up, float* out, int rows, int units,
                               int unit_size) {
  if (!failure_->Defer(CheckSwiGlu("SwiGluForward", rows, units, unit_size))) return;
  const int64_t n = static_cast<int64_t>(units) * unit_size;
  for (int r = 0; r < rows; ++r) {
    for (int u = 0; u < units; ++u) {
      const float* g = gate_up + r * 2 * n + static_cast<int64_t>(u) * 2 * unit_size;
      const float* up = g + unit_size;
      float* o = out + r * n + static_cast<int64_t>(u) * unit_size;
      for (int i = 0; i < unit_size; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * up[i];
    }
  }
}

void CpuCompute::SwiGluBackward(const float* gate_up, const float* dout, float* dgate_up, int rows,
                                int units, int unit_size) {
  if (!failure_->Defer(CheckSwiGlu("SwiGluBackward", rows, units, unit_size))) return;
  const int64_t n = static_cast<int64_t>(units) * unit_size;
  for (int r = 0; r < rows; ++r) {
    for (int u = 0; u < units; ++u) {
      const int64_t at = r * 2 * n + static_cast<int64_t>(u) * 2 * unit_size;
      const float* g = gate_up + at;
      const float* up = g + unit_size;
      float* dg = dgate_up + at;
      float* dup = dg + unit_size;
      const float* d = dout + r * n + static_cast<int64_t>(u) * unit_size;
      for (int i = 0; i < unit_size; ++i) {
        const float gi = g[i], upi = up[i];  // read both first: dgate_up may alias gate_up
        const float sig = 1.0f / (1.0f + std::exp(-gi));
        dup[i] = d[i] * gi * sig;
        dg[i] = d[i] * upi * sig * (1.0f + gi * (1.0f - sig));
      }
    }
  }
}

void CpuCompute::GatherRows(const float* src, int src_rows, int ld_src, const int32_t* rows,
                            const float* scale, int n, int cols, float* dst, int ld_dst) {
  if (!failure_->Defer(CheckGatherRows(src, src_rows, ld_src, rows, n, cols, dst, ld_dst))) {
    return;
  }
  if (cols == 0) return;
  for (int i = 0; i < n; ++i) {
    const float* s = src + static_cast<int64_t>(rows[i]) * ld_src;
    float* d = dst + static_cast<int64_t>(i) * ld_dst;
    if (scale == nullptr) {
      std::memcpy(d, s, static_cast<size_t>(cols) * sizeof(float));
    } else {
      const float f = scale[i];
      for (int c = 0; c < cols; ++c) d[c] = f * s[c];
    }
  }
}

void CpuCompute::ScatterAddRows(const float* src, int ld_src, const int32_t* rows,
                                const float* scale, int n, int cols, float* dst, int dst_rows,
                                int ld_dst) {
  if (!failure_->Defer(CheckScatterAddRows(src, ld_src, rows, n, cols, dst, dst_rows, ld_dst))) {
    return;
  }
  if (cols == 0) return;
  for (int i = 0; i < n; ++i) {
    const float* s = src + static_cast<int64_t>(i) * ld_src;
    float* d = dst + static_cast<int64_t>(rows[i]) * ld_dst;
    const float f = scale == nullptr ? 1.0f : scale[i];
    for (int c = 0; c < cols; ++c) d[c] += f * s[c];
  }
}

void CpuCompute::RowDots(const float* a, int lda, const float* b, int ldb, int n, int cols,
                         float* out) {
  if (!failure_->Defer(CheckRowDots(a, lda, b, ldb, n, cols, out))) return;
  for (int i = 0; i < n; ++i) {
    const float* ar = a + static_cast<int64_t>(i) * lda;
    const float* br = b + static_cast<int64_t>(i) * ldb;
    // In double, as AddSquaredNorm: the CPU backend is the reference the others meet.
    double sum = 0;
    for (int c = 0; c < cols; ++c) sum += static_cast<double>(ar[c]) * br[c];
    out[i] = static_cast<float>(sum);
  }
}

void CpuCompute::SoftmaxBackwardRows(const float* p, float* dx, int rows, int cols, float scale) {
  if (!failure_->Defer(CheckRowMajor("SoftmaxBackwardRows", rows, cols, cols))) return;
  for (int r = 0; r < rows; ++r) {
    const float* pr = p + static_cast<int64_t>(r) * cols;
    float* dr = dx + static_cast<int64_t>(r) * cols;
    float dot = 0;
    for (int c = 0; c < cols; ++c) dot += pr[c] * dr[c];
    for (int c = 0; c < cols; ++c) dr[c] = scale * pr[c] * (dr[c] - dot);
  }
}

void CpuCompute::LayerNormForward(const float* x, const float* gamma, const float* beta, int rows,
                                  int cols, float eps, float* y, float* mean, float* rstd) {
  if (!failure_->Defer(CheckRowMajor("LayerNormForward", rows, cols, cols))) return;
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + static_cast<int64_t>(r) * cols;
    float* yr = y + static_cast<int64_t>(r) * cols;
    // Two passes in double: cheap at these widths, and immune to cancellation in E[x^2].
    double sum = 0;
    for (int c = 0; c < cols; ++c) sum += xr[c];
    const double mu = sum / cols;
    double sq = 0;
    for (int c = 0; c < cols; ++c) sq += (xr[c] - mu) * (xr[c] - mu);
    const float inv = static_cast<float>(1.0 / std::sqrt(sq / cols + eps));
    const float m = static_cast<float>(mu);
    for (int c = 0; c < cols; ++c) yr[c] = (xr[c] - m) * inv * gamma[c] + beta[c];
    mean[r] = m;
    rstd[r] = inv;
  }
}

void CpuCompute::LayerNormBackward(const float* x, const float* gamma, const float* mean,
                                   const float* rstd, const float* dy, int rows, int cols,
                                   float* dx, float* dgamma, float* dbeta) {
  if (!failure_->Defer(
          CheckLayerNormBackward(x, gamma, mean, rstd, dy, rows, cols, dx, dgamma, dbeta))) {
    return;
  }
  std::fill(dgamma, dgamma + cols, 0.0f);
  std::fill(dbeta, dbeta + cols, 0.0f);
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + static_cast<int64_t>(r) * cols;
    const float* dyr = dy + static_cast<int64_t>(r) * cols;
    float* dxr = dx + static_cast<int64_t>(r) * cols;
    // With g = dy * gamma and xhat the normalised input:
    // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)).
    float sum_g = 0, sum_gx = 0;
    for (int c = 0; c < cols; ++c) {
      const float xhat = (xr[c] - mean[r]) * rstd[r];
      const float g = dyr[c] * gamma[c];
      sum_g += g;
      sum_gx += g * xhat;
      dgamma[c] += dyr[c] * xhat;
      dbeta[c] += dyr[c];
    }
    const float mean_g = sum_g / cols, mean_gx = sum_gx / cols;
    for (int c = 0; c < cols; ++c) {
      const float xhat = (xr[c] - mean[r]) * rstd[r];
      dxr[c] = rstd[r] * (dyr[c] * gamma[c] - mean_g - xhat * mean_gx);
    }
  }
}

void CpuCompute::AdamW(const AdamWOptions& o, int64_t step, float* w, const float* g, float* m,
                       float* v, size_t n) {
  if (!failure_->Defer(CheckAdamWStep(step))) return;
  // In double, as on CUDA: beta2^step for beta2 = 0.999 loses most of its float precision
  // in 1 - beta2^step for small steps.
  const float bc1 =
      static_cast<float>(1.0 - std::pow(static_cast<double>(o.beta1), static_cast<double>(step)));
  const float bc2 =
      static_cast<float>(1.0 - std::pow(static_cast<double>(o.beta2), static_cast<double>(step)));
  for (size_t i = 0; i < n; ++i) {
    m[i] = o.beta1 * m[i] + (1.0f - o.beta1) * g[i];
    v[i] = o.beta2 * v[i] + (1.0f - o.beta2) * g[i] * g[i];
    const float m_hat = m[i] / bc1;
    const float v_hat = v[i] / bc2;
    w[i] -= o.lr * (o.weight_decay * w[i] + m_hat / (std::sqrt(v_hat) + o.eps));
  }
}

void CpuCompute::AddSquaredNorm(const float* x, size_t n, float* sum) {
  if (!failure_->Defer(CheckSquaredNorm(x, n, sum))) return;
  double total = 0;
  for (size_t i = 0; i < n; ++i) total += static_cast<double>(x[i]) * x[i];
  if (n > 0) *sum += static_cast<float>(total);
}

absl::Status CpuCompute::UnitL1(const float* a, const float* b, int units, size_t unit_elems,
                                double* out_host) {
  BALLAST_RETURN_IF_ERROR(CheckUnitL1(a, units, unit_elems, out_host));
  for (int u = 0; u < units; ++u) {
    const float* au = a + u * unit_elems;
    double sum = 0;
    if (b == nullptr) {
      for (size_t i = 0; i < unit_elems; ++i) sum += std::fabs(au[i]);
    } else {
      const float* bu = b + u * unit_elems;
      for (size_t i = 0; i < unit_elems; ++i) sum += std::fabs(au[i] - bu[i]);
    }
    out_host[u] = sum;
  }
  return absl::OkStatus();
}

std::unique_ptr<IntervalTimer> CpuCompute::NewTimer() {
  return std::make_unique<ClockTimer>(clock_);
}

}  // namespace ballast::internal
