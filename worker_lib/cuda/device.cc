// Which CUDA device a rank uses (backend.h). Plain C++, built with or without CUDA, so
// the mapping is tested on every machine.
#include <cstdint>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "ballast/backend.h"
#include "common/text.h"

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

}  // namespace ballast
