// Which CUDA device a rank uses (backend.h), and the process's claim on it
// (internal/cuda_device_claims.h). Plain C++, built with or without CUDA, so both are
// tested on every machine.
#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "ballast/backend.h"
#include "absl/synchronization/mutex.h"
#include "common/text.h"
#include "internal/cuda_device_claims.h"

namespace ballast {

absl::StatusOr<int> ResolveCudaDevice(int device, int rank, int visible_devices,
                                      const char* local_rank_env) {
  if (device < kDeviceFromLocalRank) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CudaBackendOptions.device must be a device ordinal >= 0 or kDeviceFromLocalRank (-1), "
        "got ", device));
  }
  std::string source = "CudaBackendOptions.device";
  int chosen = device;
  if (device == kDeviceFromLocalRank) {
    if (local_rank_env != nullptr) {
      int32_t local = -1;
      if (!absl::SimpleAtoi(local_rank_env, &local) || local < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "LOCAL_RANK='", Excerpt(local_rank_env), "' is not a non-negative integer"));
      }
      chosen = local;
      source = "local rank (LOCAL_RANK)";
    } else {
      chosen = rank;
      source = "rank (no LOCAL_RANK set)";
    }
  }
  if (chosen >= visible_devices) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, " ", chosen, " but only ", visible_devices,
        " CUDA devices are visible: run one process per GPU, with LOCAL_RANK set by the "
        "launcher or CudaBackendOptions.device, and check CUDA_VISIBLE_DEVICES"));
  }
  return chosen;
}

namespace internal {
namespace {

// The device this process's multi-rank CUDA backends use, and how many hold it.
struct Claims {
  absl::Mutex mu;
  int device ABSL_GUARDED_BY(mu) = -1;
  int holders ABSL_GUARDED_BY(mu) = 0;
};

Claims& ProcessClaims() {
  static Claims* claims = new Claims;  // never destroyed: claims may outlive static teardown
  return *claims;
}

}  // namespace

absl::StatusOr<CudaDeviceClaim> CudaDeviceClaim::Claim(int device) {
  if (device < 0) {
    return absl::InvalidArgumentError(absl::StrCat("device ", device, " must be >= 0"));
  }
  Claims& claims = ProcessClaims();
  absl::MutexLock lock(&claims.mu);
  if (claims.holders > 0 && claims.device != device) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this process already drives a multi-rank CUDA backend on device ", claims.device,
        ", and one on device ", device, " would need memory the other GPU can reach (Ballast "
        "does not make its pools peer-accessible): run one process per GPU, e.g. with "
        "examples/vit/launch.py --backend cuda or torchrun"));
  }
  claims.device = device;
  ++claims.holders;
  return CudaDeviceClaim(device);
}

CudaDeviceClaim& CudaDeviceClaim::operator=(CudaDeviceClaim&& other) noexcept {
  if (this != &other) {
    CudaDeviceClaim released(device_);  // releases ours when it goes out of scope
    device_ = other.device_;
    other.device_ = -1;
  }
  return *this;
}

CudaDeviceClaim::~CudaDeviceClaim() {
  if (device_ < 0) return;
  Claims& claims = ProcessClaims();
  absl::MutexLock lock(&claims.mu);
  if (--claims.holders == 0) claims.device = -1;
}

}  // namespace internal
}  // namespace ballast
