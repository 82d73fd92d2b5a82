// Tests of what only the CUDA backend (worker_lib/cuda/) has: its name, 16-bit GEMMs,
// device and option checks, and how asking for it fails without a GPU. The Compute and
// Communicator contracts, every kernel against a host reference included, run on every
// backend in compute_conformance_test.cc.
//
// Without a usable GPU, or in a build without -DBALLAST_WITH_CUDA=ON, the GPU tests skip
// and CudaBackendBuildTest checks that asking for the backend fails cleanly.
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

namespace ballast {
namespace {

using ::ballast::testing::ExpectClose;
using ::ballast::testing::Random;
using ::ballast::testing::ReferenceGemm;

constexpr char kNoGpu[] = "no usable CUDA device, or built without -DBALLAST_WITH_CUDA=ON";

std::string UniquePrefix() {
  static std::atomic<int> counter{0};
  return absl::StrCat("cuda-backend-test-", counter.fetch_add(1));
}

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CudaAvailable()) GTEST_SKIP() << kNoGpu;
    CudaBackendOptions options;
    options.prefix = UniquePrefix();
    options.timeout = absl::Seconds(30);
    absl::StatusOr<std::unique_ptr<Backend>> backend = CreateCudaBackend(options);
    ASSERT_TRUE(backend.ok()) << backend.status();
    backend_ = *std::move(backend);
  }

  std::unique_ptr<Backend> backend_;
};

TEST_F(CudaBackendTest, NameIsCuda) { EXPECT_STREQ(backend_->name(), "cuda"); }


// bf16 and fp16 GEMMs: fp32 in and out, 16-bit inputs inside, fp32 accumulation; within
// the inputs' rounding (8 and 11 mantissa bits) of the double reference.
TEST(CudaMixedPrecisionTest, SixteenBitGemmsAccumulateInFp32) {
  if (!CudaAvailable()) GTEST_SKIP() << kNoGpu;
  const int m = 33, n = 65, k = 257;
  const std::vector<float> a = Random(static_cast<size_t>(m) * k, -1, 1, 61);
  const std::vector<float> b = Random(static_cast<size_t>(k) * n, -1, 1, 62);
  std::vector<double> want(static_cast<size_t>(m) * n, 0.0);
  ReferenceGemm(false, false, m, n, k, 1.0, a.data(), k, b.data(), n, 0.0, want.data(), n);
  for (auto [precision, rel] : {std::pair{GemmPrecision::kBf16, 3e-2},
                                std::pair{GemmPrecision::kFp16, 4e-3}}) {
    CudaBackendOptions options;
    options.prefix = UniquePrefix();
    options.gemm_precision = precision;
    absl::StatusOr<std::unique_ptr<Backend>> backend = CreateCudaBackend(options);
    ASSERT_TRUE(backend.ok()) << backend.status();
    Compute& c = (*backend)->compute();
    absl::StatusOr<Buffer> da = c.Allocate(a.size()), db = c.Allocate(b.size()),
                           dc = c.Allocate(want.size());
    ASSERT_TRUE(da.ok() && db.ok() && dc.ok());
    c.CopyFromHost(a.data(), da->data(), a.size());
    c.CopyFromHost(b.data(), db->data(), b.size());
    c.Gemm(false, false, m, n, k, 1.0f, da->data(), k, db->data(), n, 0.0f, dc->data(), n);
    std::vector<float> got(want.size());
    c.CopyToHost(dc->data(), got.data(), got.size());
    BALLAST_TEST_EXPECT_OK(c.Synchronize());
    // Errors scale with sqrt(k) * |a||b|: compare against the largest product magnitude.
    ExpectClose(got, want, rel, std::sqrt(static_cast<double>(k)));
  }
}


TEST(CudaBackendOptionsTest, BadRankSizeOrDeviceIsInvalidArgument) {
  if (!CudaAvailable()) GTEST_SKIP() << kNoGpu;
  struct Case {
    int rank, size, device;
  };
  for (const Case& t : {Case{1, 1, 0}, Case{2, 2, 0}, Case{-1, 2, 0}, Case{0, 0, 0}, Case{0, 1, -2},
                        Case{0, 1, 1 << 20}}) {
    CudaBackendOptions options;
    options.rank = t.rank;
    options.size = t.size;
    options.device = t.device;
    options.prefix = UniquePrefix();
    EXPECT_EQ(CreateCudaBackend(options).status().code(), absl::StatusCode::kInvalidArgument)
        << "rank=" << t.rank << " size=" << t.size << " device=" << t.device;
  }
}

TEST(CudaBackendOptionsTest, MissingPeerTimesOutInsteadOfHanging) {
  if (!CudaAvailable()) GTEST_SKIP() << kNoGpu;
  // Rank 1 of 2 alone: rank 0 never publishes the NCCL id.
  CudaBackendOptions lonely_follower;
  lonely_follower.rank = 1;
  lonely_follower.size = 2;
  lonely_follower.device = 0;  // a one-GPU machine has no device 1
  lonely_follower.prefix = UniquePrefix();
  lonely_follower.timeout = absl::Milliseconds(300);
  EXPECT_EQ(CreateCudaBackend(lonely_follower).status().code(),
            absl::StatusCode::kDeadlineExceeded);

  // Rank 0 of 2 alone: it publishes the id, then NCCL init waits for rank 1 until the
  // timeout and the communicator is aborted.
  CudaBackendOptions lonely_root;
  lonely_root.rank = 0;
  lonely_root.size = 2;
  lonely_root.prefix = UniquePrefix();
  lonely_root.timeout = absl::Seconds(2);
  const absl::StatusCode code = CreateCudaBackend(lonely_root).status().code();
  EXPECT_TRUE(code == absl::StatusCode::kDeadlineExceeded || code == absl::StatusCode::kUnavailable)
      << absl::StatusCodeToString(code);
}

// Runs on every machine and build: asking for the CUDA backend never crashes, and says
// why it cannot be had.
TEST(CudaBackendBuildTest, CreateSucceedsOrFailsCleanly) {
  CudaBackendOptions options;
  options.prefix = UniquePrefix();
  absl::StatusOr<std::unique_ptr<Backend>> backend = CreateCudaBackend(options);
  if (CudaAvailable()) {
    ASSERT_TRUE(backend.ok()) << backend.status();
    EXPECT_STREQ((*backend)->name(), "cuda");
    return;
  }
  ASSERT_FALSE(backend.ok());
  EXPECT_FALSE(backend.status().message().empty());
#ifdef BALLAST_WITH_CUDA
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kUnavailable) << backend.status();
#else
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kUnimplemented) << backend.status();
#endif
}

}  // namespace
}  // namespace ballast
