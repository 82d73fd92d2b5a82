// Kernels of the CUDA backend; see cuda_kernels.h for the contract of each launcher.
//
// Shapes: elementwise kernels use a grid-stride loop over a capped grid, so any n (size_t)
// works with one launch; row kernels (softmax) use one block per row; reductions are done
// in a fixed order so that repeated runs give bit-identical results, which keeps the ranks
// of a group (and reruns of a test) in agreement.
//
// Past 600 lines on purpose: one kind of thing, kernels and their launchers, sharing the
// helpers below (the capped grid, the grid-stride loop, the warp and block reductions,
// GELU) in this file's anonymous namespace. Split by layer, those helpers would move to a
// device header of their own, visible to every file that includes it.
#include <algorithm>
#include <cstdint>

#include "worker_lib/cuda/cuda_kernels.h"

namespace ballast::cuda_internal {
namespace {

constexpr int kThreads = 256;
// Enough blocks to fill any current GPU several times over; the grid-stride loops cover
// the rest, and a capped grid keeps gridDim.x far from its limit for huge n.
constexpr size_t kMaxBlocks = 8192;
constexpr unsigned kFullWarp = 0xffffffffu;

int BlocksFor(size_t n) {
  return static_cast<int>(std::min((n + kThreads - 1) / kThreads, kMaxBlocks));
}

__device__ __forceinline__ size_t GlobalThread() {
  return static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ size_t GridStride() {
  return static_cast<size_t>(gridDim.x) * blockDim.x;
}

struct MaxOp {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return a > b ? a : b;
  }
};
struct SumOp {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return a + b;
  }
};

template <typename T, typename Op>
__device__ T WarpReduce(T value, Op op) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    value = op(value, __shfl_xor_sync(kFullWarp, value, offset));
  }
  return value;
}

// Reduces `value` over the whole block (blockDim.x a multiple of 32, at most 1024) and
// returns the result to every thread. `shared` holds 32 elements. Ends with a barrier so
// the caller can reuse `shared` for the next reduction right away.
template <typename T, typename Op>
__device__ T BlockReduce(T value, Op op, T identity, T* shared) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
  value = WarpReduce(value, op);
  if (lane == 0) shared[warp] = value;
  __syncthreads();
  if (warp == 0) {
    T v = lane < warps ? shared[lane] : identity;
    v = WarpReduce(v, op);
    if (lane == 0) shared[0] = v;
  }
  __syncthreads();
  const T result = shared[0];
  __syncthreads();
  return result;
}

// gelu(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3).
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCoeff = 0.044715f;

__device__ __forceinline__ float Gelu(float x) {
  const float u = kSqrt2OverPi * (x + kGeluCoeff * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}

// d/dx gelu(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2), t = tanh(u).
__device__ __forceinline__ float GeluGrad(float x) {
  const float u = kSqrt2OverPi * (x + kGeluCoeff * x * x * x);
  const float t = tanhf(u);
  const float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCoeff * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

__global__ void FillKernel(float* x, float value, size_t n) {
  for (size_t i = GlobalThread(); i < n; i += GridStride()) x[i] = value;
}

__global__ void AxpyKernel(float alpha, const float* x, float* y, size_t n) {
  for (size_t i = GlobalThread(); i < n; i += GridStride()) y[i] += alpha * x[i];
}

__global__ void ScaleKernel(float alpha, float* x, size_t n) {
  for (size_t i = GlobalThread(); i < n; i += GridStride()) x[i] *= alpha;
}

// The strided 2-D kernels walk the rows x cols logical elements linearly, so consecutive
// threads touch consecutive columns (coalesced) whatever the row stride.
__global__ void AddRowVectorKernel(float* x, int rows, int cols, int ld, const float* v) {
  const size_t total = static_cast<size_t>(rows) * cols;
  for (size_t i = GlobalThread(); i < total; i += GridStride()) {
    const size_t r = i / cols;
    const size_t c = i % cols;
    x[r * ld + c] += v[c];
  }
}

__global__ void GeluForwardKernel(const float* pre, float* out, int rows, int cols, int ld) {
  const size_t total = static_cast<size_t>(rows) * cols;
  for (size_t i = GlobalThread(); i < total; i += GridStride()) {
    const size_t at = (i / cols) * ld + i % cols;
    out[at] = Gelu(pre[at]);
  }
}

__global__ void GeluBackwardKernel(const float* pre, const float* dout, float* dpre, int rows,
                                   int cols, int ld) {
  const size_t total = static_cast<size_t>(rows) * cols;
  for (size_t i = GlobalThread(); i < total; i += GridStride()) {
    const size_t at = (i / cols) * ld + i % cols;
    dpre[at] = dout[at] * GeluGrad(pre[at]);
  }
}

// Column sums: a block covers 32 adjacent columns (coalesced loads across threadIdx.x) and
// splits the rows over threadIdx.y; the 16 partial sums per column are then added in a
// fixed order, so the result does not depend on scheduling.
constexpr int kColumnSumCols = 32;
constexpr int kColumnSumRowLanes = 16;

__global__ void ColumnSumKernel(const float* x, int rows, int cols, int ld, float alpha, float beta,
                                float* out) {
  __shared__ float partial[kColumnSumRowLanes][kColumnSumCols + 1];
  const int c = blockIdx.x * kColumnSumCols + threadIdx.x;
  float sum = 0.0f;
  if (c < cols) {
    for (int r = threadIdx.y; r < rows; r += kColumnSumRowLanes) {
      sum += x[static_cast<size_t>(r) * ld + c];
    }
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float total = 0.0f;
    for (int i = 0; i < kColumnSumRowLanes; ++i) total += partial[i][threadIdx.x];
    out[c] = beta == 0.0f ? alpha * total : beta * out[c] + alpha * total;
  }
}

__global__ void SoftmaxRowsKernel(float* x, int rows, int cols, float scale, bool causal) {
  __shared__ float shared[32];
  for (int row = blockIdx.x; row < rows; row += gridDim.x) {
    float* xr = x + static_cast<size_t>(row) * cols;
    const int seen = causal ? row % cols + 1 : cols;
    float local_max = -INFINITY;
    for (int c = threadIdx.x; c < seen; c += blockDim.x)
      local_max = fmaxf(local_max, scale * xr[c]);
    const float row_max = BlockReduce(local_max, MaxOp(), -INFINITY, shared);
    float local_sum = 0.0f;
    for (int c = threadIdx.x; c < seen; c += blockDim.x) local_sum += expf(scale * xr[c] - row_max);
    const float row_sum = BlockReduce(local_sum, SumOp(), 0.0f, shared);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
      xr[c] = c < seen ? expf(scale * xr[c] - row_max) / row_sum : 0.0f;
    }
  }
}

// One thread per rotated pair (row, group, head, j < head_dim / 2).
__global__ void RotaryKernel(float* x, int rows, int seq, int ld, int groups, int group_stride,
                             int heads, int head_dim, const float* cos, const float* sin,
                             float sign) {
  const int half = head_dim / 2;
  const size_t total = static_cast<size_t>(rows) * groups * heads * half;
  for (size_t i = GlobalThread(); i < total; i += GridStride()) {
    const int j = static_cast<int>(i % half);
    size_t rest = i / half;
    const int head = static_cast<int>(rest % heads);
    rest /= heads;
    const int g = static_cast<int>(rest % groups);
    const size_t r = rest / groups;
    const size_t angle = (r % seq) * half + j;
    float* a = x + r * ld + static_cast<size_t>(g) * group_stride + head * head_dim + j;
    const float aj = a[0], bj = a[half], c = cos[angle], s = sign * sin[angle];
    a[0] = aj * c - bj * s;
    a[half] = bj * c + aj * s;
  }
}

__global__ void SwiGluForwardKernel(const float* gate_up, float* out, int rows, int units,
                                    int unit_size) {
  const size_t n = static_cast<size_t>(units) * unit_size;
  const size_t total = static_cast<size_t>(rows) * n;
  for (size_t i = GlobalThread(); i < total; i += GridStride()) {
    const size_t r = i / n, col = i % n, u = col / unit_size, k = col % unit_size;
    const float* g = gate_up + r * 2 * n + u * 2 * unit_size + k;
    out[i] = g[0] / (1.0f + expf(-g[0])) * g[unit_size];
  }
}

__global__ void SwiGluBackwardKernel(const float* gate_up, const float* dout, float* dgate_up,
                                     int rows, int units, int unit_size) {
  const size_t n = static_cast<size_t>(units) * unit_size;
  const size_t total = static_cast<size_t>(rows) * n;
  for (size_t i = GlobalThread(); i < total; i += GridStride()) {
    const size_t r = i / n, col = i % n, u = col / unit_size, k = col % unit_size;
    const size_t at = r * 2 * n + u * 2 * unit_size + k;
    const float g = gate_up[at], up = gate_up[at + unit_size], d = dout[i];
    const float sig = 1.0f / (1.0f + expf(-g));
    dgate_up[at + unit_size] = d * g * sig;
    dgate_up[at] = d * up * sig * (1.0f + g * (1.0f - sig));
  }
}

__global__ void SoftmaxBackwardRowsKernel(const float* p, float* dx, int rows, int cols,
                                          float scale) {
  __shared__ float shared[32];
  for (int row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* pr = p + static_cast<size_t>(row) * cols;
    float* dr = dx + static_cast<size_t>(row) * cols;
    float local_dot = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) local_dot += dr[c] * pr[c];
    const float dot = BlockReduce(local_dot, SumOp(), 0.0f, shared);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) dr[c] = scale * pr[c] * (dr[c] - dot);
  }
}

// One block per row: mean and variance by two block reductions (the row is re-read from
// L1/L2, which at transformer widths is cheaper than staging it in shared memory).
__global__ void LayerNormForwardKernel(const float* x, const float* gamma, const float* beta,
                                       int rows, int cols, float eps, float* y, float* mean,
                                       float* rstd) {
  __shared__ float shared[32];
  for (int row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* xr = x + static_cast<size_t>(row) * cols;
    float* yr = y + static_cast<size_t>(row) * cols;
    float local = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) local += xr[c];
    const float mu = BlockReduce(local, SumOp(), 0.0f, shared) / cols;
    float local_sq = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) local_sq += (xr[c] - mu) * (xr[c] - mu);
    const float inv = rsqrtf(BlockReduce(local_sq, SumOp(), 0.0f, shared) / cols + eps);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
      yr[c] = (xr[c] - mu) * inv * gamma[c] + beta[c];
    }
    if (threadIdx.x == 0) {
      mean[row] = mu;
      rstd[row] = inv;
    }
  }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * gamma.
__global__ void LayerNormBackwardDxKernel(const float* x, const float* gamma, const float* mean,
                                          const float* rstd, const float* dy, int rows, int cols,
                                          float* dx) {
  __shared__ float shared[32];
  for (int row = blockIdx.x; row < rows; row += gridDim.x) {
    const size_t base = static_cast<size_t>(row) * cols;
    const float mu = mean[row], inv = rstd[row];
    float local_g = 0.0f, local_gx = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
      const float g = dy[base + c] * gamma[c];
      local_g += g;
      local_gx += g * (x[base + c] - mu) * inv;
    }
    const float mean_g = BlockReduce(local_g, SumOp(), 0.0f, shared) / cols;
    const float mean_gx = BlockReduce(local_gx, SumOp(), 0.0f, shared) / cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
      const float xhat = (x[base + c] - mu) * inv;
      dx[base + c] = inv * (dy[base + c] * gamma[c] - mean_g - xhat * mean_gx);
    }
  }
}

// dgamma and dbeta: a block per 32 columns, whose 32 x 32 threads split the rows 32 ways
// (a warp reads 32 adjacent columns of one row: coalesced). Each column's 32 partial sums
// are then added in a fixed order, so the result is deterministic. One thread per column
// walking every row, as before, ran 3 blocks at width 768 on a 132-SM GPU, and inflated
// the very compute time Ballast balances on.
constexpr int kParamCols = 32;
constexpr int kParamRowSplit = 32;

// 1024 threads a block: the bound keeps the compiler within the registers that allows,
// in any build (a -G debug build would otherwise fail the launch for lack of them).
__global__ void __launch_bounds__(kParamCols* kParamRowSplit)
    LayerNormBackwardParamsKernel(const float* x, const float* mean, const float* rstd,
                                  const float* dy, int rows, int cols, float* dgamma,
                                  float* dbeta) {
  __shared__ float partial_g[kParamRowSplit][kParamCols + 1];  // +1: no bank conflicts
  __shared__ float partial_b[kParamRowSplit][kParamCols + 1];
  const int c = blockIdx.x * kParamCols + threadIdx.x;
  float dg = 0.0f, db = 0.0f;
  if (c < cols) {
    for (int r = threadIdx.y; r < rows; r += kParamRowSplit) {
      const size_t i = static_cast<size_t>(r) * cols + c;
      dg += dy[i] * (x[i] - mean[r]) * rstd[r];
      db += dy[i];
    }
  }
  partial_g[threadIdx.y][threadIdx.x] = dg;
  partial_b[threadIdx.y][threadIdx.x] = db;
  __syncthreads();
  if (threadIdx.y != 0 || c >= cols) return;
  float sum_g = 0.0f, sum_b = 0.0f;
  for (int k = 0; k < kParamRowSplit; ++k) {
    sum_g += partial_g[k][threadIdx.x];
    sum_b += partial_b[k][threadIdx.x];
  }
  dgamma[c] = sum_g;
  dbeta[c] = sum_b;
}

__global__ void AdamWKernel(AdamWKernelParams params, float* w, const float* g, float* m, float* v,
                            size_t n) {
  for (size_t i = GlobalThread(); i < n; i += GridStride()) {
    const float grad = g[i];
    const float m_new = params.beta1 * m[i] + (1.0f - params.beta1) * grad;
    const float v_new = params.beta2 * v[i] + (1.0f - params.beta2) * grad * grad;
    m[i] = m_new;
    v[i] = v_new;
    const float m_hat = m_new / params.bias_correction1;
    const float v_hat = v_new / params.bias_correction2;
    const float wi = w[i];
    w[i] = wi - params.lr * (params.weight_decay * wi + m_hat / (sqrtf(v_hat) + params.eps));
  }
}

// UnitL1 in two deterministic passes: grid (unit, part) writes one double partial per part
// of a unit, then one warp per unit adds that unit's partials in order. Splitting a unit
// into parts keeps the GPU busy when there are few, large units.
constexpr size_t kUnitL1ElemsPerPart = kThreads * 8;
constexpr size_t kUnitL1MaxParts = 256;
// Below this many blocks in total, large units are split further.
constexpr size_t kUnitL1TargetBlocks = 4096;

size_t UnitL1Parts(int units, size_t unit_elems) {
  if (units <= 0) return 1;
  const size_t by_size = (unit_elems + kUnitL1ElemsPerPart - 1) / kUnitL1ElemsPerPart;
  const size_t by_occupancy =
      (kUnitL1TargetBlocks + static_cast<size_t>(units) - 1) / static_cast<size_t>(units);
  return std::max<size_t>(1, std::min({by_size, by_occupancy, kUnitL1MaxParts}));
}

__global__ void UnitL1PartialKernel(const float* a, const float* b, size_t unit_elems, size_t chunk,
                                    double* partials) {
  __shared__ double shared[32];
  const size_t unit = blockIdx.x;
  const size_t part = blockIdx.y;
  const size_t begin = part * chunk;
  const size_t end = begin + chunk < unit_elems ? begin + chunk : unit_elems;
  const float* au = a + unit * unit_elems;
  const float* bu = b == nullptr ? nullptr : b + unit * unit_elems;
  double sum = 0.0;
  for (size_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    sum += bu == nullptr ? fabsf(au[i]) : fabsf(au[i] - bu[i]);
  }
  sum = BlockReduce(sum, SumOp(), 0.0, shared);
  if (threadIdx.x == 0) partials[unit * gridDim.y + part] = sum;
}

__global__ void UnitL1FinalKernel(const double* partials, size_t parts, double* out) {
  const size_t unit = blockIdx.x;
  double sum = 0.0;
  for (size_t i = threadIdx.x; i < parts; i += 32) sum += partials[unit * parts + i];
  sum = WarpReduce(sum, SumOp());
  if (threadIdx.x == 0) out[unit] = sum;
}

// Threads per row for the softmax kernels: enough warps to cover short rows without idle
// warps, at most kThreads.
int RowThreads(int cols) {
  int threads = 32;
  while (threads < kThreads && threads < cols) threads *= 2;
  return threads;
}

constexpr int kMaxRowBlocks = 1 << 16;

__global__ void AddSquaredNormKernel(const float* x, size_t n, float* sum) {
  __shared__ float shared[32];
  float local = 0.0f;
  for (size_t i = GlobalThread(); i < n; i += GridStride()) local += x[i] * x[i];
  const float block = BlockReduce(local, SumOp(), 0.0f, shared);
  if (threadIdx.x == 0) atomicAdd(sum, block);
}

// One thread per element of the n x cols output, walked linearly (coalesced columns).
__global__ void GatherRowsKernel(const float* src, int ld_src, const int32_t* rows,
                                 const float* scale, int n, int cols, float* dst, int ld_dst) {
  const size_t total = static_cast<size_t>(n) * cols;
  for (size_t i = GlobalThread(); i < total; i += GridStride()) {
    const size_t r = i / cols, c = i % cols;
    const float v = src[static_cast<size_t>(rows[r]) * ld_src + c];
    dst[r * ld_dst + c] = scale == nullptr ? v : scale[r] * v;
  }
}

// Distinct rows: each destination element has exactly one writer.
__global__ void ScatterAddRowsKernel(const float* src, int ld_src, const int32_t* rows,
                                     const float* scale, int n, int cols, float* dst, int ld_dst) {
  const size_t total = static_cast<size_t>(n) * cols;
  for (size_t i = GlobalThread(); i < total; i += GridStride()) {
    const size_t r = i / cols, c = i % cols;
    const float f = scale == nullptr ? 1.0f : scale[r];
    dst[static_cast<size_t>(rows[r]) * ld_dst + c] += f * src[r * ld_src + c];
  }
}

__global__ void RowDotsKernel(const float* a, int lda, const float* b, int ldb, int n, int cols,
                              float* out) {
  __shared__ float shared[32];
  for (int row = blockIdx.x; row < n; row += gridDim.x) {
    const float* ar = a + static_cast<size_t>(row) * lda;
    const float* br = b + static_cast<size_t>(row) * ldb;
    float local = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) local += ar[c] * br[c];
    const float dot = BlockReduce(local, SumOp(), 0.0f, shared);
    if (threadIdx.x == 0) out[row] = dot;
  }
}

}  // namespace

cudaError_t LaunchFill(float* x, float value, size_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  FillKernel<<<BlocksFor(n), kThreads, 0, stream>>>(x, value, n);
  return cudaGetLastError();
}

cudaError_t LaunchAxpy(float alpha, const float* x, float* y, size_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  AxpyKernel<<<BlocksFor(n), kThreads, 0, stream>>>(alpha, x, y, n);
  return cudaGetLastError();
}

cudaError_t LaunchScale(float alpha, float* x, size_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  ScaleKernel<<<BlocksFor(n), kThreads, 0, stream>>>(alpha, x, n);
  return cudaGetLastError();
}

cudaError_t LaunchAddRowVector(float* x, int rows, int cols, int ld, const float* v,
                               cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  const size_t total = static_cast<size_t>(rows) * cols;
  AddRowVectorKernel<<<BlocksFor(total), kThreads, 0, stream>>>(x, rows, cols, ld, v);
  return cudaGetLastError();
}

cudaError_t LaunchColumnSum(const float* x, int rows, int cols, int ld, float alpha, float beta,
                            float* out, cudaStream_t stream) {
  if (cols <= 0) return cudaSuccess;
  // rows == 0 still launches: out = beta * out is the documented result.
  const int safe_rows = rows < 0 ? 0 : rows;
  const dim3 block(kColumnSumCols, kColumnSumRowLanes);
  const dim3 grid((cols + kColumnSumCols - 1) / kColumnSumCols);
  ColumnSumKernel<<<grid, block, 0, stream>>>(x, safe_rows, cols, ld, alpha, beta, out);
  return cudaGetLastError();
}

cudaError_t LaunchGeluForward(const float* pre, float* out, int rows, int cols, int ld,
                              cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  const size_t total = static_cast<size_t>(rows) * cols;
  GeluForwardKernel<<<BlocksFor(total), kThreads, 0, stream>>>(pre, out, rows, cols, ld);
  return cudaGetLastError();
}

cudaError_t LaunchGeluBackward(const float* pre, const float* dout, float* dpre, int rows, int cols,
                               int ld, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  const size_t total = static_cast<size_t>(rows) * cols;
  GeluBackwardKernel<<<BlocksFor(total), kThreads, 0, stream>>>(pre, dout, dpre, rows, cols, ld);
  return cudaGetLastError();
}

cudaError_t LaunchSoftmaxRows(float* x, int rows, int cols, float scale, bool causal,
                              cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  const int blocks = std::min(rows, kMaxRowBlocks);
  SoftmaxRowsKernel<<<blocks, RowThreads(cols), 0, stream>>>(x, rows, cols, scale, causal);
  return cudaGetLastError();
}

cudaError_t LaunchRotary(float* x, int rows, int seq, int ld, int groups, int group_stride,
                         int heads, int head_dim, const float* cos, const float* sin, bool inverse,
                         cudaStream_t stream) {
  if (rows <= 0 || groups <= 0 || heads <= 0 || head_dim < 2 || seq <= 0) return cudaSuccess;
  const size_t total = static_cast<size_t>(rows) * groups * heads * (head_dim / 2);
  RotaryKernel<<<BlocksFor(total), kThreads, 0, stream>>>(
      x, rows, seq, ld, groups, group_stride, heads, head_dim, cos, sin, inverse ? -1.0f : 1.0f);
  return cudaGetLastError();
}

cudaError_t LaunchSwiGluForward(const float* gate_up, float* out, int rows, int units,
                                int unit_size, cudaStream_t stream) {
  if (rows <= 0 || units <= 0 || unit_size <= 0) return cudaSuccess;
  const size_t total = static_cast<size_t>(rows) * units * unit_size;
  SwiGluForwardKernel<<<BlocksFor(total), kThreads, 0, stream>>>(gate_up, out, rows, units,
                                                                 unit_size);
  return cudaGetLastError();
}

cudaError_t LaunchSwiGluBackward(const float* gate_up, const float* dout, float* dgate_up, int rows,
                                 int units, int unit_size, cudaStream_t stream) {
  if (rows <= 0 || units <= 0 || unit_size <= 0) return cudaSuccess;
  const size_t total = static_cast<size_t>(rows) * units * unit_size;
  SwiGluBackwardKernel<<<BlocksFor(total), kThreads, 0, stream>>>(gate_up, dout, dgate_up, rows,
                                                                  units, unit_size);
  return cudaGetLastError();
}

cudaError_t LaunchSoftmaxBackwardRows(const float* p, float* dx, int rows, int cols, float scale,
                                      cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  const int blocks = std::min(rows, kMaxRowBlocks);
  SoftmaxBackwardRowsKernel<<<blocks, RowThreads(cols), 0, stream>>>(p, dx, rows, cols, scale);
  return cudaGetLastError();
}

cudaError_t LaunchLayerNormForward(const float* x, const float* gamma, const float* beta, int rows,
                                   int cols, float eps, float* y, float* mean, float* rstd,
                                   cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  const int blocks = std::min(rows, kMaxRowBlocks);
  LayerNormForwardKernel<<<blocks, RowThreads(cols), 0, stream>>>(x, gamma, beta, rows, cols, eps,
                                                                  y, mean, rstd);
  return cudaGetLastError();
}

cudaError_t LaunchLayerNormBackward(const float* x, const float* gamma, const float* mean,
                                    const float* rstd, const float* dy, int rows, int cols,
                                    float* dx, float* dgamma, float* dbeta, cudaStream_t stream) {
  if (cols <= 0) return cudaSuccess;
  // With no rows dgamma and dbeta are still written (zeros), as compute.h says.
  if (rows > 0) {
    const int blocks = std::min(rows, kMaxRowBlocks);
    LayerNormBackwardDxKernel<<<blocks, RowThreads(cols), 0, stream>>>(x, gamma, mean, rstd, dy,
                                                                       rows, cols, dx);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  const unsigned column_blocks = static_cast<unsigned>((cols + kParamCols - 1) / kParamCols);
  LayerNormBackwardParamsKernel<<<column_blocks, dim3(kParamCols, kParamRowSplit), 0, stream>>>(
      x, mean, rstd, dy, rows, cols, dgamma, dbeta);
  return cudaGetLastError();
}

cudaError_t LaunchAdamW(const AdamWKernelParams& params, float* w, const float* g, float* m,
                        float* v, size_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  AdamWKernel<<<BlocksFor(n), kThreads, 0, stream>>>(params, w, g, m, v, n);
  return cudaGetLastError();
}

cudaError_t LaunchAddSquaredNorm(const float* x, size_t n, float* sum, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  AddSquaredNormKernel<<<BlocksFor(n), kThreads, 0, stream>>>(x, n, sum);
  return cudaGetLastError();
}

size_t UnitL1ScratchDoubles(int units, size_t unit_elems) {
  if (units <= 0) return 0;
  return static_cast<size_t>(units) * UnitL1Parts(units, unit_elems);
}

cudaError_t LaunchUnitL1(const float* a, const float* b, int units, size_t unit_elems,
                         double* scratch, double* out, cudaStream_t stream) {
  if (units <= 0) return cudaSuccess;
  const size_t parts = UnitL1Parts(units, unit_elems);
  const size_t chunk = (unit_elems + parts - 1) / parts;
  const dim3 grid(static_cast<unsigned>(units), static_cast<unsigned>(parts));
  UnitL1PartialKernel<<<grid, kThreads, 0, stream>>>(a, b, unit_elems, chunk, scratch);
  const cudaError_t partial_status = cudaGetLastError();
  if (partial_status != cudaSuccess) return partial_status;
  UnitL1FinalKernel<<<units, 32, 0, stream>>>(scratch, parts, out);
  return cudaGetLastError();
}

cudaError_t LaunchGatherRows(const float* src, int ld_src, const int32_t* rows, const float* scale,
                             int n, int cols, float* dst, int ld_dst, cudaStream_t stream) {
  if (n <= 0 || cols <= 0) return cudaSuccess;
  const size_t total = static_cast<size_t>(n) * cols;
  GatherRowsKernel<<<BlocksFor(total), kThreads, 0, stream>>>(src, ld_src, rows, scale, n, cols,
                                                              dst, ld_dst);
  return cudaGetLastError();
}

cudaError_t LaunchScatterAddRows(const float* src, int ld_src, const int32_t* rows,
                                 const float* scale, int n, int cols, float* dst, int ld_dst,
                                 cudaStream_t stream) {
  if (n <= 0 || cols <= 0) return cudaSuccess;
  const size_t total = static_cast<size_t>(n) * cols;
  ScatterAddRowsKernel<<<BlocksFor(total), kThreads, 0, stream>>>(src, ld_src, rows, scale, n, cols,
                                                                  dst, ld_dst);
  return cudaGetLastError();
}

cudaError_t LaunchRowDots(const float* a, int lda, const float* b, int ldb, int n, int cols,
                          float* out, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  // cols == 0 still launches: the outputs are zeros.
  const int safe_cols = cols < 0 ? 0 : cols;
  const int blocks = std::min(n, kMaxRowBlocks);
  RowDotsKernel<<<blocks, RowThreads(safe_cols), 0, stream>>>(a, lda, b, ldb, n, safe_cols, out);
  return cudaGetLastError();
}

}  // namespace ballast::cuda_internal
