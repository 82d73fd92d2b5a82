// The CPU compute (worker_lib/cpu/cpu_compute.cc): OpenBLAS GEMMs and Ballast's kernels
// against naive references. The contract every backend shares is in
// compute_conformance_test.cc; these are the CPU's own cases.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ballast/backend.h"
#include "common/status_macros.h"
#include "testing/rank_threads.h"

namespace ballast {
namespace {

std::unique_ptr<Backend> SingleRank() {
  CpuBackendOptions options;
  options.prefix = "cpu-backend-single";
  auto backend = CreateCpuBackend(options);
  EXPECT_TRUE(backend.ok()) << backend.status();
  return *std::move(backend);
}

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Reference row-major GEMM with explicit strides.
void NaiveGemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda,
               const float* b, int ldb, float beta, float* c, int ldc) {
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double sum = 0;
      for (int p = 0; p < k; ++p) {
        const float av = ta ? a[p * lda + i] : a[i * lda + p];
        const float bv = tb ? b[j * ldb + p] : b[p * ldb + j];
        sum += static_cast<double>(av) * bv;
      }
      c[i * ldc + j] = static_cast<float>(alpha * sum + beta * c[i * ldc + j]);
    }
  }
}

TEST(CpuComputeTest, GemmAllTransposesWithStrides) {
  auto backend = SingleRank();
  Compute& c = backend->compute();
  const int m = 5, n = 7, k = 3;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const int lda = (ta ? m : k) + 2, ldb = (tb ? k : n) + 1, ldc = n + 3;
      std::vector<float> a = Random((ta ? k : m) * lda, 1), b = Random((tb ? n : k) * ldb, 2);
      std::vector<float> got = Random(m * ldc, 3), want = got;
      c.Gemm(ta, tb, m, n, k, 0.5f, a.data(), lda, b.data(), ldb, 2.0f, got.data(), ldc);
      NaiveGemm(ta, tb, m, n, k, 0.5f, a.data(), lda, b.data(), ldb, 2.0f, want.data(), ldc);
      for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4) << ta << tb;
    }
  }
}

TEST(CpuComputeTest, GemmStridedBatchedMatchesLoop) {
  auto backend = SingleRank();
  const int m = 3, n = 4, k = 2, batch = 3;
  std::vector<float> a = Random(batch * 10, 4), b = Random(batch * 12, 5);
  std::vector<float> got(batch * 20, 0.0f), want(batch * 20, 0.0f);
  backend->compute().GemmStridedBatched(false, true, m, n, k, 1.0f, a.data(), k, 10, b.data(), k,
                                        12, 0.0f, got.data(), n, 20, batch);
  for (int i = 0; i < batch; ++i) {
    NaiveGemm(false, true, m, n, k, 1.0f, a.data() + 10 * i, k, b.data() + 12 * i, k, 0.0f,
              want.data() + 20 * i, n);
  }
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5);
}

TEST(CpuComputeTest, GemmWithEmptyInnerDimensionScalesC) {
  auto backend = SingleRank();
  std::vector<float> c = {1, 2, 3, 4};
  backend->compute().Gemm(false, false, 2, 2, 0, 1.0f, nullptr, 1, nullptr, 2, 0.0f, c.data(), 2);
  EXPECT_THAT(c, ::testing::Each(0.0f));
}

TEST(CpuComputeTest, SoftmaxAndItsGradient) {
  auto backend = SingleRank();
  Compute& c = backend->compute();
  const int cols = 6;
  const float scale = 0.7f;
  std::vector<float> x = Random(cols, 6), p = x;
  c.SoftmaxRows(p.data(), 1, cols, scale, false);
  double sum = 0;
  for (float v : p) sum += v;
  EXPECT_NEAR(sum, 1.0, 1e-6);
  // Finite-difference check of d(<w, softmax(scale x)>)/dx.
  std::vector<float> w = Random(cols, 7), grad = w;
  c.SoftmaxBackwardRows(p.data(), grad.data(), 1, cols, scale);
  for (int i = 0; i < cols; ++i) {
    auto f = [&](float delta) {
      std::vector<float> y = x;
      y[i] += delta;
      c.SoftmaxRows(y.data(), 1, cols, scale, false);
      double out = 0;
      for (int j = 0; j < cols; ++j) out += w[j] * y[j];
      return out;
    };
    EXPECT_NEAR(grad[i], (f(1e-3f) - f(-1e-3f)) / 2e-3, 2e-3);
  }
}

TEST(CpuComputeTest, LayerNormAndItsGradients) {
  auto backend = SingleRank();
  Compute& c = backend->compute();
  const int rows = 3, cols = 7;
  const float eps = 1e-5f;
  const std::vector<float> x = Random(rows * cols, 8), gamma = Random(cols, 9),
                           beta = Random(cols, 10), w = Random(rows * cols, 11);
  std::vector<float> y(rows * cols), mean(rows), rstd(rows);
  c.LayerNormForward(x.data(), gamma.data(), beta.data(), rows, cols, eps, y.data(), mean.data(),
                     rstd.data());
  for (int r = 0; r < rows; ++r) {
    double mu = 0, var = 0;
    for (int j = 0; j < cols; ++j) mu += x[r * cols + j];
    mu /= cols;
    for (int j = 0; j < cols; ++j) var += (x[r * cols + j] - mu) * (x[r * cols + j] - mu);
    var /= cols;
    EXPECT_NEAR(mean[r], mu, 1e-6);
    EXPECT_NEAR(rstd[r], 1.0 / std::sqrt(var + eps), 1e-4);
    for (int j = 0; j < cols; ++j) {
      EXPECT_NEAR(y[r * cols + j],
                  (x[r * cols + j] - mu) / std::sqrt(var + eps) * gamma[j] + beta[j], 1e-5);
    }
  }
  // Finite differences of L = <w, layernorm(x; gamma, beta)> in x, gamma and beta.
  std::vector<float> dx(rows * cols), dgamma(cols), dbeta(cols);
  c.LayerNormBackward(x.data(), gamma.data(), mean.data(), rstd.data(), w.data(), rows, cols,
                      dx.data(), dgamma.data(), dbeta.data());
  auto loss = [&](const std::vector<float>& xx, const std::vector<float>& g,
                  const std::vector<float>& b) {
    std::vector<float> yy(rows * cols), m(rows), s(rows);
    c.LayerNormForward(xx.data(), g.data(), b.data(), rows, cols, eps, yy.data(), m.data(),
                       s.data());
    double out = 0;
    for (int i = 0; i < rows * cols; ++i) out += w[i] * yy[i];
    return out;
  };
  const float h = 1e-2f;
  for (int i = 0; i < rows * cols; ++i) {
    std::vector<float> plus = x, minus = x;
    plus[i] += h;
    minus[i] -= h;
    EXPECT_NEAR(dx[i], (loss(plus, gamma, beta) - loss(minus, gamma, beta)) / (2 * h), 2e-3) << i;
  }
  for (int j = 0; j < cols; ++j) {
    std::vector<float> plus = gamma, minus = gamma;
    plus[j] += h;
    minus[j] -= h;
    EXPECT_NEAR(dgamma[j], (loss(x, plus, beta) - loss(x, minus, beta)) / (2 * h), 2e-3) << j;
    plus = beta;
    minus = beta;
    plus[j] += h;
    minus[j] -= h;
    EXPECT_NEAR(dbeta[j], (loss(x, gamma, plus) - loss(x, gamma, minus)) / (2 * h), 2e-3) << j;
  }
}

TEST(CpuComputeTest, GeluAndItsGradient) {
  auto backend = SingleRank();
  Compute& c = backend->compute();
  std::vector<float> x = {-3.0f, -0.5f, 0.0f, 0.8f, 2.5f}, y(5), dy(5, 1.0f), dx(5);
  c.GeluForward(x.data(), y.data(), 1, 5, 5);
  c.GeluBackward(x.data(), dy.data(), dx.data(), 1, 5, 5);
  for (int i = 0; i < 5; ++i) {
    const double v = x[i];
    const double exact =
        0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    EXPECT_NEAR(y[i], exact, 1e-6);
    auto g = [&](double z) {
      return 0.5 * z * (1 + std::tanh(std::sqrt(2 / M_PI) * (z + 0.044715 * z * z * z)));
    };
    EXPECT_NEAR(dx[i], (g(v + 1e-4) - g(v - 1e-4)) / 2e-4, 1e-4);
  }
}

// The decoder kernels. Their exactness in blocks is checked against PyTorch
// (tests/python/torch_llm_test.py); here, each one's own contract.
TEST(CpuComputeTest, CausalSoftmaxSeesOnlyThePast) {
  auto backend = SingleRank();
  Compute& c = backend->compute();
  const int seq = 4;
  std::vector<float> x = Random(2 * seq * seq, 8);  // two stacked 4 x 4 score matrices
  c.SoftmaxRows(x.data(), 2 * seq, seq, 0.5f, true);
  for (int r = 0; r < 2 * seq; ++r) {
    double sum = 0;
    for (int col = 0; col < seq; ++col) {
      const float p = x[r * seq + col];
      if (col > r % seq) {
        EXPECT_EQ(p, 0.0f) << "row " << r << " saw position " << col;
      }
      sum += p;
    }
    EXPECT_NEAR(sum, 1.0, 1e-6) << r;
  }
}

TEST(CpuComputeTest, RotaryRotatesPairsByPositionAndInverseUndoesIt) {
  auto backend = SingleRank();
  Compute& c = backend->compute();
  // 3 rows (positions 0, 1, 2 of one sequence), one group of 1 rotated head of dim 4 in a
  // row of 6 (the last 2 columns stay).
  std::vector<float> x = Random(18, 9), original = x;
  const std::vector<float> cos = {1, 1, 0.6f, 0.8f, 0, -1}, sin = {0, 0, 0.8f, 0.6f, 1, 0};
  c.Rotary(x.data(), 3, 3, 6, 1, 6, 1, 4, cos.data(), sin.data(), false);
  for (int r = 0; r < 3; ++r) {
    for (int j = 0; j < 2; ++j) {
      const float a = original[r * 6 + j], b = original[r * 6 + j + 2];
      const float co = cos[r * 2 + j], si = sin[r * 2 + j];
      EXPECT_NEAR(x[r * 6 + j], a * co - b * si, 1e-6);
      EXPECT_NEAR(x[r * 6 + j + 2], b * co + a * si, 1e-6);
    }
    EXPECT_EQ(x[r * 6 + 4], original[r * 6 + 4]);
    EXPECT_EQ(x[r * 6 + 5], original[r * 6 + 5]);
  }
  c.Rotary(x.data(), 3, 3, 6, 1, 6, 1, 4, cos.data(), sin.data(), true);
  for (int i = 0; i < 18; ++i) EXPECT_NEAR(x[i], original[i], 1e-6) << i;
}

TEST(CpuComputeTest, SwiGluAndItsGradient) {
  auto backend = SingleRank();
  Compute& c = backend->compute();
  const int units = 2, unit = 3, n = units * unit;  // one row: [g0 g0 g0 u0 u0 u0 g1 ... u1]
  const std::vector<float> gate_up = Random(2 * n, 10), w = Random(n, 11);
  std::vector<float> out(n), grad = gate_up;
  c.SwiGluForward(gate_up.data(), out.data(), 1, units, unit);
  for (int u = 0; u < units; ++u) {
    for (int i = 0; i < unit; ++i) {
      const double g = gate_up[u * 2 * unit + i], up = gate_up[u * 2 * unit + unit + i];
      EXPECT_NEAR(out[u * unit + i], g / (1 + std::exp(-g)) * up, 1e-6);
    }
  }
  // Finite differences of <w, swiglu(gate_up)>, with the gradient computed in place.
  c.SwiGluBackward(grad.data(), w.data(), grad.data(), 1, units, unit);
  for (int i = 0; i < 2 * n; ++i) {
    auto f = [&](float delta) {
      std::vector<float> in = gate_up, y(n);
      in[i] += delta;
      c.SwiGluForward(in.data(), y.data(), 1, units, unit);
      double sum = 0;
      for (int j = 0; j < n; ++j) sum += w[j] * y[j];
      return sum;
    };
    EXPECT_NEAR(grad[i], (f(1e-3f) - f(-1e-3f)) / 2e-3, 2e-3) << i;
  }
}

TEST(CpuComputeTest, RowAndColumnHelpers) {
  auto backend = SingleRank();
  Compute& c = backend->compute();
  std::vector<float> x = {1, 2, 9, 3, 4, 9};  // 2 x 2 inside a stride of 3
  std::vector<float> v = {10, 20};
  c.AddRowVector(x.data(), 2, 2, 3, v.data());
  EXPECT_THAT(x, ::testing::ElementsAre(11, 22, 9, 13, 24, 9));
  std::vector<float> out = {1, 1};
  c.ColumnSum(x.data(), 2, 2, 3, 0.5f, 2.0f, out.data());
  EXPECT_THAT(out, ::testing::ElementsAre(2 + 12, 2 + 23));
}

TEST(CpuComputeTest, AdamWMatchesFormula) {
  auto backend = SingleRank();
  AdamWOptions o{.lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.99f, .eps = 1e-6f, .weight_decay = 0.1f};
  std::vector<float> w = {1.0f}, g = {0.5f}, m = {0.0f}, v = {0.0f};
  double rw = 1.0, rm = 0, rv = 0;
  for (int step = 1; step <= 3; ++step) {
    backend->compute().AdamW(o, step, w.data(), g.data(), m.data(), v.data(), 1);
    rm = 0.9 * rm + 0.1 * 0.5;
    rv = 0.99 * rv + 0.01 * 0.25;
    const double mh = rm / (1 - std::pow(0.9, step)), vh = rv / (1 - std::pow(0.99, step));
    rw -= 0.1 * (0.1 * rw + mh / (std::sqrt(vh) + 1e-6));
    EXPECT_NEAR(w[0], rw, 1e-5);
  }
}

TEST(CpuComputeTest, UnitL1) {
  auto backend = SingleRank();
  std::vector<float> a = {1, -2, 3, -4}, b = {1, 1, 1, 1};
  double out[2];
  ASSERT_TRUE(backend->compute().UnitL1(a.data(), b.data(), 2, 2, out).ok());
  EXPECT_DOUBLE_EQ(out[0], 3);
  EXPECT_DOUBLE_EQ(out[1], 7);
  ASSERT_TRUE(backend->compute().UnitL1(a.data(), nullptr, 2, 2, out).ok());
  EXPECT_DOUBLE_EQ(out[1], 7);
}

}  // namespace
}  // namespace ballast
