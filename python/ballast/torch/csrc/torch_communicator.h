// TorchCommunicator: worker_lib's Communicator on a PyTorch c10d::ProcessGroup, so Ballast's
// blocks run their collectives on the TP group the job already made (dist.new_group(), or
// the world group), Gloo here and NCCL where torch has CUDA.
//
// Ranks are the process group's own: for a sub-group of a larger world, rank() is the
// rank inside the group. Every call waits for its work before returning, as the
// Communicator contract requires (the buffers are the caller's). A collective that fails
// or times out (after the group's own timeout, set by dist.new_group(timeout=...)) comes
// back as UNAVAILABLE naming the operation; c10d exceptions never escape.
//
//   auto comm = std::make_unique<ballast::torch_adapter::TorchCommunicator>(process_group);
//   auto backend = ballast::CreateCpuBackendOn(std::move(comm));
#ifndef BALLAST_PYTHON_TORCH_COMMUNICATOR_H_
#define BALLAST_PYTHON_TORCH_COMMUNICATOR_H_

#include <cstdint>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "ballast/communicator.h"

namespace ballast::torch_adapter {

class TorchCommunicator final : public Communicator {
 public:
  explicit TorchCommunicator(c10::intrusive_ptr<c10d::ProcessGroup> group);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::Status AllReduceSum(float* data, size_t n) override;
  absl::Status AllReduceMin(int64_t* data, size_t n) override;
  absl::Status Broadcast(float* data, size_t n, int root) override;
  absl::Status Reduce(float* data, size_t n, int root) override;
  absl::Status AllGather(const float* in, size_t n, float* out) override;
  absl::Status Exchange(absl::Span<const PeerTransfer> sends,
                        absl::Span<const PeerTransfer> recvs) override;

 private:
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  int rank_;
  int size_;
};

}  // namespace ballast::torch_adapter

#endif  // BALLAST_PYTHON_TORCH_COMMUNICATOR_H_
