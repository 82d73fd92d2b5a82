#include "cuda/cuda_compute.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_kernels.h"
#include "cuda/cuda_timer.h"
#include "internal/compute_checks.h"

namespace ballast::cuda_internal {
namespace {

cublasOperation_t ToCublasOp(bool transpose) { return transpose ? CUBLAS_OP_T : CUBLAS_OP_N; }

using ::ballast::internal::CheckAdamWStep;
using ::ballast::internal::CheckBatch;
using ::ballast::internal::CheckCopy;
using ::ballast::internal::CheckGatherRows;
using ::ballast::internal::CheckGemm;
using ::ballast::internal::CheckLayerNormBackward;
using ::ballast::internal::CheckRotary;
using ::ballast::internal::CheckRowDots;
using ::ballast::internal::CheckRowMajor;
using ::ballast::internal::CheckScatterAddRows;
using ::ballast::internal::CheckSquaredNorm;
using ::ballast::internal::CheckSwiGlu;
using ::ballast::internal::CheckUnitL1;

class CudaCompute : public Compute {
 public:
  static absl::StatusOr<std::unique_ptr<CudaCompute>> Create(std::shared_ptr<StreamContext> ctx,
                                                             GemmPrecision precision) {
    ScopedDevice scoped(ctx->device());
    BALLAST_RETURN_IF_ERROR(scoped.status());
    cublasHandle_t handle = nullptr;
    BALLAST_CUBLAS_RETURN_IF_ERROR(cublasCreate(&handle));
    // Owns the handle from here on, also on the error paths below.
    std::unique_ptr<CudaCompute> compute(new CudaCompute(ctx, handle));
    switch (precision) {
      case GemmPrecision::kFp32:
        compute->compute_type_ = CUBLAS_COMPUTE_32F;
        break;
      case GemmPrecision::kBf16:
        compute->compute_type_ = CUBLAS_COMPUTE_32F_FAST_16BF;
        break;
      case GemmPrecision::kFp16:
        compute->compute_type_ = CUBLAS_COMPUTE_32F_FAST_16F;
        break;
    }
    BALLAST_CUBLAS_RETURN_IF_ERROR(cublasSetStream(handle, ctx->stream()));
    // Plain FP32 (no TF32 tensor-op math): the CPU backend is the reference and the two
    // must agree to ~1e-5, which TF32's 10-bit mantissa would not.
    BALLAST_CUBLAS_RETURN_IF_ERROR(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));
    return compute;
  }

  ~CudaCompute() override {
    ScopedDevice scoped(ctx_->device());
    cudaStreamSynchronize(ctx_->stream());
    cublasDestroy(cublas_);
    cudaGetLastError();
  }

  absl::StatusOr<Buffer> Allocate(size_t n) override {
    const ScopedDevice scoped(ctx_->device());
    if (n == 0) return Buffer();
    if (n > std::numeric_limits<size_t>::max() / sizeof(float)) {
      return absl::InvalidArgumentError(absl::StrCat("Allocate: ", n, " floats overflow"));
    }
    BALLAST_RETURN_IF_ERROR(scoped.status());
    BALLAST_ASSIGN_OR_RETURN(void* raw, ctx_->AllocateBytes(n * sizeof(float)));
    float* data = static_cast<float*>(raw);
    Buffer buffer(data, n, [ctx = ctx_](float* ptr) { ctx->FreeBytes(ptr); });
    BALLAST_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(data, 0, n * sizeof(float), stream()));
    return buffer;
  }

  // Both host copies complete before returning, as on the CPU backend: callers read the
  // host buffer (or reuse it) right away. Pageable copies would mostly behave so anyway;
  // pinned ones would not.
  void CopyFromHost(const float* host, float* dst, size_t n) override {
    const ScopedDevice scoped(ctx_->device());
    if (n == 0 || !Defer(scoped.status())) return;
    Defer(BALLAST_CUDA_STATUS(
        cudaMemcpyAsync(dst, host, n * sizeof(float), cudaMemcpyHostToDevice, stream())));
    Defer(BALLAST_CUDA_STATUS(cudaStreamSynchronize(stream())));
  }

  void CopyToHost(const float* src, float* host, size_t n) override {
    const ScopedDevice scoped(ctx_->device());
    if (n == 0 || !Defer(scoped.status())) return;
    Defer(BALLAST_CUDA_STATUS(
        cudaMemcpyAsync(host, src, n * sizeof(float), cudaMemcpyDeviceToHost, stream())));
    Defer(BALLAST_CUDA_STATUS(cudaStreamSynchronize(stream())));
  }

  void Copy(const float* src, float* dst, size_t n) override {
    const ScopedDevice scoped(ctx_->device());
    if (!Defer(CheckCopy(src, dst, n)) || n == 0 || src == dst || !Defer(scoped.status())) return;
    Defer(BALLAST_CUDA_STATUS(
        cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, stream())));
  }

  void Fill(float* x, float value, size_t n) override {
    const ScopedDevice scoped(ctx_->device());
    if (!Defer(scoped.status())) return;
    Defer(BALLAST_CUDA_STATUS(LaunchFill(x, value, n, stream())));
  }

  void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
            const float* b, int ldb, float beta, float* c, int ldc) override {
    const ScopedDevice scoped(ctx_->device());
    if (!Defer(scoped.status())) return;
    if (!Defer(CheckGemm("Gemm", trans_a, trans_b, m, n, k, lda, ldb, ldc))) return;
    if (m == 0 || n == 0) return;
    // Row-major C (m x n, stride ldc) is column-major C^T (n x m, same stride), and
    // C^T = op(B)^T op(A)^T. A row-major operand read column-major is its own transpose,
    // so cuBLAS gets B first, then A, with the transpose flags unchanged and m, n swapped.
    if (compute_type_ == CUBLAS_COMPUTE_32F) {
      Defer(BALLAST_CUBLAS_STATUS(cublasSgemm(cublas_, ToCublasOp(trans_b), ToCublasOp(trans_a), n,
                                              m, k, &alpha, b, ldb, a, lda, &beta, c, ldc)));
      return;
    }
    // fp32 in and out, 16-bit inputs inside: tensor cores with fp32 accumulation.
    Defer(BALLAST_CUBLAS_STATUS(cublasGemmEx(
        cublas_, ToCublasOp(trans_b), ToCublasOp(trans_a), n, m, k, &alpha, b, CUDA_R_32F, ldb, a,
        CUDA_R_32F, lda, &beta, c, CUDA_R_32F, ldc, compute_type_, CUBLAS_GEMM_DEFAULT)));
  }

  void GemmStridedBatched(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                          const float* a, int lda, int64_t stride_a, const float* b, int ldb,
                          int64_t stride_b, float beta, float* c, int ldc, int64_t stride_c,
                          int batch) override {
    const ScopedDevice scoped(ctx_->device());
    if (!Defer(scoped.status())) return;
    if (!Defer(CheckGemm("GemmStridedBatched", trans_a, trans_b, m, n, k, lda, ldb, ldc))) return;
    if (!Defer(CheckBatch("GemmStridedBatched", batch))) return;
    if (m == 0 || n == 0 || batch == 0) return;
    // Same operand swap as Gemm; the strides travel with their matrices.
    if (compute_type_ == CUBLAS_COMPUTE_32F) {
      Defer(BALLAST_CUBLAS_STATUS(cublasSgemmStridedBatched(
          cublas_, ToCublasOp(trans_b), ToCublasOp(trans_a), n, m, k, &alpha, b, ldb, stride_b, a,
          lda, stride_a, &beta, c, ldc, stride_c, batch)));
      return;
    }
    Defer(BALLAST_CUBLAS_STATUS(cublasGemmStridedBatchedEx(
        cublas_, ToCublasOp(trans_b), ToCublasOp(trans_a), n, m, k, &alpha, b, CUDA_R_32F, ldb,
        stride_b, a, CUDA_R_32F, lda, stride_a, &beta, c, CUDA_R_32F, ldc, stride_c, batch,
        compute_type_, CUBLAS_GEMM_DEFAULT)));
  }

  void Axpy(float alpha, const float* x, float* y, size_t n) override {
    const ScopedDevice scoped(ctx_->device());
    if (!Defer(scoped.status())) return;
    Defer(BALLAST_CUDA_STATUS(LaunchAxpy(alpha, x, y, n, stream())));
  }

  void Scale(float alpha, float* x, size_t n) override {
    const ScopedDevice scoped(ctx_->device());
    if (!Defer(scoped.status())) return;
    Defer(BALLAST_CUDA_STATUS(LaunchScale(alpha, x, n, stream())));
  }

  void AddRowVector(float* x, int rows, int cols, int ld, const float* v) override {
    const ScopedDevice scoped(ctx_->device());
    if (!Defer(scoped.status()) || !Defer(CheckRowMajor("AddRowVector", rows, cols, ld))) return;
    Defer(BALLAST_CUDA_STATUS(LaunchAddRowVector(x, rows, cols, ld, v, stream())));
  }

  void ColumnSum(const float* x, int rows, int cols, int ld, float alpha, float beta,
                 float* out) override {
    const ScopedDevice scoped(ctx_->device());
    if (!Defer(scoped.status()) || !Defer(CheckRowMajor("ColumnSum", rows, cols, ld))) return;
    Defer(BALLAST_CUDA_STATUS(LaunchColumnSum(x, rows, cols, ld, alpha, beta, out, stream())));
  }

  void GeluForward(const float* pre, float* out, int rows, int cols, int ld) override {
    const ScopedDevice scoped(ctx_->device());
    if (!Defer(scoped.status()) || !Defer(CheckRowMajor("GeluForward", rows, cols, ld))) return;
    Defer(BALLAST_CUDA_STATUS(LaunchGeluForward(pre, out, rows, cols, ld, stream())));
  }

  void GeluBackward(const float* pre, const float* dout, float* dpre, int rows, int cols,
                    int ld) override {
    const ScopedDevice scoped(ctx_->device());
    if (!Defer(scoped.status()) || !Defer(CheckRowMajor("GeluBackward", rows, cols, ld))) return;
    Defer(BALLAST_CUDA_STATUS(LaunchGeluBackward(pre, dout, dpre, rows, cols, ld, stream())));
  }

  void SoftmaxRows(float* x, int rows, int cols, float scale, bool causal) override {
    const ScopedDevice scoped(ctx_->device());
    if (!Defer(scoped.status()) || !Defer(CheckRowMajor("SoftmaxRows", rows, cols, cols))) return;
    Defer(BALLAST_CUDA_STATUS(LaunchSoftmaxRows(x, rows, cols, scale, causal, stream())));
  }

  void Rotary(float* x, int rows, int seq, int ld, int groups, int group_stride, int heads,
              int head_dim, const float* cos, const float* sin, bool inverse) override {
    const ScopedDevice scoped(ctx_->device());
    if (!Defer(scoped.status()) ||
        !Defer(CheckRotary(rows, seq, ld, groups, group_stride, heads, head_dim))) {
      return;
    }
    Defer(BALLAST_CUDA_STATUS(LaunchRotary(x, rows, seq, ld, groups, group_stride, heads, head_dim,
                                           cos, sin, inverse, stream())));
  }

  void SwiGluForward(const float* gate_up, float* out, int rows, int units,
                     int unit_size) override {
    const ScopedDevice scoped(ctx_->device());
    if (!Defer(scoped.status()) || !Defer(CheckSwiGlu("SwiGluForward", rows, units, unit_size)))
      return;
    Defer(BALLAST_CUDA_STATUS(LaunchSwiGluForward(gate_up, out, rows, units, unit_size, stream())));
  }

  void SwiGluBackward(const float* gate_up, const float* dout, float* dgate_up, int rows, int units,
                      int unit_size) override {
    const ScopedDevice scoped(ctx_->device());
    if (!Defer(scoped.status()) || !Defer(CheckSwiGlu("SwiGluBackward", rows, units, unit_size)))
      return;
    Defer(BALLAST_CUDA_STATUS(
        LaunchSwiGluBackward(gate_up, dout, dgate_up, rows, units, unit_size, stream())));
  }

  void GatherRows(const float* src, int src_rows, int ld_src, const int32_t* rows,
                  const float* scale, int n, int cols, float* dst, int ld_dst) override {
    const ScopedDevice scoped(ctx_->device());
    if (!Defer(scoped.status()) ||
        !Defer(CheckGatherRows(src, src_rows, ld_src, rows, n, cols, dst, ld_dst)) || n == 0 ||
        cols == 0) {
      return;
    }
    RowTable table;
    if (!Defer(StageRowTable(rows, scale, n, table))) return;
    Defer(BALLAST_CUDA_STATUS(
        LaunchGatherRows(src, ld_src, table.rows, table.scale, n, cols, dst, ld_dst, stream())));
    ctx_->FreeBytes(table.memory);
  }

  void ScatterAddRows(const float* src, int ld_src, const int32_t* rows, const float* scale, int n,
                      int cols, float* dst, int dst_rows, int ld_dst) override {
    const ScopedDevice scoped(ctx_->device());
    if (!Defer(scoped.status()) ||
        !Defer(CheckScatterAddRows(src, ld_src, rows, n, cols, dst, dst_rows, ld_dst)) || n == 0 ||
        cols == 0) {
      return;
    }
    RowTable table;
    if (!Defer(StageRowTable(rows, scale, n, table))) return;
    Defer(BALLAST_CUDA_STATUS(LaunchScatterAddRows(src, ld_src, table.rows, table.scale, n, cols,
                                                   dst, ld_dst, stream())));
    ctx_->FreeBytes(table.memory);
  }

  void RowDots(const float* a, int lda, const float* b, int ldb, int n, int cols,
               float* out) override {
    const ScopedDevice scoped(ctx_->device());
    if (!Defer(scoped.status()) || !Defer(CheckRowDots(a, lda, b, ldb, n, cols, out))) return;
    Defer(BALLAST_CUDA_STATUS(LaunchRowDots(a, lda, b, ldb, n, cols, out, stream())));
  }

  void SoftmaxBackwardRows(const float* p, float* dx, int rows, int cols, float scale) override {
    const ScopedDevice scoped(ctx_->device());
    if (!Defer(scoped.status()) || !Defer(CheckRowMajor("SoftmaxBackwardRows", rows, cols, cols)))
      return;
    Defer(BALLAST_CUDA_STATUS(LaunchSoftmaxBackwardRows(p, dx, rows, cols, scale, stream())));
  }

  void LayerNormForward(const float* x, const float* gamma, const float* beta, int rows, int cols,
                        float eps, float* y, float* mean, float* rstd) override {
    const ScopedDevice scoped(ctx_->device());
    if (!Defer(scoped.status()) || !Defer(CheckRowMajor("LayerNormForward", rows, cols, cols)))
      return;
    Defer(BALLAST_CUDA_STATUS(
        LaunchLayerNormForward(x, gamma, beta, rows, cols, eps, y, mean, rstd, stream())));
  }

  void LayerNormBackward(const float* x, const float* gamma, const float* mean, const float* rstd,
                         const float* dy, int rows, int cols, float* dx, float* dgamma,
                         float* dbeta) override {
    const ScopedDevice scoped(ctx_->device());
    if (!Defer(scoped.status()) ||
        !Defer(CheckLayerNormBackward(x, gamma, mean, rstd, dy, rows, cols, dx, dgamma, dbeta))) {
      return;
    }
    Defer(BALLAST_CUDA_STATUS(LaunchLayerNormBackward(x, gamma, mean, rstd, dy, rows, cols, dx,
                                                      dgamma, dbeta, stream())));
  }

  void AdamW(const AdamWOptions& options, int64_t step, float* w, const float* g, float* m,
             float* v, size_t n) override {
    const ScopedDevice scoped(ctx_->device());
    if (!Defer(scoped.status()) || !Defer(CheckAdamWStep(step))) return;
    AdamWKernelParams params;
    params.lr = options.lr;
    params.beta1 = options.beta1;
    params.beta2 = options.beta2;
    params.eps = options.eps;
    params.weight_decay = options.weight_decay;
    // In double: beta2^step for beta2 = 0.999 loses most of its float precision in
    // 1 - beta2^step for small steps.
    params.bias_correction1 = static_cast<float>(
        1.0 - std::pow(static_cast<double>(options.beta1), static_cast<double>(step)));
    params.bias_correction2 = static_cast<float>(
        1.0 - std::pow(static_cast<double>(options.beta2), static_cast<double>(step)));
    Defer(BALLAST_CUDA_STATUS(LaunchAdamW(params, w, g, m, v, n, stream())));
  }

  void AddSquaredNorm(const float* x, size_t n, float* sum) override {
    const ScopedDevice scoped(ctx_->device());
    if (!Defer(scoped.status()) || !Defer(CheckSquaredNorm(x, n, sum))) return;
    Defer(BALLAST_CUDA_STATUS(LaunchAddSquaredNorm(x, n, sum, stream())));
  }

  absl::Status UnitL1(const float* a, const float* b, int units, size_t unit_elems,
                      double* out_host) override {
    const ScopedDevice scoped(ctx_->device());
    BALLAST_RETURN_IF_ERROR(CheckUnitL1(a, units, unit_elems, out_host));
    if (units == 0) return absl::OkStatus();
    BALLAST_RETURN_IF_ERROR(scoped.status());
    const size_t partial_doubles = UnitL1ScratchDoubles(units, unit_elems);
    BALLAST_ASSIGN_OR_RETURN(
        char* raw,
        unit_l1_scratch_.Reserve((static_cast<size_t>(units) + partial_doubles) * sizeof(double)));
    double* out_device = reinterpret_cast<double*>(raw);
    double* partials = out_device + units;
    BALLAST_CUDA_RETURN_IF_ERROR(
        LaunchUnitL1(a, b, units, unit_elems, partials, out_device, stream()));
    BALLAST_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out_host, out_device, units * sizeof(double),
                                                 cudaMemcpyDeviceToHost, stream()));
    BALLAST_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream()));
    return absl::OkStatus();
  }

  absl::Status Synchronize() override {
    const ScopedDevice scoped(ctx_->device());
    absl::Status status = scoped.status();
    if (status.ok()) status = BALLAST_CUDA_STATUS(cudaStreamSynchronize(stream()));
    // The first failure since the last Synchronize wins: later ones are usually its
    // consequences. Reporting it clears it.
    if (absl::Status failed = ctx_->compute_failure()->Take(); !failed.ok())
      status = std::move(failed);
    // An aborted communicator ended its kernels, so the stream reads idle; the step must
    // not end OK on what they should have written.
    if (absl::Status aborted = ctx_->communicator_failure(); status.ok() && !aborted.ok()) {
      status = absl::Status(aborted.code(),
                            absl::StrCat("NCCL communicator was aborted: ", aborted.message()));
    }
    return status;
  }

  std::unique_ptr<IntervalTimer> NewTimer() override {
    return std::make_unique<CudaIntervalTimer>(ctx_);
  }

 private:
  CudaCompute(std::shared_ptr<StreamContext> ctx, cublasHandle_t cublas)
      : ctx_(ctx), cublas_(cublas), unit_l1_scratch_(ctx) {}

  // CUBLAS_COMPUTE_32F (plain Sgemm) unless CudaBackendOptions asked for 16-bit GEMMs.
  cublasComputeType_t compute_type_ = CUBLAS_COMPUTE_32F;

  cudaStream_t stream() const { return ctx_->stream(); }

  // The device copy of a GatherRows / ScatterAddRows host table: n row indices, then n
  // scales when the caller gave them, in one stream-ordered allocation.
  struct RowTable {
    void* memory = nullptr;
    const int32_t* rows = nullptr;
    const float* scale = nullptr;  // null: every scale is 1
  };

  // Copies the caller's host table into device memory, ordered on the stream. The table
  // is first packed into a pageable vector of our own: cudaMemcpyAsync from pageable
  // memory returns once the bytes are staged, which is what lets the caller reuse its
  // arrays on return (compute.h), whereas from pinned memory it would read them later, as
  // the DMA runs. The caller frees `table.memory` (stream-ordered) after its launch.
  absl::Status StageRowTable(const int32_t* rows, const float* scale, int n, RowTable& table) {
    static_assert(sizeof(int32_t) == sizeof(float));
    const size_t count = static_cast<size_t>(n);
    std::vector<int32_t> packed(scale == nullptr ? count : 2 * count);
    std::memcpy(packed.data(), rows, count * sizeof(int32_t));
    if (scale != nullptr) std::memcpy(packed.data() + count, scale, count * sizeof(float));
    const size_t bytes = packed.size() * sizeof(int32_t);
    BALLAST_ASSIGN_OR_RETURN(void* memory, ctx_->AllocateBytes(bytes));
    if (absl::Status copied = BALLAST_CUDA_STATUS(
            cudaMemcpyAsync(memory, packed.data(), bytes, cudaMemcpyHostToDevice, stream()));
        !copied.ok()) {
      ctx_->FreeBytes(memory);
      return copied;
    }
    table.memory = memory;
    table.rows = static_cast<const int32_t*>(memory);
    table.scale = scale == nullptr ? nullptr : reinterpret_cast<const float*>(table.rows + count);
    return absl::OkStatus();
  }

  // Keeps the first failure of a void method for Synchronize() (and the next collective);
  // returns whether `status` is OK.
  bool Defer(absl::Status status) {
    if (status.ok()) return true;
    ctx_->compute_failure()->Defer(std::move(status));
    return false;
  }

  std::shared_ptr<StreamContext> ctx_;
  cublasHandle_t cublas_;
  DeviceScratch unit_l1_scratch_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Compute>> CreateCudaCompute(std::shared_ptr<StreamContext> ctx,
                                                           GemmPrecision precision) {
  BALLAST_ASSIGN_OR_RETURN(std::unique_ptr<CudaCompute> compute,
                           CudaCompute::Create(std::move(ctx), precision));
  return std::unique_ptr<Compute>(std::move(compute));
}

}  // namespace ballast::cuda_internal
