// The Compute and Communicator contracts (ballast/compute.h, ballast/communicator.h), run
// alike on every backend: the CPU backend always, the CUDA backend where a GPU is usable
// (it skips otherwise). Every kernel against a straightforward double-precision host
// reference, arguments the contract refuses (bad shapes, outputs aliasing inputs),
// deferred errors, timers and one-rank collectives. Multi-rank collectives are in
// cpu/gloo_communicator_test.cc and the blocks under plans in parallel_*_test.cc.
// Past ~600 lines on purpose: this is the one list of the contract, every kernel once under
// one fixture parameterised by backend; split by kernel family, a new backend would have to
// be added to every file, and a kernel could be left out of one without anyone noticing.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "ballast/backend.h"
#include "gtest/gtest.h"
#include "testing/backend_checks.h"
#include "testing/timeouts.h"

namespace ballast {
namespace {

using ::ballast::testing::ExpectClose;
using ::ballast::testing::GeluGradRef;
using ::ballast::testing::GeluRef;
using ::ballast::testing::Random;
using ::ballast::testing::ReferenceGemm;
using ::ballast::testing::ReferenceSoftmax;
using ::ballast::testing::ToDouble;

std::string UniquePrefix() {
  static std::atomic<int> counter{0};
  return absl::StrCat("compute-conformance-test-", counter.fetch_add(1));
}

// One rank of the backend named by the parameter ("cpu" or "cuda").
class ComputeConformanceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<Backend>> backend;
    if (GetParam() == "cuda") {
      if (!CudaAvailable()) {
        GTEST_SKIP() << "no usable CUDA device, or built without -DBALLAST_WITH_CUDA=ON";
      }
      CudaBackendOptions options;
      options.prefix = UniquePrefix();
      options.timeout = testing::ScaledTimeout(absl::Seconds(30));
      backend = CreateCudaBackend(options);
    } else {
      CpuBackendOptions options;
      options.prefix = UniquePrefix();
      options.timeout = testing::ScaledTimeout(absl::Seconds(30));
      backend = CreateCpuBackend(options);
    }
    ASSERT_TRUE(backend.ok()) << backend.status();
    backend_ = *std::move(backend);
    ASSERT_EQ(backend_->name(), GetParam());
  }

  Compute& compute() { return backend_->compute(); }
  Communicator& comm() { return backend_->comm(); }

  Buffer Allocate(size_t n) {
    absl::StatusOr<Buffer> buffer = compute().Allocate(n);
    EXPECT_TRUE(buffer.ok()) << buffer.status();
    return buffer.ok() ? *std::move(buffer) : Buffer();
  }

  Buffer Upload(const std::vector<float>& host) {
    Buffer buffer = Allocate(host.size());
    compute().CopyFromHost(host.data(), buffer.data(), host.size());
    return buffer;
  }

  std::vector<float> Download(const Buffer& buffer) {
    std::vector<float> host(buffer.size());
    compute().CopyToHost(buffer.data(), host.data(), host.size());
    return host;
  }

  void ExpectSynchronized() { BALLAST_TEST_EXPECT_OK(compute().Synchronize()); }

  // Synchronize reports INVALID_ARGUMENT whose message holds `what`, once.
  void ExpectRefused(const std::string& what) {
    const absl::Status status = compute().Synchronize();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_NE(status.message().find(what), absl::string_view::npos) << status;
    ExpectSynchronized();
  }

  std::unique_ptr<Backend> backend_;
};

TEST_P(ComputeConformanceTest, AllocateZeroFillsAndCopiesRoundTrip) {
  const size_t n = 1000;
  Buffer a = Allocate(n);
  ASSERT_EQ(a.size(), n);
  EXPECT_EQ(Download(a), std::vector<float>(n, 0.0f));

  const std::vector<float> host = Random(n, -1, 1, 1);
  compute().CopyFromHost(host.data(), a.data(), n);
  Buffer b = Allocate(n);
  compute().Copy(a.data(), b.data(), n);
  EXPECT_EQ(Download(b), host);
  ExpectSynchronized();

  absl::StatusOr<Buffer> empty = compute().Allocate(0);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->empty());
}

TEST_P(ComputeConformanceTest, FillAxpyScale) {
  const size_t n = 100003;  // not a multiple of any CUDA block size
  const std::vector<float> y = Random(n, -1, 1, 2);
  Buffer x = Allocate(n);
  Buffer dy = Upload(y);
  compute().Fill(x.data(), 2.5f, n);
  EXPECT_EQ(Download(x), std::vector<float>(n, 2.5f));

  compute().Axpy(0.5f, dy.data(), x.data(), n);
  compute().Scale(-2.0f, x.data(), n);
  ExpectSynchronized();
  std::vector<double> want(n);
  for (size_t i = 0; i < n; ++i) want[i] = -2.0 * (2.5 + 0.5 * y[i]);
  ExpectClose(Download(x), want);
}

TEST_P(ComputeConformanceTest, GemmMatchesHostReferenceForAllTransposes) {
  const int m = 13, n = 11, k = 9;
  const float alpha = 0.75f, beta = -0.5f;
  for (bool trans_a : {false, true}) {
    for (bool trans_b : {false, true}) {
      SCOPED_TRACE(absl::StrCat("trans_a=", trans_a, " trans_b=", trans_b));
      // Strides wider than the rows, so a mix-up of lda/ldb/ldc or of the operand swap
      // shows; C's padding must come back untouched.
      const int lda = (trans_a ? m : k) + 3;
      const int ldb = (trans_b ? k : n) + 2;
      const int ldc = n + 4;
      const std::vector<float> a = Random(static_cast<size_t>(trans_a ? k : m) * lda, -1, 1, 3);
      const std::vector<float> b = Random(static_cast<size_t>(trans_b ? n : k) * ldb, -1, 1, 4);
      const std::vector<float> c = Random(static_cast<size_t>(m) * ldc, -1, 1, 5);
      Buffer da = Upload(a), db = Upload(b), dc = Upload(c);
      compute().Gemm(trans_a, trans_b, m, n, k, alpha, da.data(), lda, db.data(), ldb, beta,
                     dc.data(), ldc);
      ExpectSynchronized();
      std::vector<double> want = ToDouble(c);
      ReferenceGemm(trans_a, trans_b, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta,
                    want.data(), ldc);
      ExpectClose(Download(dc), want);
    }
  }
}

TEST_P(ComputeConformanceTest, GemmStridedBatchedMatchesHostReference) {
  const int m = 7, n = 5, k = 6, batch = 3;
  const float alpha = 1.25f, beta = 0.5f;
  for (bool trans_a : {false, true}) {
    for (bool trans_b : {false, true}) {
      SCOPED_TRACE(absl::StrCat("trans_a=", trans_a, " trans_b=", trans_b));
      const int lda = (trans_a ? m : k) + 1;
      const int ldb = (trans_b ? k : n) + 2;
      const int ldc = n + 3;
      // Gaps between the matrices, so the strides matter.
      const int64_t stride_a = static_cast<int64_t>(trans_a ? k : m) * lda + 5;
      const int64_t stride_b = static_cast<int64_t>(trans_b ? n : k) * ldb + 7;
      const int64_t stride_c = static_cast<int64_t>(m) * ldc + 2;
      const std::vector<float> a = Random(stride_a * batch, -1, 1, 6);
      const std::vector<float> b = Random(stride_b * batch, -1, 1, 7);
      const std::vector<float> c = Random(stride_c * batch, -1, 1, 8);
      Buffer da = Upload(a), db = Upload(b), dc = Upload(c);
      compute().GemmStridedBatched(trans_a, trans_b, m, n, k, alpha, da.data(), lda, stride_a,
                                   db.data(), ldb, stride_b, beta, dc.data(), ldc, stride_c, batch);
      ExpectSynchronized();
      std::vector<double> want = ToDouble(c);
      for (int i = 0; i < batch; ++i) {
        ReferenceGemm(trans_a, trans_b, m, n, k, alpha, a.data() + i * stride_a, lda,
                      b.data() + i * stride_b, ldb, beta, want.data() + i * stride_c, ldc);
      }
      ExpectClose(Download(dc), want);
    }
  }
}

TEST_P(ComputeConformanceTest, GeluReferenceDerivativeIsConsistent) {
  // Guards the host reference itself: its derivative formula against finite differences.
  for (double x = -4.0; x <= 4.0; x += 0.37) {
    const double h = 1e-5;
    EXPECT_NEAR(GeluGradRef(x), (GeluRef(x + h) - GeluRef(x - h)) / (2 * h), 1e-7) << x;
  }
}

TEST_P(ComputeConformanceTest, GeluForwardAndBackwardMatchHostReference) {
  const int rows = 6, cols = 10, ld = 13;
  const size_t size = static_cast<size_t>(rows) * ld;
  const std::vector<float> pre = Random(size, -4, 4, 9);
  const std::vector<float> dout = Random(size, -1, 1, 10);
  const std::vector<float> sentinel = Random(size, -1, 1, 11);
  Buffer dpre = Upload(pre), ddout = Upload(dout);
  Buffer out = Upload(sentinel), dgrad = Upload(sentinel);
  compute().GeluForward(dpre.data(), out.data(), rows, cols, ld);
  compute().GeluBackward(dpre.data(), ddout.data(), dgrad.data(), rows, cols, ld);
  ExpectSynchronized();
  std::vector<double> want_out = ToDouble(sentinel);
  std::vector<double> want_grad = ToDouble(sentinel);
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      const size_t i = static_cast<size_t>(r) * ld + c;
      want_out[i] = GeluRef(pre[i]);
      want_grad[i] = dout[i] * GeluGradRef(pre[i]);
    }
  }
  ExpectClose(Download(out), want_out);
  ExpectClose(Download(dgrad), want_grad);
}

TEST_P(ComputeConformanceTest, SoftmaxRowsMatchesHostReference) {
  const float scale = 0.7f;
  for (const auto& [rows, cols] : {std::pair{5, 37}, std::pair{3, 1500}, std::pair{4, 1}}) {
    SCOPED_TRACE(absl::StrCat("rows=", rows, " cols=", cols));
    const std::vector<float> x = Random(static_cast<size_t>(rows) * cols, -3, 3, 12);
    Buffer dx = Upload(x);
    compute().SoftmaxRows(dx.data(), rows, cols, scale, false);
    ExpectSynchronized();
    ExpectClose(Download(dx), ReferenceSoftmax(x, rows, cols, scale));
  }
}

// The LLM kernels (causal softmax, RoPE, SwiGLU) against host references in double.
TEST_P(ComputeConformanceTest, CausalSoftmaxZeroesTheFuture) {
  const int seq = 7, rows = 3 * seq;  // three stacked seq x seq score matrices
  const std::vector<float> x = Random(static_cast<size_t>(rows) * seq, -3, 3, 31);
  std::vector<double> want(x.size(), 0.0);
  for (int r = 0; r < rows; ++r) {
    const int seen = r % seq + 1;
    const std::vector<float> row(x.begin() + r * seq, x.begin() + r * seq + seen);
    const std::vector<double> p = ReferenceSoftmax(row, 1, seen, 0.5);
    std::copy(p.begin(), p.end(), want.begin() + r * seq);
  }
  Buffer dx = Upload(x);
  compute().SoftmaxRows(dx.data(), rows, seq, 0.5f, true);
  ExpectSynchronized();
  ExpectClose(Download(dx), want);
}

TEST_P(ComputeConformanceTest, RotaryMatchesHostReferenceAndInverseUndoesIt) {
  // Two groups of (2 rotated heads + 1 untouched) heads of dim 6, 4 positions, 8 rows.
  const int rows = 8, seq = 4, d = 6, half = 3, groups = 2, heads = 2, stride = 3 * d;
  const int ld = groups * stride;
  const std::vector<float> x = Random(static_cast<size_t>(rows) * ld, -2, 2, 41);
  std::vector<float> cos(seq * half), sin(seq * half);
  for (int p = 0; p < seq; ++p) {
    for (int j = 0; j < half; ++j) {
      const double angle = p * std::pow(10000.0, -2.0 * j / d);
      cos[p * half + j] = static_cast<float>(std::cos(angle));
      sin[p * half + j] = static_cast<float>(std::sin(angle));
    }
  }
  std::vector<double> want = ToDouble(x);
  for (int r = 0; r < rows; ++r) {
    for (int g = 0; g < groups; ++g) {
      for (int i = 0; i < heads; ++i) {
        const size_t at = static_cast<size_t>(r) * ld + g * stride + i * d;
        for (int j = 0; j < half; ++j) {
          const double c = cos[(r % seq) * half + j], s = sin[(r % seq) * half + j];
          want[at + j] = x[at + j] * c - x[at + j + half] * s;
          want[at + j + half] = x[at + j + half] * c + x[at + j] * s;
        }
      }
    }
  }
  Buffer dx = Upload(x), dcos = Upload(cos), dsin = Upload(sin);
  compute().Rotary(dx.data(), rows, seq, ld, groups, stride, heads, d, dcos.data(), dsin.data(),
                   false);
  ExpectSynchronized();
  ExpectClose(Download(dx), want);
  compute().Rotary(dx.data(), rows, seq, ld, groups, stride, heads, d, dcos.data(), dsin.data(),
                   true);
  ExpectSynchronized();
  ExpectClose(Download(dx), ToDouble(x));
}

TEST_P(ComputeConformanceTest, SwiGluAndItsGradientMatchHostReference) {
  const int rows = 5, units = 3, unit = 4, n = units * unit;
  const std::vector<float> gate_up = Random(static_cast<size_t>(rows) * 2 * n, -3, 3, 51);
  const std::vector<float> dout = Random(static_cast<size_t>(rows) * n, -1, 1, 52);
  std::vector<double> want_out(rows * n), want_grad(gate_up.size());
  for (int r = 0; r < rows; ++r) {
    for (int u = 0; u < units; ++u) {
      for (int i = 0; i < unit; ++i) {
        const size_t at = static_cast<size_t>(r) * 2 * n + u * 2 * unit + i,
                     o = r * n + u * unit + i;
        const double g = gate_up[at], up = gate_up[at + unit], sig = 1.0 / (1.0 + std::exp(-g));
        want_out[o] = g * sig * up;
        want_grad[at] = dout[o] * up * sig * (1.0 + g * (1.0 - sig));
        want_grad[at + unit] = dout[o] * g * sig;
      }
    }
  }
  Buffer dgu = Upload(gate_up), dd = Upload(dout), out = Allocate(rows * n);
  compute().SwiGluForward(dgu.data(), out.data(), rows, units, unit);
  compute().SwiGluBackward(dgu.data(), dd.data(), dgu.data(), rows, units, unit);  // in place
  ExpectSynchronized();
  ExpectClose(Download(out), want_out);
  ExpectClose(Download(dgu), want_grad);
}

// The mixture-of-experts kernels: a gather of token rows into an expert's batch, the
// weighted scatter-add back, and row dots (router gradients). Strides wider than the rows
// throughout: the padding of every output must come back untouched.
TEST_P(ComputeConformanceTest, GatherRowsMatchesHostReference) {
  const int src_rows = 9, ld_src = 16, n = 12, cols = 13, ld_dst = 15;
  const std::vector<float> src = Random(static_cast<size_t>(src_rows) * ld_src, -1, 1, 70);
  const std::vector<float> sentinel = Random(static_cast<size_t>(n) * ld_dst, -1, 1, 71);
  // Repeats and the last row: a gather may read a row more than once.
  const std::vector<int32_t> rows = {3, 0, 8, 3, 5, 1, 8, 2, 7, 4, 6, 0};
  const std::vector<float> scale = Random(n, -2, 2, 72);
  Buffer dsrc = Upload(src);
  for (bool scaled : {false, true}) {
    SCOPED_TRACE(absl::StrCat("scaled=", scaled));
    Buffer dst = Upload(sentinel);
    // The host tables may be reused as soon as the call returns: overwrite them before the
    // backend has necessarily run the gather.
    std::vector<int32_t> rows_arg = rows;
    std::vector<float> scale_arg = scale;
    compute().GatherRows(dsrc.data(), src_rows, ld_src, rows_arg.data(),
                         scaled ? scale_arg.data() : nullptr, n, cols, dst.data(), ld_dst);
    std::fill(rows_arg.begin(), rows_arg.end(), 0);
    std::fill(scale_arg.begin(), scale_arg.end(), 0.0f);
    ExpectSynchronized();
    std::vector<double> want = ToDouble(sentinel);
    for (int i = 0; i < n; ++i) {
      for (int c = 0; c < cols; ++c) {
        const double v = src[static_cast<size_t>(rows[i]) * ld_src + c];
        want[static_cast<size_t>(i) * ld_dst + c] = scaled ? scale[i] * v : v;
      }
    }
    ExpectClose(Download(dst), want);
  }
  // n = 0 (even without tables) and cols = 0 write nothing.
  Buffer dst = Upload(sentinel);
  compute().GatherRows(dsrc.data(), src_rows, ld_src, nullptr, nullptr, 0, cols, dst.data(),
                       ld_dst);
  compute().GatherRows(dsrc.data(), src_rows, ld_src, rows.data(), scale.data(), n, 0, dst.data(),
                       ld_dst);
  ExpectSynchronized();
  EXPECT_EQ(Download(dst), sentinel);
}

TEST_P(ComputeConformanceTest, ScatterAddRowsMatchesHostReference) {
  const int dst_rows = 10, ld_dst = 17, n = 6, cols = 11, ld_src = 14;
  const std::vector<float> src = Random(static_cast<size_t>(n) * ld_src, -1, 1, 73);
  const std::vector<float> initial = Random(static_cast<size_t>(dst_rows) * ld_dst, -1, 1, 74);
  const std::vector<int32_t> rows = {7, 0, 9, 2, 5, 3};  // distinct, unsorted, both ends
  const std::vector<float> scale = Random(n, -2, 2, 75);
  Buffer dsrc = Upload(src);
  for (bool scaled : {false, true}) {
    SCOPED_TRACE(absl::StrCat("scaled=", scaled));
    Buffer dst = Upload(initial);
    std::vector<int32_t> rows_arg = rows;
    std::vector<float> scale_arg = scale;
    compute().ScatterAddRows(dsrc.data(), ld_src, rows_arg.data(),
                             scaled ? scale_arg.data() : nullptr, n, cols, dst.data(), dst_rows,
                             ld_dst);
    std::fill(rows_arg.begin(), rows_arg.end(), 1);  // reused on return, as the contract allows
    std::fill(scale_arg.begin(), scale_arg.end(), 0.0f);
    ExpectSynchronized();
    std::vector<double> want = ToDouble(initial);
    for (int i = 0; i < n; ++i) {
      for (int c = 0; c < cols; ++c) {
        const double v = src[static_cast<size_t>(i) * ld_src + c];
        want[static_cast<size_t>(rows[i]) * ld_dst + c] += scaled ? scale[i] * v : v;
      }
    }
    ExpectClose(Download(dst), want);
  }
  Buffer dst = Upload(initial);
  compute().ScatterAddRows(dsrc.data(), ld_src, nullptr, nullptr, 0, cols, dst.data(), dst_rows,
                           ld_dst);
  compute().ScatterAddRows(dsrc.data(), ld_src, rows.data(), nullptr, n, 0, dst.data(), dst_rows,
                           ld_dst);
  ExpectSynchronized();
  EXPECT_EQ(Download(dst), initial);
}

TEST_P(ComputeConformanceTest, RowDotsMatchesHostReference) {
  // Several block passes per row on CUDA (1300 columns), a single column, and no columns
  // (zeros, still written).
  for (const auto& [n, cols] :
       {std::pair{7, 37}, std::pair{3, 1300}, std::pair{5, 1}, std::pair{4, 0}, std::pair{0, 8}}) {
    SCOPED_TRACE(absl::StrCat("n=", n, " cols=", cols));
    const int lda = cols + 3, ldb = cols + 1;
    const std::vector<float> a = Random(static_cast<size_t>(n) * lda + 1, -1, 1, 76);
    const std::vector<float> b = Random(static_cast<size_t>(n) * ldb + 1, -1, 1, 77);
    const std::vector<float> sentinel = Random(n + 1, -1, 1, 78);  // one past the end too
    Buffer da = Upload(a), db = Upload(b), out = Upload(sentinel), squares = Upload(sentinel);
    compute().RowDots(da.data(), lda, db.data(), ldb, n, cols, out.data());
    compute().RowDots(da.data(), lda, da.data(), lda, n, cols, squares.data());  // a and b alias
    ExpectSynchronized();
    std::vector<double> want = ToDouble(sentinel), want_squares = ToDouble(sentinel);
    for (int i = 0; i < n; ++i) {
      double dot = 0, sq = 0;
      for (int c = 0; c < cols; ++c) {
        const double x = a[static_cast<size_t>(i) * lda + c];
        dot += x * b[static_cast<size_t>(i) * ldb + c];
        sq += x * x;
      }
      want[i] = dot;
      want_squares[i] = sq;
    }
    ExpectClose(Download(out), want);
    ExpectClose(Download(squares), want_squares);
  }
}

// What the contract refuses of the three: a refused call names itself, reaches Synchronize,
// and writes nothing.
TEST_P(ComputeConformanceTest, GatherScatterAndRowDotsRefuseBadArgumentsAndWriteNothing) {
  const int rows_n = 6, cols = 5, ld = 7;
  const size_t size = static_cast<size_t>(rows_n) * ld;
  const std::vector<float> a_host = Random(size, -1, 1, 80), b_host = Random(size, -1, 1, 81);
  Buffer a = Upload(a_host), b = Upload(b_host);
  const std::vector<float> scale = {1.0f, 2.0f, 3.0f};

  const std::vector<int32_t> too_far = {1, 6, 2};
  compute().GatherRows(a.data(), rows_n, ld, too_far.data(), nullptr, 3, cols, b.data(), ld);
  ExpectRefused("GatherRows: rows[1] = 6 is out of range [0, 6)");
  EXPECT_EQ(Download(b), b_host);
  const std::vector<int32_t> negative = {0, 1, -1};
  compute().GatherRows(a.data(), rows_n, ld, negative.data(), scale.data(), 3, cols, b.data(), ld);
  ExpectRefused("GatherRows: rows[2] = -1 is out of range [0, 6)");
  EXPECT_EQ(Download(b), b_host);
  const std::vector<int32_t> fine = {5, 0, 2};
  compute().GatherRows(a.data(), rows_n, ld, fine.data(), nullptr, 3, cols, a.data() + 2, ld);
  ExpectRefused("GatherRows: dst overlaps src");
  EXPECT_EQ(Download(a), a_host);
  compute().GatherRows(a.data(), rows_n, ld, fine.data(), nullptr, 3, cols, b.data(), cols - 1);
  ExpectRefused("GatherRows: invalid shape");
  compute().GatherRows(a.data(), rows_n, ld, fine.data(), nullptr, -1, cols, b.data(), ld);
  ExpectRefused("GatherRows: invalid shape");
  compute().GatherRows(a.data(), rows_n, ld, nullptr, nullptr, 3, cols, b.data(), ld);
  ExpectRefused("GatherRows: null rows");
  EXPECT_EQ(Download(b), b_host);

  const std::vector<int32_t> repeated = {4, 1, 3, 1};
  const std::vector<float> scale4 = {1.0f, 2.0f, 3.0f, 4.0f};
  compute().ScatterAddRows(a.data(), ld, repeated.data(), scale4.data(), 4, cols, b.data(), rows_n,
                           ld);
  ExpectRefused("ScatterAddRows: row 1 appears twice (rows[1] and rows[3])");
  EXPECT_EQ(Download(b), b_host);
  compute().ScatterAddRows(a.data(), ld, too_far.data(), nullptr, 3, cols, b.data(), rows_n, ld);
  ExpectRefused("ScatterAddRows: rows[1] = 6 is out of range [0, 6)");
  EXPECT_EQ(Download(b), b_host);
  compute().ScatterAddRows(a.data() + ld, ld, fine.data(), nullptr, 3, cols, a.data(), rows_n, ld);
  ExpectRefused("ScatterAddRows: dst overlaps src");
  EXPECT_EQ(Download(a), a_host);
  compute().ScatterAddRows(a.data(), cols - 1, fine.data(), nullptr, 3, cols, b.data(), rows_n, ld);
  ExpectRefused("ScatterAddRows: invalid shape");
  compute().ScatterAddRows(nullptr, ld, fine.data(), nullptr, 3, cols, b.data(), rows_n, ld);
  ExpectRefused("ScatterAddRows: null src");
  EXPECT_EQ(Download(b), b_host);

  compute().RowDots(a.data(), ld, b.data(), ld, rows_n, cols, a.data() + ld + 1);
  ExpectRefused("RowDots: out overlaps a");
  EXPECT_EQ(Download(a), a_host);
  compute().RowDots(a.data(), ld, b.data(), ld, rows_n, cols, b.data() + size - rows_n);
  ExpectRefused("RowDots: out overlaps b");
  EXPECT_EQ(Download(b), b_host);
  compute().RowDots(a.data(), cols - 1, b.data(), ld, rows_n, cols, b.data());
  ExpectRefused("RowDots: invalid shape");
  compute().RowDots(a.data(), ld, b.data(), ld, rows_n, cols, nullptr);
  ExpectRefused("RowDots: null out");
  EXPECT_EQ(Download(b), b_host);
}

TEST_P(ComputeConformanceTest, LayerNormMatchesHostReference) {
  const float eps = 1e-5f;
  // 97 rows x 70 columns: several row passes and a partial column block on CUDA.
  for (const auto& [rows, cols] :
       {std::pair{5, 37}, std::pair{3, 768}, std::pair{2, 1}, std::pair{97, 70}}) {
    SCOPED_TRACE(absl::StrCat("rows=", rows, " cols=", cols));
    const size_t size = static_cast<size_t>(rows) * cols;
    const std::vector<float> x = Random(size, -3, 3, 21), gamma = Random(cols, 0.5, 1.5, 22),
                             beta = Random(cols, -1, 1, 23), dy = Random(size, -1, 1, 24);
    // Double-precision reference of the forward pass and all three gradients.
    std::vector<double> want_y(size), want_dx(size), want_dgamma(cols, 0), want_dbeta(cols, 0);
    for (int r = 0; r < rows; ++r) {
      double mu = 0, var = 0;
      for (int c = 0; c < cols; ++c) mu += x[r * cols + c];
      mu /= cols;
      for (int c = 0; c < cols; ++c) var += (x[r * cols + c] - mu) * (x[r * cols + c] - mu);
      const double inv = 1.0 / std::sqrt(var / cols + eps);
      double mean_g = 0, mean_gx = 0;
      for (int c = 0; c < cols; ++c) {
        const size_t i = static_cast<size_t>(r) * cols + c;
        const double xhat = (x[i] - mu) * inv;
        want_y[i] = xhat * gamma[c] + beta[c];
        mean_g += dy[i] * gamma[c] / cols;
        mean_gx += dy[i] * gamma[c] * xhat / cols;
        want_dgamma[c] += dy[i] * xhat;
        want_dbeta[c] += dy[i];
      }
      for (int c = 0; c < cols; ++c) {
        const size_t i = static_cast<size_t>(r) * cols + c;
        want_dx[i] = inv * (dy[i] * gamma[c] - mean_g - (x[i] - mu) * inv * mean_gx);
      }
    }
    Buffer dx_in = Upload(x), dg = Upload(gamma), db = Upload(beta), ddy = Upload(dy);
    Buffer y = Upload(std::vector<float>(size)), mean = Upload(std::vector<float>(rows)),
           rstd = Upload(std::vector<float>(rows)), dx = Upload(std::vector<float>(size)),
           dgamma = Upload(std::vector<float>(cols)), dbeta = Upload(std::vector<float>(cols));
    compute().LayerNormForward(dx_in.data(), dg.data(), db.data(), rows, cols, eps, y.data(),
                               mean.data(), rstd.data());
    compute().LayerNormBackward(dx_in.data(), dg.data(), mean.data(), rstd.data(), ddy.data(), rows,
                                cols, dx.data(), dgamma.data(), dbeta.data());
    ExpectSynchronized();
    ExpectClose(Download(y), want_y);
    ExpectClose(Download(dx), want_dx, 1e-4);
    ExpectClose(Download(dgamma), want_dgamma);
    ExpectClose(Download(dbeta), want_dbeta);
  }
}

TEST_P(ComputeConformanceTest, SoftmaxBackwardRowsMatchesHostReference) {
  const float scale = 0.125f;
  for (const auto& [rows, cols] : {std::pair{5, 37}, std::pair{2, 1300}}) {
    SCOPED_TRACE(absl::StrCat("rows=", rows, " cols=", cols));
    const size_t size = static_cast<size_t>(rows) * cols;
    const std::vector<double> p_exact = ReferenceSoftmax(Random(size, -3, 3, 13), rows, cols, 1.0);
    const std::vector<float> p(p_exact.begin(), p_exact.end());
    const std::vector<float> dx = Random(size, -1, 1, 14);
    Buffer dp = Upload(p), ddx = Upload(dx);
    compute().SoftmaxBackwardRows(dp.data(), ddx.data(), rows, cols, scale);
    ExpectSynchronized();
    std::vector<double> want(size);
    for (int r = 0; r < rows; ++r) {
      const size_t row = static_cast<size_t>(r) * cols;
      double dot = 0;
      for (int c = 0; c < cols; ++c) dot += static_cast<double>(dx[row + c]) * p[row + c];
      for (int c = 0; c < cols; ++c) want[row + c] = scale * p[row + c] * (dx[row + c] - dot);
    }
    ExpectClose(Download(ddx), want);
  }
}

TEST_P(ComputeConformanceTest, ColumnSumMatchesHostReference) {
  struct Case {
    int rows, cols, ld;
    float alpha, beta;
  };
  for (const Case& t :
       {Case{37, 45, 50, 0.5f, 2.0f}, Case{1000, 3, 3, 1.0f, 0.0f}, Case{0, 4, 4, 1.0f, -1.0f}}) {
    SCOPED_TRACE(absl::StrCat("rows=", t.rows, " cols=", t.cols, " beta=", t.beta));
    const std::vector<float> x = Random(static_cast<size_t>(t.rows) * t.ld, -1, 1, 15);
    const std::vector<float> out = Random(t.cols, -1, 1, 16);
    Buffer dx = Upload(x), dout = Upload(out);
    compute().ColumnSum(dx.data(), t.rows, t.cols, t.ld, t.alpha, t.beta, dout.data());
    ExpectSynchronized();
    std::vector<double> want(t.cols);
    for (int c = 0; c < t.cols; ++c) {
      double sum = 0;
      for (int r = 0; r < t.rows; ++r) sum += x[static_cast<size_t>(r) * t.ld + c];
      want[c] = static_cast<double>(t.beta) * out[c] + t.alpha * sum;
    }
    ExpectClose(Download(dout), want);
  }
}

TEST_P(ComputeConformanceTest, AddRowVectorMatchesHostReference) {
  const int rows = 7, cols = 9, ld = 12;
  const std::vector<float> x = Random(static_cast<size_t>(rows) * ld, -1, 1, 17);
  const std::vector<float> v = Random(cols, -1, 1, 18);
  Buffer dx = Upload(x), dv = Upload(v);
  compute().AddRowVector(dx.data(), rows, cols, ld, dv.data());
  ExpectSynchronized();
  std::vector<double> want = ToDouble(x);
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) want[static_cast<size_t>(r) * ld + c] += v[c];
  }
  ExpectClose(Download(dx), want);
}

TEST_P(ComputeConformanceTest, AdamWMatchesHostReferenceOverThreeSteps) {
  const size_t n = 3001;
  AdamWOptions options;
  options.lr = 1e-2f;
  options.weight_decay = 0.1f;
  const std::vector<float> w0 = Random(n, -1, 1, 19);
  Buffer w = Upload(w0), m = Allocate(n), v = Allocate(n);
  std::vector<double> want_w = ToDouble(w0), want_m(n, 0.0), want_v(n, 0.0);
  for (int64_t step = 1; step <= 3; ++step) {
    const std::vector<float> g = Random(n, -1, 1, 20 + static_cast<uint32_t>(step));
    Buffer dg = Upload(g);
    compute().AdamW(options, step, w.data(), dg.data(), m.data(), v.data(), n);
    const double b1 = options.beta1, b2 = options.beta2;
    for (size_t i = 0; i < n; ++i) {
      want_m[i] = b1 * want_m[i] + (1 - b1) * g[i];
      want_v[i] = b2 * want_v[i] + (1 - b2) * g[i] * g[i];
      const double m_hat = want_m[i] / (1 - std::pow(b1, step));
      const double v_hat = want_v[i] / (1 - std::pow(b2, step));
      want_w[i] -= options.lr *
                   (options.weight_decay * want_w[i] + m_hat / (std::sqrt(v_hat) + options.eps));
    }
  }
  ExpectSynchronized();
  ExpectClose(Download(w), want_w);
  // m and v are sums of terms up to (1 - beta1) |g| <= 0.1 and (1 - beta2) g^2 <= 1e-3;
  // where the terms cancel, float rounding is relative to the terms, not to the sum (the
  // CPU backend's m was 6e-5 off, relatively, on an element of 3e-5 with a 1e-6 floor).
  ExpectClose(Download(m), want_m, 1e-5, 0.1);
  ExpectClose(Download(v), want_v, 1e-5, 1e-3);
}

TEST_P(ComputeConformanceTest, UnitL1MatchesHostReference) {
  struct Case {
    int units;
    size_t unit_elems;
    bool with_b;
  };
  // Few large units exercise the split into parts; b == nullptr means |a|.
  for (const Case& t : {Case{5, 3001, true}, Case{5, 3001, false}, Case{3, 200000, true},
                        Case{1, 1, true}, Case{4, 0, true}}) {
    SCOPED_TRACE(
        absl::StrCat("units=", t.units, " unit_elems=", t.unit_elems, " with_b=", t.with_b));
    const size_t size = static_cast<size_t>(t.units) * t.unit_elems;
    const std::vector<float> a = Random(size, -1, 1, 30);
    const std::vector<float> b = Random(size, -1, 1, 31);
    Buffer da = Upload(a), db = Upload(b);
    std::vector<double> got(t.units, -1.0);
    BALLAST_TEST_ASSERT_OK(compute().UnitL1(da.data(), t.with_b ? db.data() : nullptr, t.units,
                                            t.unit_elems, got.data()));
    for (int u = 0; u < t.units; ++u) {
      double want = 0;
      for (size_t i = 0; i < t.unit_elems; ++i) {
        const size_t at = u * t.unit_elems + i;
        want += t.with_b ? std::fabs(a[at] - b[at]) : std::fabs(a[at]);
      }
      EXPECT_NEAR(got[u], want, 1e-9 * std::max(want, 1.0)) << "unit " << u;
    }
  }
  BALLAST_TEST_EXPECT_OK(compute().UnitL1(nullptr, nullptr, 0, 10, nullptr));
  double unused = 0;
  EXPECT_EQ(compute().UnitL1(nullptr, nullptr, -1, 10, &unused).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(ComputeConformanceTest, AddSquaredNormAccumulatesInBackendMemory) {
  // Sizes around the block and grid edges of the CUDA kernel, and one past its grid cap.
  const std::vector<float> x = Random(3 * 8192 * 256 + 7, -1, 1, 40);
  Buffer dx = Upload(x);
  Buffer sum = Upload({0.5f});
  double want = 0.5;
  for (size_t n : {size_t{0}, size_t{1}, size_t{255}, size_t{257}, size_t{100000}, x.size()}) {
    SCOPED_TRACE(absl::StrCat("n=", n));
    compute().AddSquaredNorm(dx.data(), n, sum.data());
    for (size_t i = 0; i < n; ++i) want += static_cast<double>(x[i]) * x[i];
    BALLAST_TEST_ASSERT_OK(compute().Synchronize());
    const float got = Download(sum)[0];
    // fp32 partial sums on CUDA, double on the CPU.
    EXPECT_NEAR(got, want, 1e-5 * want);
  }
  compute().AddSquaredNorm(nullptr, 3, sum.data());
  EXPECT_EQ(compute().Synchronize().code(), absl::StatusCode::kInvalidArgument);
  compute().AddSquaredNorm(nullptr, 0, nullptr);  // nothing to add: no error
  BALLAST_TEST_EXPECT_OK(compute().Synchronize());
}

TEST_P(ComputeConformanceTest, DeferredErrorIsReportedOnceBySynchronize) {
  Buffer x = Allocate(16);
  compute().Gemm(false, false, -1, 4, 4, 1.0f, x.data(), 4, x.data(), 4, 0.0f, x.data(), 4);
  compute().SoftmaxRows(x.data(), -3, 4, 1.0f, false);  // a second failure; the first one wins
  const absl::Status status = compute().Synchronize();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("Gemm"), absl::string_view::npos) << status;
  ExpectSynchronized();
}

// A collective after a void call that failed does not run on what that call left: it
// fails with the call's error (and aborts the communicator, since this rank now skips a
// collective its peers are in), instead of "NCCL communicator aborted" later.
TEST_P(ComputeConformanceTest, ACollectiveAfterAFailedComputeCallReportsThatCall) {
  Buffer x = Allocate(16);
  compute().Gemm(false, false, -1, 4, 4, 1.0f, x.data(), 4, x.data(), 4, 0.0f, x.data(), 4);
  const absl::Status status = comm().AllReduceSum(x.data(), 16);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("not run"), absl::string_view::npos) << status;
  EXPECT_NE(status.message().find("Gemm"), absl::string_view::npos) << status;
  EXPECT_TRUE(compute().Synchronize().ok());  // reported once, by the collective
  // This rank skipped a collective its peers are in: the group is out of step for good.
  const absl::Status later = comm().AllReduceSum(x.data(), 16);
  EXPECT_FALSE(later.ok());
  EXPECT_NE(later.message().find("aborted earlier"), absl::string_view::npos) << later;
  EXPECT_NE(later.message().find("Gemm"), absl::string_view::npos) << later;
}

TEST_P(ComputeConformanceTest, TimerMeasuresQueuedWork) {
  const int n = 512;
  const size_t size = static_cast<size_t>(n) * n;
  Buffer a = Allocate(size), b = Allocate(size), c = Allocate(size);
  compute().Fill(a.data(), 1.0f, size);
  compute().Fill(b.data(), 1.0f, size);
  std::unique_ptr<IntervalTimer> timer = compute().NewTimer();
  timer->Start();
  for (int i = 0; i < 10; ++i) {
    compute().Gemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  }
  timer->Stop();
  absl::StatusOr<double> first = timer->Seconds();
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_GT(*first, 0.0);

  timer->Start();
  compute().Gemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  timer->Stop();
  absl::StatusOr<double> total = timer->Seconds();
  ASSERT_TRUE(total.ok()) << total.status();
  EXPECT_GT(*total, *first);

  timer->Reset();
  absl::StatusOr<double> after_reset = timer->Seconds();
  ASSERT_TRUE(after_reset.ok()) << after_reset.status();
  EXPECT_EQ(*after_reset, 0.0);
  ExpectSynchronized();
}

TEST_P(ComputeConformanceTest, OneRankCollectivesAreIdentity) {
  EXPECT_EQ(comm().rank(), 0);
  EXPECT_EQ(comm().size(), 1);
  const size_t n = 257;
  const std::vector<float> host = Random(n, -1, 1, 40);
  Buffer data = Upload(host);

  BALLAST_TEST_EXPECT_OK(comm().AllReduceSum(data.data(), n));
  EXPECT_EQ(Download(data), host);
  BALLAST_TEST_EXPECT_OK(comm().Broadcast(data.data(), n, 0));
  EXPECT_EQ(Download(data), host);
  BALLAST_TEST_EXPECT_OK(comm().Reduce(data.data(), n, 0));
  EXPECT_EQ(Download(data), host);
  Buffer gathered = Allocate(n);
  BALLAST_TEST_EXPECT_OK(comm().AllGather(data.data(), n, gathered.data()));
  EXPECT_EQ(Download(gathered), host);

  // Plan agreement reduces host int64s; device ones work too.
  const std::vector<int64_t> ints = {5, -3, int64_t{1} << 40, 0};
  std::vector<int64_t> host_ints = ints;
  BALLAST_TEST_EXPECT_OK(comm().AllReduceMin(host_ints.data(), host_ints.size()));
  EXPECT_EQ(host_ints, ints);
  static_assert(sizeof(int64_t) == 2 * sizeof(float));
  Buffer device_ints = Allocate(2 * ints.size());
  compute().CopyFromHost(reinterpret_cast<const float*>(ints.data()), device_ints.data(),
                         2 * ints.size());
  BALLAST_TEST_EXPECT_OK(
      comm().AllReduceMin(reinterpret_cast<int64_t*>(device_ints.data()), ints.size()));
  std::vector<int64_t> back(ints.size());
  compute().CopyToHost(device_ints.data(), reinterpret_cast<float*>(back.data()), 2 * ints.size());
  EXPECT_EQ(back, ints);

  // Host floats work too (on CUDA they are staged through device memory).
  std::vector<float> host_copy = host;
  BALLAST_TEST_EXPECT_OK(comm().AllReduceSum(host_copy.data(), n));
  EXPECT_EQ(host_copy, host);
  BALLAST_TEST_EXPECT_OK(comm().Broadcast(host_copy.data(), n, 0));
  BALLAST_TEST_EXPECT_OK(comm().Reduce(host_copy.data(), n, 0));
  EXPECT_EQ(host_copy, host);
  std::vector<float> host_gathered(n, 7.0f);
  BALLAST_TEST_EXPECT_OK(comm().AllGather(host_copy.data(), n, host_gathered.data()));
  EXPECT_EQ(host_gathered, host);
  // A host input gathered into device memory, and back.
  Buffer mixed = Allocate(n);
  BALLAST_TEST_EXPECT_OK(comm().AllGather(host_copy.data(), n, mixed.data()));
  EXPECT_EQ(Download(mixed), host);
  std::fill(host_gathered.begin(), host_gathered.end(), 7.0f);
  BALLAST_TEST_EXPECT_OK(comm().AllGather(mixed.data(), n, host_gathered.data()));
  EXPECT_EQ(host_gathered, host);

  BALLAST_TEST_EXPECT_OK(comm().Exchange({}, {}));
  ExpectSynchronized();
}

TEST_P(ComputeConformanceTest, CollectiveArgumentsAreCheckedWithoutBreakingTheCommunicator) {
  Buffer data = Allocate(8);
  EXPECT_EQ(comm().Broadcast(data.data(), 8, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comm().Reduce(data.data(), 8, -1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comm().Send(data.data(), 8, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comm().Recv(data.data(), 8, -2).code(), absl::StatusCode::kInvalidArgument);
  BALLAST_TEST_EXPECT_OK(comm().AllReduceSum(data.data(), 8));
}

// compute.h forbids outputs that overlap their inputs where backends would compute
// different things (the CUDA kernels read x and dy after writing dx; the CPU loops in
// another order). A refused call writes nothing, on every backend.
TEST_P(ComputeConformanceTest, OutputsOverlappingInputsAreRefusedAndWriteNothing) {
  const int rows = 3, cols = 8;
  const size_t n = static_cast<size_t>(rows) * cols;
  const std::vector<float> x_host = Random(n, -1, 1, 50), dy_host = Random(n, -1, 1, 51);
  const std::vector<float> gamma_host = Random(cols, 0.5f, 1.5f, 52);
  Buffer x = Upload(x_host), dy = Upload(dy_host), gamma = Upload(gamma_host);
  Buffer mean = Allocate(rows), rstd = Allocate(rows);
  Buffer y = Allocate(n), dgamma = Allocate(cols), dbeta = Allocate(cols);
  compute().LayerNormForward(x.data(), gamma.data(), dgamma.data(), rows, cols, 1e-5f, y.data(),
                             mean.data(), rstd.data());
  ExpectSynchronized();

  compute().LayerNormBackward(x.data(), gamma.data(), mean.data(), rstd.data(), dy.data(), rows,
                              cols, dy.data(), dgamma.data(), dbeta.data());
  ExpectRefused("LayerNormBackward: dx overlaps dy");
  EXPECT_EQ(Download(dy), dy_host);
  compute().LayerNormBackward(x.data(), gamma.data(), mean.data(), rstd.data(), dy.data(), rows,
                              cols, x.data(), dgamma.data(), dbeta.data());
  ExpectRefused("LayerNormBackward: dx overlaps x");
  EXPECT_EQ(Download(x), x_host);
  // dgamma inside dx; dx over mean.
  const std::vector<float> y_before = Download(y);
  compute().LayerNormBackward(x.data(), gamma.data(), mean.data(), rstd.data(), dy.data(), rows,
                              cols, y.data(), y.data() + cols, dbeta.data());
  ExpectRefused("LayerNormBackward: dx overlaps dgamma");
  EXPECT_EQ(Download(y), y_before);
  Buffer wide = Allocate(n + rows);
  compute().LayerNormBackward(x.data(), gamma.data(), wide.data() + n - 1, rstd.data(), dy.data(),
                              rows, cols, wide.data(), dgamma.data(), dbeta.data());
  ExpectRefused("LayerNormBackward: dx overlaps mean");

  Buffer data = Upload(Random(16, -1, 1, 53));
  const std::vector<float> before = Download(data);
  compute().Copy(data.data(), data.data() + 3, 8);
  ExpectRefused("Copy: source and destination of 8 floats overlap");
  EXPECT_EQ(Download(data), before);
  compute().Copy(data.data(), data.data(), 8);      // the same range: a no-op
  compute().Copy(data.data(), data.data() + 8, 8);  // adjacent: fine
  ExpectSynchronized();
  std::vector<float> want = before;
  std::copy(before.begin(), before.begin() + 8, want.begin() + 8);
  EXPECT_EQ(Download(data), want);
}

// compute.h: all three outputs are overwritten, even with no rows (zeros for dgamma and
// dbeta).
TEST_P(ComputeConformanceTest, LayerNormBackwardWithNoRowsZeroesTheParameterGradients) {
  const int cols = 40;
  Buffer gamma = Upload(Random(cols, 0.5f, 1.5f, 60));
  Buffer dgamma = Upload(Random(cols, -1, 1, 61)), dbeta = Upload(Random(cols, -1, 1, 62));
  Buffer one = Allocate(cols);  // x, dy and dx: never read or written with no rows
  Buffer mean = Allocate(1), rstd = Allocate(1);
  compute().LayerNormBackward(one.data(), gamma.data(), mean.data(), rstd.data(), one.data() + 1, 0,
                              cols, nullptr, dgamma.data(), dbeta.data());
  ExpectSynchronized();
  EXPECT_EQ(Download(dgamma), std::vector<float>(cols, 0.0f));
  EXPECT_EQ(Download(dbeta), std::vector<float>(cols, 0.0f));
}

INSTANTIATE_TEST_SUITE_P(Backends, ComputeConformanceTest, ::testing::Values("cpu", "cuda"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace ballast
