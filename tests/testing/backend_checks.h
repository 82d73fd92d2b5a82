// Helpers for tests of backends (tests/worker_lib/compute_conformance_test.cc and the
// CUDA-only tests): random inputs, double-precision host references of the Compute
// kernels, closeness checks and status assertions.
#ifndef BALLAST_TESTS_TESTING_BACKEND_CHECKS_H_
#define BALLAST_TESTS_TESTING_BACKEND_CHECKS_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numbers>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"

#define BALLAST_TEST_EXPECT_OK(expr)                       \
  do {                                                     \
    const ::absl::Status status_ = (expr);                 \
    EXPECT_TRUE(status_.ok()) << #expr << ": " << status_; \
  } while (0)
#define BALLAST_TEST_ASSERT_OK(expr)                       \
  do {                                                     \
    const ::absl::Status status_ = (expr);                 \
    ASSERT_TRUE(status_.ok()) << #expr << ": " << status_; \
  } while (0)

namespace ballast::testing {

inline std::vector<float> Random(size_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> out(n);
  for (float& x : out) x = dist(gen);
  return out;
}

inline std::vector<double> ToDouble(const std::vector<float>& x) { return {x.begin(), x.end()}; }

// |got - want| <= rel * max(|want|, floor): ~1e-5 relative, with an absolute floor for
// values near zero where float rounding of the inputs dominates.
inline void ExpectClose(const std::vector<float>& got, const std::vector<double>& want,
                        double rel = 1e-5, double floor = 1.0) {
  ASSERT_EQ(got.size(), want.size());
  int reported = 0;
  for (size_t i = 0; i < got.size() && reported < 10; ++i) {
    const double tolerance = rel * std::max(std::abs(want[i]), floor);
    if (!(std::abs(got[i] - want[i]) <= tolerance)) {
      ADD_FAILURE() << "element " << i << ": got " << got[i] << ", want " << want[i]
                    << " (tolerance " << tolerance << ")";
      ++reported;
    }
  }
}

// op(X)[i][j] for a row-major stored X with row stride ld.
inline double OpAt(const float* x, bool trans, int ld, int i, int j) {
  return trans ? x[static_cast<size_t>(j) * ld + i] : x[static_cast<size_t>(i) * ld + j];
}

// c = alpha * op(a) op(b) + beta * c, row-major, in double.
inline void ReferenceGemm(bool trans_a, bool trans_b, int m, int n, int k, double alpha,
                          const float* a, int lda, const float* b, int ldb, double beta, double* c,
                          int ldc) {
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double sum = 0;
      for (int p = 0; p < k; ++p) sum += OpAt(a, trans_a, lda, i, p) * OpAt(b, trans_b, ldb, p, j);
      double& out = c[static_cast<size_t>(i) * ldc + j];
      out = alpha * sum + beta * out;
    }
  }
}

inline double GeluRef(double x) {
  const double u = std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1.0 + std::tanh(u));
}

inline double GeluGradRef(double x) {
  const double s = std::sqrt(2.0 / std::numbers::pi);
  const double t = std::tanh(s * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * s * (1.0 + 3.0 * 0.044715 * x * x);
}

inline std::vector<double> ReferenceSoftmax(const std::vector<float>& x, int rows, int cols,
                                            double scale) {
  std::vector<double> out(x.size());
  for (int r = 0; r < rows; ++r) {
    const size_t row = static_cast<size_t>(r) * cols;
    double max = -INFINITY;
    for (int c = 0; c < cols; ++c) max = std::max(max, scale * x[row + c]);
    double sum = 0;
    for (int c = 0; c < cols; ++c) sum += std::exp(scale * x[row + c] - max);
    for (int c = 0; c < cols; ++c) out[row + c] = std::exp(scale * x[row + c] - max) / sum;
  }
  return out;
}

}  // namespace ballast::testing

#endif  // BALLAST_TESTS_TESTING_BACKEND_CHECKS_H_
