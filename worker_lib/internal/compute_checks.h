// The argument checks of the Compute contract (ballast/compute.h), shared by every backend
// so that a bad call fails alike on all of them: the same INVALID_ARGUMENT, naming the
// call, reported by Synchronize() and by the next collective (ComputeFailure below).
// Before these were shared, the CPU backend ran a Gemm with a negative dimension into
// OpenBLAS and a LayerNormBackward with dx aliasing dy to a different answer than CUDA's.
#ifndef BALLAST_WORKER_LIB_INTERNAL_COMPUTE_CHECKS_H_
#define BALLAST_WORKER_LIB_INTERNAL_COMPUTE_CHECKS_H_

#include <cstddef>
#include <cstdint>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace ballast::internal {

// rows x cols, row stride ld (>= cols), none negative.
absl::Status CheckRowMajor(const char* op, int rows, int cols, int ld);
absl::Status CheckSwiGlu(const char* op, int rows, int units, int unit_size);
// The shape checks cuBLAS would make, phrased in the row-major terms of compute.h.
absl::Status CheckGemm(const char* op, bool trans_a, bool trans_b, int m, int n, int k, int lda,
                       int ldb, int ldc);
absl::Status CheckBatch(const char* op, int batch);
absl::Status CheckRotary(int rows, int seq, int ld, int groups, int group_stride, int heads,
                         int head_dim);
absl::Status CheckAdamWStep(int64_t step);
// units >= 0; with units > 0, a and out_host non-null (a may be null when unit_elems = 0).
absl::Status CheckUnitL1(const float* a, int units, size_t unit_elems, const double* out_host);
// x and sum non-null when n > 0.
absl::Status CheckSquaredNorm(const float* x, size_t n, const float* sum);
// Source and destination must not overlap unless they are the same range (a no-op).
absl::Status CheckCopy(const float* src, const float* dst, size_t n);
// The outputs (dx, dgamma, dbeta) must not overlap the inputs (x, gamma, mean, rstd, dy)
// or each other: the CUDA kernels read the inputs after writing dx, and the CPU loops in
// another order, so the results differed.
absl::Status CheckLayerNormBackward(const float* x, const float* gamma, const float* mean,
                                    const float* rstd, const float* dy, int rows, int cols,
                                    const float* dx, const float* dgamma, const float* dbeta);

// GatherRows / ScatterAddRows: n, cols and the matrix row counts not negative, strides
// >= cols; src, rows and dst non-null when n > 0 and cols > 0; every rows[i] (a host
// array, checked even with cols = 0) inside the indexed matrix, named with its bound when
// not; for ScatterAddRows the rows distinct (two adds to one row would race on CUDA), the
// repeated one named; dst's span not overlapping src's (a span runs from a matrix's first
// element to its last, padding included, so interleaved matrices count as overlapping).
absl::Status CheckGatherRows(const float* src, int src_rows, int ld_src, const int32_t* rows, int n,
                             int cols, const float* dst, int ld_dst);
absl::Status CheckScatterAddRows(const float* src, int ld_src, const int32_t* rows, int n, int cols,
                                 const float* dst, int dst_rows, int ld_dst);
// n and cols not negative, strides >= cols; a and b non-null when n > 0 and cols > 0, out
// when n > 0 (cols = 0 writes zeros); out not overlapping a or b (a and b may overlap).
absl::Status CheckRowDots(const float* a, int lda, const float* b, int ldb, int n, int cols,
                          const float* out);

// The first failure of a void compute call since it was last taken. Synchronize() takes it;
// so does the next collective, which must not run on what the failed call left behind
// (its peers would get garbage, and the error would read as a communication failure).
class ComputeFailure {
 public:
  // Keeps `status` unless a failure is already held; returns status.ok().
  bool Defer(absl::Status status) {
    if (status.ok()) return true;
    absl::MutexLock lock(&mu_);
    if (failure_.ok()) failure_ = std::move(status);
    return false;
  }
  absl::Status Take() {
    absl::MutexLock lock(&mu_);
    return std::exchange(failure_, absl::OkStatus());
  }

 private:
  absl::Mutex mu_;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ballast::internal

#endif  // BALLAST_WORKER_LIB_INTERNAL_COMPUTE_CHECKS_H_
