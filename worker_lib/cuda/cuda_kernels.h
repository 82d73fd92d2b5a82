// Internal to the CUDA backend: the elementwise and reduction kernels behind
// ballast::Compute that cuBLAS does not provide. Semantics (row-major layouts, strides,
// formulas) are those documented in ballast/compute.h; the CPU backend is the reference.
//
// Every launcher enqueues on `stream` and returns the launch status (cudaGetLastError);
// execution errors surface later, at the next synchronization. Empty work (n == 0,
// rows == 0, ...) launches nothing and returns cudaSuccess, because a zero-sized grid is
// itself a launch error.
//
//   cudaError_t e = ballast::cuda_internal::LaunchFill(x, 0.0f, n, stream);
//
// This header is plain C++ (no device code), so host-only .cc files can include it.
#ifndef BALLAST_WORKER_LIB_CUDA_CUDA_KERNELS_H_
#define BALLAST_WORKER_LIB_CUDA_CUDA_KERNELS_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace ballast::cuda_internal {

// x[i] = value.
cudaError_t LaunchFill(float* x, float value, size_t n, cudaStream_t stream);
// y[i] += alpha * x[i].
cudaError_t LaunchAxpy(float alpha, const float* x, float* y, size_t n, cudaStream_t stream);
// x[i] *= alpha.
cudaError_t LaunchScale(float alpha, float* x, size_t n, cudaStream_t stream);
// x[r, c] += v[c]; x has row stride ld.
cudaError_t LaunchAddRowVector(float* x, int rows, int cols, int ld, const float* v,
                               cudaStream_t stream);
// out[c] = beta * out[c] + alpha * sum_r x[r, c]. As in BLAS, beta == 0 overwrites `out`
// without reading it, so uninitialised memory is fine there. Deterministic (fixed order).
cudaError_t LaunchColumnSum(const float* x, int rows, int cols, int ld, float alpha, float beta,
                            float* out, cudaStream_t stream);
// out[r, c] = gelu(pre[r, c]), tanh approximation; both with row stride ld.
cudaError_t LaunchGeluForward(const float* pre, float* out, int rows, int cols, int ld,
                              cudaStream_t stream);
// dpre[r, c] = dout[r, c] * gelu'(pre[r, c]); all with row stride ld. dpre may alias dout.
cudaError_t LaunchGeluBackward(const float* pre, const float* dout, float* dpre, int rows, int cols,
                               int ld, cudaStream_t stream);
// In place, contiguous rows: x[r, :] = softmax(scale * x[r, :]) (max-subtracted); with
// `causal`, row r sees columns 0..r % cols only and the rest become 0.
cudaError_t LaunchSoftmaxRows(float* x, int rows, int cols, float scale, bool causal,
                              cudaStream_t stream);
// RoPE on head slices, in place (see Compute::Rotary); head_dim even.
cudaError_t LaunchRotary(float* x, int rows, int seq, int ld, int groups, int group_stride,
                         int heads, int head_dim, const float* cos, const float* sin, bool inverse,
                         cudaStream_t stream);
// SwiGLU over unit tiles and its gradient (see Compute::SwiGluForward / SwiGluBackward);
// dgate_up may alias gate_up.
cudaError_t LaunchSwiGluForward(const float* gate_up, float* out, int rows, int units,
                                int unit_size, cudaStream_t stream);
cudaError_t LaunchSwiGluBackward(const float* gate_up, const float* dout, float* dgate_up, int rows,
                                 int units, int unit_size, cudaStream_t stream);
// Row gather, scatter-add and row dots (see Compute::GatherRows / ScatterAddRows /
// RowDots). Here `rows` and `scale` (n entries each; scale may be null, meaning 1) are
// DEVICE memory: the compute stages the caller's host tables before launching. Scatter
// rows are distinct, so every output element has one writer and needs no atomics.
cudaError_t LaunchGatherRows(const float* src, int ld_src, const int32_t* rows, const float* scale,
                             int n, int cols, float* dst, int ld_dst, cudaStream_t stream);
cudaError_t LaunchScatterAddRows(const float* src, int ld_src, const int32_t* rows,
                                 const float* scale, int n, int cols, float* dst, int ld_dst,
                                 cudaStream_t stream);
// One block per row, fp32 partial sums reduced in a fixed order (deterministic); with
// cols == 0 the n outputs are still written (zeros).
cudaError_t LaunchRowDots(const float* a, int lda, const float* b, int ldb, int n, int cols,
                          float* out, cudaStream_t stream);
// In place: dx[r, :] = scale * p[r, :] * (dx[r, :] - <dx[r, :], p[r, :]>).
cudaError_t LaunchSoftmaxBackwardRows(const float* p, float* dx, int rows, int cols, float scale,
                                      cudaStream_t stream);

// Row-wise layer norm of contiguous rows; writes mean and rstd per row (see Compute).
cudaError_t LaunchLayerNormForward(const float* x, const float* gamma, const float* beta, int rows,
                                   int cols, float eps, float* y, float* mean, float* rstd,
                                   cudaStream_t stream);
// dx per row, then dgamma and dbeta as column sums over rows (all overwritten).
cudaError_t LaunchLayerNormBackward(const float* x, const float* gamma, const float* mean,
                                    const float* rstd, const float* dy, int rows, int cols,
                                    float* dx, float* dgamma, float* dbeta, cudaStream_t stream);

// Per-call constants of one AdamW update. The bias corrections (1 - beta^step) are computed
// once on the host, in double, rather than per element.
struct AdamWKernelParams {
  float lr = 0;
  float beta1 = 0;
  float beta2 = 0;
  float eps = 0;
  float weight_decay = 0;
  float bias_correction1 = 1;  // 1 - beta1^step
  float bias_correction2 = 1;  // 1 - beta2^step
};
// m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2;
// w -= lr * (weight_decay * w + (m / bc1) / (sqrt(v / bc2) + eps)).
cudaError_t LaunchAdamW(const AdamWKernelParams& params, float* w, const float* g, float* m,
                        float* v, size_t n, cudaStream_t stream);

// *sum += sum_i x[i]^2: per-block fp32 partial sums, added atomically (so the last bits
// depend on the order blocks finish in).
cudaError_t LaunchAddSquaredNorm(const float* x, size_t n, float* sum, cudaStream_t stream);

// Doubles of device scratch that LaunchUnitL1 needs for `units` units of `unit_elems`.
size_t UnitL1ScratchDoubles(int units, size_t unit_elems);
// out[u] = sum_i |a[u * unit_elems + i] - b[u * unit_elems + i]| (b == nullptr: |a|), summed
// in double in a fixed order (deterministic). `scratch` holds UnitL1ScratchDoubles(...)
// doubles; `out` holds `units` doubles; both device memory.
cudaError_t LaunchUnitL1(const float* a, const float* b, int units, size_t unit_elems,
                         double* scratch, double* out, cudaStream_t stream);

}  // namespace ballast::cuda_internal

#endif  // BALLAST_WORKER_LIB_CUDA_CUDA_KERNELS_H_
