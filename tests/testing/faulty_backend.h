// A backend that wraps a real one and can be told to fail: its compute forwards every call
// to the real compute, and Synchronize() reports an injected failure once, as the CUDA
// compute reports a launch that failed in a void call. Lets CPU tests check that block and
// group code surfaces such failures, which only a GPU produces for real.
//
//   FaultyBackend faulty(std::move(cpu_backend));
//   faulty.FailNextSynchronize(absl::InternalError("cublasSgemm(...) failed"));
#ifndef BALLAST_TESTS_TESTING_FAULTY_BACKEND_H_
#define BALLAST_TESTS_TESTING_FAULTY_BACKEND_H_

#include <memory>
#include <utility>

#include "ballast/backend.h"
#include "ballast/compute.h"

namespace ballast::testing {

class FaultyCompute final : public Compute {
 public:
  explicit FaultyCompute(Compute& real) : real_(real) {}

  void FailNextSynchronize(absl::Status failure) { failure_ = std::move(failure); }

  absl::Status Synchronize() override {
    absl::Status status = real_.Synchronize();
    if (!failure_.ok()) status = std::exchange(failure_, absl::OkStatus());
    return status;
  }

  absl::StatusOr<Buffer> Allocate(size_t n) override { return real_.Allocate(n); }
  void CopyFromHost(const float* host, float* dst, size_t n) override {
    real_.CopyFromHost(host, dst, n);
  }
  void CopyToHost(const float* src, float* host, size_t n) override {
    real_.CopyToHost(src, host, n);
  }
  void Copy(const float* src, float* dst, size_t n) override { real_.Copy(src, dst, n); }
  void Fill(float* x, float value, size_t n) override { real_.Fill(x, value, n); }
  void Gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda,
            const float* b, int ldb, float beta, float* c, int ldc) override {
    real_.Gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  void GemmStridedBatched(bool ta, bool tb, int m, int n, int k, float alpha, const float* a,
                          int lda, int64_t sa, const float* b, int ldb, int64_t sb, float beta,
                          float* c, int ldc, int64_t sc, int batch) override {
    real_.GemmStridedBatched(ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc,
                             batch);
  }
  void Axpy(float alpha, const float* x, float* y, size_t n) override {
    real_.Axpy(alpha, x, y, n);
  }
  void Scale(float alpha, float* x, size_t n) override { real_.Scale(alpha, x, n); }
  void AddRowVector(float* x, int rows, int cols, int ld, const float* v) override {
    real_.AddRowVector(x, rows, cols, ld, v);
  }
  void ColumnSum(const float* x, int rows, int cols, int ld, float alpha, float beta,
                 float* out) override {
    real_.ColumnSum(x, rows, cols, ld, alpha, beta, out);
  }
  void GeluForward(const float* pre, float* out, int rows, int cols, int ld) override {
    real_.GeluForward(pre, out, rows, cols, ld);
  }
  void GeluBackward(const float* pre, const float* dout, float* dpre, int rows, int cols,
                    int ld) override {
    real_.GeluBackward(pre, dout, dpre, rows, cols, ld);
  }
  void SoftmaxRows(float* x, int rows, int cols, float scale, bool causal) override {
    real_.SoftmaxRows(x, rows, cols, scale, causal);
  }
  void SoftmaxBackwardRows(const float* p, float* dx, int rows, int cols, float scale) override {
    real_.SoftmaxBackwardRows(p, dx, rows, cols, scale);
  }
  void Rotary(float* x, int rows, int seq, int ld, int groups, int group_stride, int heads,
              int head_dim, const float* cos, const float* sin, bool inverse) override {
    real_.Rotary(x, rows, seq, ld, groups, group_stride, heads, head_dim, cos, sin, inverse);
  }
  void SwiGluForward(const float* gate_up, float* out, int rows, int units,
                     int unit_size) override {
    real_.SwiGluForward(gate_up, out, rows, units, unit_size);
  }
  void SwiGluBackward(const float* gate_up, const float* dout, float* dgate_up, int rows, int units,
                      int unit_size) override {
    real_.SwiGluBackward(gate_up, dout, dgate_up, rows, units, unit_size);
  }
  void GatherRows(const float* src, int src_rows, int ld_src, const int32_t* rows,
                  const float* scale, int n, int cols, float* dst, int ld_dst) override {
    real_.GatherRows(src, src_rows, ld_src, rows, scale, n, cols, dst, ld_dst);
  }
  void ScatterAddRows(const float* src, int ld_src, const int32_t* rows, const float* scale, int n,
                      int cols, float* dst, int dst_rows, int ld_dst) override {
    real_.ScatterAddRows(src, ld_src, rows, scale, n, cols, dst, dst_rows, ld_dst);
  }
  void RowDots(const float* a, int lda, const float* b, int ldb, int n, int cols,
               float* out) override {
    real_.RowDots(a, lda, b, ldb, n, cols, out);
  }
  void LayerNormForward(const float* x, const float* gamma, const float* beta, int rows, int cols,
                        float eps, float* y, float* mean, float* rstd) override {
    real_.LayerNormForward(x, gamma, beta, rows, cols, eps, y, mean, rstd);
  }
  void LayerNormBackward(const float* x, const float* gamma, const float* mean, const float* rstd,
                         const float* dy, int rows, int cols, float* dx, float* dgamma,
                         float* dbeta) override {
    real_.LayerNormBackward(x, gamma, mean, rstd, dy, rows, cols, dx, dgamma, dbeta);
  }
  void AdamW(const AdamWOptions& options, int64_t step, float* w, const float* g, float* m,
             float* v, size_t n) override {
    real_.AdamW(options, step, w, g, m, v, n);
  }
  void AddSquaredNorm(const float* x, size_t n, float* sum) override {
    real_.AddSquaredNorm(x, n, sum);
  }
  absl::Status UnitL1(const float* a, const float* b, int units, size_t unit_elems,
                      double* out_host) override {
    return real_.UnitL1(a, b, units, unit_elems, out_host);
  }
  std::unique_ptr<IntervalTimer> NewTimer() override { return real_.NewTimer(); }

 private:
  Compute& real_;
  absl::Status failure_;
};

class FaultyBackend final : public Backend {
 public:
  explicit FaultyBackend(std::unique_ptr<Backend> real)
      : real_(std::move(real)), compute_(real_->compute()) {}

  void FailNextSynchronize(absl::Status failure) {
    compute_.FailNextSynchronize(std::move(failure));
  }

  Compute& compute() override { return compute_; }
  Communicator& comm() override { return real_->comm(); }
  const char* name() const override { return real_->name(); }

 private:
  std::unique_ptr<Backend> real_;
  FaultyCompute compute_;
};

}  // namespace ballast::testing

#endif  // BALLAST_TESTS_TESTING_FAULTY_BACKEND_H_
