// Compute on host memory: OpenBLAS for GEMMs, plain loops (auto-vectorised) for the rest.
#ifndef BALLAST_WORKER_LIB_CPU_CPU_COMPUTE_H_
#define BALLAST_WORKER_LIB_CPU_CPU_COMPUTE_H_

#include <memory>
#include <utility>

#include "ballast/compute.h"
#include "common/clock.h"
#include "internal/compute_checks.h"

namespace ballast::internal {

class CpuCompute final : public Compute {
 public:
  // `failure` is shared with the backend's communicator, which reports a failed call
  // instead of running a collective on what it left behind.
  CpuCompute(const Clock* clock, std::shared_ptr<ComputeFailure> failure)
      : clock_(clock), failure_(std::move(failure)) {}

  absl::StatusOr<Buffer> Allocate(size_t n) override;
  void CopyFromHost(const float* host, float* dst, size_t n) override;
  void CopyToHost(const float* src, float* host, size_t n) override;
  void Copy(const float* src, float* dst, size_t n) override;
  void Fill(float* x, float value, size_t n) override;
  void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
            const float* b, int ldb, float beta, float* c, int ldc) override;
  void GemmStridedBatched(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                          const float* a, int lda, int64_t stride_a, const float* b, int ldb,
                          int64_t stride_b, float beta, float* c, int ldc, int64_t stride_c,
                          int batch) override;
  void Axpy(float alpha, const float* x, float* y, size_t n) override;
  void Scale(float alpha, float* x, size_t n) override;
  void AddRowVector(float* x, int rows, int cols, int ld, const float* v) override;
  void ColumnSum(const float* x, int rows, int cols, int ld, float alpha, float beta,
                 float* out) override;
  void GeluForward(const float* pre, float* out, int rows, int cols, int ld) override;
  void GeluBackward(const float* pre, const float* dout, float* dpre, int rows, int cols,
                    int ld) override;
  void SoftmaxRows(float* x, int rows, int cols, float scale, bool causal) override;
  void Rotary(float* x, int rows, int seq, int ld, int groups, int group_stride, int heads,
              int head_dim, const float* cos, const float* sin, bool inverse) override;
  void SwiGluForward(const float* gate_up, float* out, int rows, int units, int unit_size) override;
  void SwiGluBackward(const float* gate_up, const float* dout, float* dgate_up, int rows, int units,
                      int unit_size) override;
  void GatherRows(const float* src, int src_rows, int ld_src, const int32_t* rows,
                  const float* scale, int n, int cols, float* dst, int ld_dst) override;
  void ScatterAddRows(const float* src, int ld_src, const int32_t* rows, const float* scale, int n,
                      int cols, float* dst, int dst_rows, int ld_dst) override;
  void RowDots(const float* a, int lda, const float* b, int ldb, int n, int cols,
               float* out) override;
  void SoftmaxBackwardRows(const float* p, float* dx, int rows, int cols, float scale) override;
  void LayerNormForward(const float* x, const float* gamma, const float* beta, int rows, int cols,
                        float eps, float* y, float* mean, float* rstd) override;
  void LayerNormBackward(const float* x, const float* gamma, const float* mean, const float* rstd,
                         const float* dy, int rows, int cols, float* dx, float* dgamma,
                         float* dbeta) override;
  void AdamW(const AdamWOptions& options, int64_t step, float* w, const float* g, float* m,
             float* v, size_t n) override;
  void AddSquaredNorm(const float* x, size_t n, float* sum) override;
  absl::Status UnitL1(const float* a, const float* b, int units, size_t unit_elems,
                      double* out_host) override;
  // Work is done when each call returns; what is left to report is a call that failed.
  absl::Status Synchronize() override { return failure_->Take(); }
  std::unique_ptr<IntervalTimer> NewTimer() override;

 private:
  const Clock* clock_;
  std::shared_ptr<ComputeFailure> failure_;
};

}  // namespace ballast::internal

#endif  // BALLAST_WORKER_LIB_CPU_CPU_COMPUTE_H_
