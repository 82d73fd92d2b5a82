// The CUDA entry points of ballast/backend.h for builds without CUDA
// (-DBALLAST_WITH_CUDA=OFF, the default): callers can always ask, and get a clear answer
// instead of a link error.
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ballast/backend.h"

namespace ballast {

int CudaDeviceCount() { return 0; }
bool CudaAvailable() { return false; }

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const CudaBackendOptions& /*options*/) {
  return absl::UnimplementedError("built without CUDA: configure with -DBALLAST_WITH_CUDA=ON");
}

}  // namespace ballast
