// Which GPU a rank gets (ResolveCudaDevice, worker_lib/cuda/device.cc) and the process's
// claim on it (one process per GPU): plain logic, so it runs on every machine, GPU or not.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <utility>

#include "ballast/backend.h"
#include "worker_lib/internal/cuda_device_claims.h"

namespace ballast {
namespace {

using ::testing::HasSubstr;

TEST(ResolveCudaDeviceTest, AnExplicitDeviceIsKept) {
  EXPECT_EQ(*ResolveCudaDevice(3, /*rank=*/0, /*visible_devices=*/8, "5"), 3);
  EXPECT_EQ(*ResolveCudaDevice(0, 7, 1, nullptr), 0);
}

TEST(ResolveCudaDeviceTest, TheLocalRankPicksTheDeviceElseTheRank) {
  // torchrun on node 2 of a 16-rank job: global rank 11, local rank 3.
  EXPECT_EQ(*ResolveCudaDevice(kDeviceFromLocalRank, 11, 8, "3"), 3);
  // No launcher variable: ranks as processes on one node, numbered from 0.
  EXPECT_EQ(*ResolveCudaDevice(kDeviceFromLocalRank, 2, 4, nullptr), 2);
  EXPECT_EQ(CudaBackendOptions{}.device, kDeviceFromLocalRank);  // the default
}

TEST(ResolveCudaDeviceTest, MoreRanksThanVisibleDevicesIsAClearError) {
  absl::StatusOr<int> d = ResolveCudaDevice(kDeviceFromLocalRank, 9, 8, "9");
  ASSERT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(d.status().message(), HasSubstr("local rank (LOCAL_RANK) 9"));
  EXPECT_THAT(d.status().message(), HasSubstr("only 8 CUDA devices"));
  d = ResolveCudaDevice(kDeviceFromLocalRank, 1, 1, nullptr);
  EXPECT_THAT(d.status().message(), HasSubstr("rank (no LOCAL_RANK set) 1"));
  d = ResolveCudaDevice(4, 0, 2, nullptr);
  EXPECT_THAT(d.status().message(), HasSubstr("CudaBackendOptions.device 4"));
}

TEST(ResolveCudaDeviceTest, BadValuesAreNamed) {
  for (const char* bad : {"", "x", "-1", "1.5", "99999999999"}) {
    absl::StatusOr<int> d = ResolveCudaDevice(kDeviceFromLocalRank, 0, 8, bad);
    ASSERT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(d.status().message(), HasSubstr("LOCAL_RANK='")) << bad;
  }
  EXPECT_THAT(ResolveCudaDevice(-2, 0, 8, nullptr).status().message(), HasSubstr("got -2"));
}

TEST(CudaDeviceClaimTest, OneProcessDrivesOneGpu) {
  using internal::CudaDeviceClaim;
  absl::StatusOr<CudaDeviceClaim> first = CudaDeviceClaim::Claim(1);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<CudaDeviceClaim> same = CudaDeviceClaim::Claim(1);  // two groups, one GPU
  ASSERT_TRUE(same.ok()) << same.status();
  absl::StatusOr<CudaDeviceClaim> other = CudaDeviceClaim::Claim(0);
  ASSERT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(other.status().message(), HasSubstr("already drives a multi-rank CUDA backend on "
                                                  "device 1"));
  EXPECT_THAT(other.status().message(), HasSubstr("one process per GPU"));
  // Moving a claim keeps it; releasing the last one frees the process for another device.
  CudaDeviceClaim moved = *std::move(first);
  *same = CudaDeviceClaim();
  EXPECT_FALSE(CudaDeviceClaim::Claim(0).ok());
  moved = CudaDeviceClaim();
  absl::StatusOr<CudaDeviceClaim> now = CudaDeviceClaim::Claim(0);
  EXPECT_TRUE(now.ok()) << now.status();
  EXPECT_EQ(CudaDeviceClaim::Claim(-1).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ballast
