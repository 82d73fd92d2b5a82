// One process per GPU, enforced. The CUDA backend allocates from the device's default
// stream-ordered memory pool, whose memory other devices cannot reach unless the pool is
// made peer-accessible (cudaMemPoolSetAccess), which Ballast does not do. NCCL between two
// GPUs driven by one process would therefore fault on the first transfer between them.
// Each multi-rank CUDA backend claims its device for the process; a claim on a second
// device while the first is held is refused with a message that says what to do. One-rank
// backends (no NCCL peers) claim nothing. Plain C++, so it is tested on every machine.
#ifndef BALLAST_WORKER_LIB_INTERNAL_CUDA_DEVICE_CLAIMS_H_
#define BALLAST_WORKER_LIB_INTERNAL_CUDA_DEVICE_CLAIMS_H_

#include "absl/status/statusor.h"

namespace ballast::internal {

// Held by a multi-rank CUDA backend for its lifetime. Move-only; releasing the last claim
// on a device frees the process to use another.
class CudaDeviceClaim {
 public:
  CudaDeviceClaim() = default;  // claims nothing
  CudaDeviceClaim(CudaDeviceClaim&& other) noexcept : device_(other.device_) { other.device_ = -1; }
  CudaDeviceClaim& operator=(CudaDeviceClaim&& other) noexcept;
  CudaDeviceClaim(const CudaDeviceClaim&) = delete;
  CudaDeviceClaim& operator=(const CudaDeviceClaim&) = delete;
  ~CudaDeviceClaim();

  // FAILED_PRECONDITION when this process holds a claim on another device.
  static absl::StatusOr<CudaDeviceClaim> Claim(int device);

 private:
  explicit CudaDeviceClaim(int device) : device_(device) {}
  int device_ = -1;
};

}  // namespace ballast::internal

#endif  // BALLAST_WORKER_LIB_INTERNAL_CUDA_DEVICE_CLAIMS_H_
