// The compute half of a backend: memory and the few kernels a plan-aware TP block needs.
//
// Every pointer passed to a Compute method lives in the backend's memory: host memory for
// the CPU backend (OpenBLAS), device memory for the CUDA backend (cuBLAS + own kernels).
// The exceptions say so: the row tables of GatherRows / ScatterAddRows and UnitL1's result
// are host arrays.
// Calls are stream-ordered: they may run asynchronously and complete in call order;
// `Synchronize()` waits and reports any deferred failure. Host <-> backend copies are
// the only way data crosses, so block code is written once for both backends; they are
// synchronous (the host buffer is ready, or free to reuse, when they return).
//
// Matrices are row-major. `Gemm` computes C = alpha * op(A) * op(B) + beta * C with
// op(A) of shape m x k, op(B) k x n and C m x n; lda/ldb/ldc are row strides.
//
// Every backend checks the same arguments (worker_lib/internal/compute_checks.h): a void
// call with a bad shape, or with an output that overlaps an input where this contract
// forbids it, does nothing, and `Synchronize()`, or the backend's next collective, reports
// INVALID_ARGUMENT naming the call (the collective is then not run, and the communicator
// is aborted). tests/worker_lib/compute_conformance_test.cc holds every backend to this.
#ifndef BALLAST_COMPUTE_H_
#define BALLAST_COMPUTE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ballast {

// An owned array of floats in a backend's memory. Move-only.
class Buffer {
 public:
  using Deleter = std::function<void(float*)>;
  Buffer() = default;
  Buffer(float* data, size_t size, Deleter deleter)
      : data_(data, std::move(deleter)), size_(size) {}
  float* data() { return data_.get(); }
  const float* data() const { return data_.get(); }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

 private:
  std::unique_ptr<float, Deleter> data_{nullptr, [](float*) {}};
  size_t size_ = 0;
};

// Accumulates the duration of many start/stop intervals of backend work. On the CPU these
// are monotonic-clock readings; on CUDA, event pairs on the stream, resolved lazily.
class IntervalTimer {
 public:
  virtual ~IntervalTimer() = default;
  virtual void Start() = 0;
  virtual void Stop() = 0;
  // Total seconds over all completed intervals since the last Reset. May synchronize.
  virtual absl::StatusOr<double> Seconds() = 0;
  virtual void Reset() = 0;
};

struct AdamWOptions {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.01f;
};

class Compute {
 public:
  virtual ~Compute() = default;

  // Zero-filled.
  virtual absl::StatusOr<Buffer> Allocate(size_t n) = 0;
  virtual void CopyFromHost(const float* host, float* dst, size_t n) = 0;
  virtual void CopyToHost(const float* src, float* host, size_t n) = 0;
  // src and dst must not overlap, unless they are the same range (then a no-op).
  virtual void Copy(const float* src, float* dst, size_t n) = 0;
  virtual void Fill(float* x, float value, size_t n) = 0;

  virtual void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                    int lda, const float* b, int ldb, float beta, float* c, int ldc) = 0;
  // `batch` independent GEMMs; matrix i uses a + i*stride_a, b + i*stride_b, c + i*stride_c.
  virtual void GemmStridedBatched(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                                  const float* a, int lda, int64_t stride_a, const float* b,
                                  int ldb, int64_t stride_b, float beta, float* c, int ldc,
                                  int64_t stride_c, int batch) = 0;

  // y += alpha * x.
  virtual void Axpy(float alpha, const float* x, float* y, size_t n) = 0;
  // x *= alpha.
  virtual void Scale(float alpha, float* x, size_t n) = 0;
  // x[r, c] += v[c] for r < rows, c < cols; x has row stride ld.
  virtual void AddRowVector(float* x, int rows, int cols, int ld, const float* v) = 0;
  // out[c] = beta * out[c] + alpha * sum_r x[r, c]; x has row stride ld. With beta == 0,
  // out is not read (as in BLAS).
  virtual void ColumnSum(const float* x, int rows, int cols, int ld, float alpha, float beta,
                         float* out) = 0;
  // out[r, c] = gelu(pre[r, c]) (tanh approximation), row-major rows x cols, stride ld for both.
  virtual void GeluForward(const float* pre, float* out, int rows, int cols, int ld) = 0;
  // dpre[r, c] = dout[r, c] * gelu'(pre[r, c]); all three with stride ld.
  virtual void GeluBackward(const float* pre, const float* dout, float* dpre, int rows, int cols,
                            int ld) = 0;
  // In place: x[r, :] = softmax(scale * x[r, :]) for `rows` contiguous rows of `cols`.
  // With `causal`, the rows are stacked square cols x cols score matrices: row r is query
  // position r % cols, and the columns after it get probability exactly 0 (a token sees
  // itself and earlier tokens only).
  virtual void SoftmaxRows(float* x, int rows, int cols, float scale, bool causal) = 0;
  // In place: dx[r, :] = scale * p[r, :] * (dx[r, :] - <dx[r, :], p[r, :]>), i.e. turns the
  // gradient w.r.t. the softmax output into the gradient w.r.t. its (pre-scale) input.
  virtual void SoftmaxBackwardRows(const float* p, float* dx, int rows, int cols, float scale) = 0;
  // Rotary position embedding (RoPE), rotate-half convention (GPT-NeoX, Hugging Face
  // Llama), in place on head slices: for every row r and g < groups, i < heads, the
  // head_dim columns at x[r, g * group_stride + i * head_dim] are rotated pairwise,
  // (a, b) = (x[j], x[j + head_dim/2]) -> (a cos - b sin, b cos + a sin), by the angle of
  // position r % seq and frequency j; `cos` and `sin` hold seq x head_dim/2 values. With
  // `inverse`, rotates by minus the angle: the transpose, which is the backward pass.
  virtual void Rotary(float* x, int rows, int seq, int ld, int groups, int group_stride, int heads,
                      int head_dim, const float* cos, const float* sin, bool inverse) = 0;
  // SwiGLU over unit tiles. Each row of gate_up holds, per unit u < units, unit_size gate
  // columns then unit_size up columns (row stride 2 * units * unit_size); out[r, u *
  // unit_size + i] = silu(gate) * up, row stride units * unit_size.
  virtual void SwiGluForward(const float* gate_up, float* out, int rows, int units,
                             int unit_size) = 0;
  // dgate_up (gate_up's layout) from dout (out's layout); dgate_up may be gate_up itself.
  virtual void SwiGluBackward(const float* gate_up, const float* dout, float* dgate_up, int rows,
                              int units, int unit_size) = 0;
  // Row gather: dst[i, :] = scale[i] * src[rows[i], :] for i < n, `cols` columns (scale null:
  // a plain copy). src has src_rows rows of stride ld_src, dst stride ld_dst. `rows` and
  // `scale` are HOST arrays of n entries (the only host inputs in this interface): the
  // backend copies them as it queues the call, so the caller may reuse them on return.
  // Every rows[i] in [0, src_rows); dst must not overlap src.
  virtual void GatherRows(const float* src, int src_rows, int ld_src, const int32_t* rows,
                          const float* scale, int n, int cols, float* dst, int ld_dst) = 0;
  // Row scatter-add: dst[rows[i], :] += scale[i] * src[i, :] for i < n (scale null: 1).
  // `rows` and `scale` are host arrays as in GatherRows; rows distinct and in
  // [0, dst_rows); dst must not overlap src.
  virtual void ScatterAddRows(const float* src, int ld_src, const int32_t* rows, const float* scale,
                              int n, int cols, float* dst, int dst_rows, int ld_dst) = 0;
  // out[i] = sum_c a[i, c] * b[i, c] for i < n (row strides lda, ldb); out: n floats, not
  // overlapping a or b.
  virtual void RowDots(const float* a, int lda, const float* b, int ldb, int n, int cols,
                       float* out) = 0;
  // Row-wise layer normalisation of `rows` contiguous rows of `cols`:
  // y = (x - mean) * rstd * gamma + beta, with rstd = 1 / sqrt(var + eps) and the biased
  // variance. Writes mean and rstd (rows floats each), which the backward pass reuses.
  virtual void LayerNormForward(const float* x, const float* gamma, const float* beta, int rows,
                                int cols, float eps, float* y, float* mean, float* rstd) = 0;
  // Gradients of LayerNormForward given dy: dx (rows x cols), and dgamma and dbeta (cols
  // each, summed over rows). All three outputs are overwritten; none may overlap x, dy or
  // another output.
  virtual void LayerNormBackward(const float* x, const float* gamma, const float* mean,
                                 const float* rstd, const float* dy, int rows, int cols, float* dx,
                                 float* dgamma, float* dbeta) = 0;
  // Decoupled AdamW on n parameters that all have taken `step` steps (step >= 1):
  // w -= lr * (weight_decay * w + m_hat / (sqrt(v_hat) + eps)).
  virtual void AdamW(const AdamWOptions& options, int64_t step, float* w, const float* g, float* m,
                     float* v, size_t n) = 0;
  // out_host[u] = sum_i |a[u * unit_elems + i] - b[...]| for u < units (b may be null: |a|).
  // Synchronous; used by the priority policies once per window.
  virtual absl::Status UnitL1(const float* a, const float* b, int units, size_t unit_elems,
                              double* out_host) = 0;

  // *sum += sum_i x[i]^2, with `sum` one float of backend memory: a squared norm summed
  // where the data lives, so a gradient norm over many tensors costs one host read at the
  // end instead of one per tensor. The squares are summed in double on the CPU, in fp32
  // partial sums on CUDA.
  virtual void AddSquaredNorm(const float* x, size_t n, float* sum) = 0;

  // Waits for all queued work; returns the first deferred error, if any.
  virtual absl::Status Synchronize() = 0;
  virtual std::unique_ptr<IntervalTimer> NewTimer() = 0;
};

}  // namespace ballast

#endif  // BALLAST_COMPUTE_H_
