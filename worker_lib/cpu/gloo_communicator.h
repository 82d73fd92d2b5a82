// Collectives over Gloo's TCP transport on host memory.
#ifndef BALLAST_WORKER_LIB_CPU_GLOO_COMMUNICATOR_H_
#define BALLAST_WORKER_LIB_CPU_GLOO_COMMUNICATOR_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ballast/communicator.h"

namespace gloo {
class Context;
namespace rendezvous {
class Store;
}
}  // namespace gloo

namespace ballast::internal {

class GlooCommunicator final : public Communicator {
 public:
  // Connects a full mesh among `size` ranks through `store` and returns once every rank
  // has; fails (never hangs) when the peers do not all arrive within `timeout`.
  static absl::StatusOr<std::unique_ptr<GlooCommunicator>> Connect(
      int rank, int size, gloo::rendezvous::Store& store, const std::string& prefix,
      const std::string& hostname, absl::Duration timeout);

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
  GlooCommunicator(int rank, int size, std::shared_ptr<gloo::Context> context,
                   std::chrono::milliseconds timeout)
      : rank_(rank), size_(size), context_(std::move(context)), timeout_(timeout) {}
  absl::Status CheckPeer(int peer, const char* what) const;
  // An all-reduce on Gloo's unbound buffers: a swap for two ranks, else a ring
  // (reduce-scatter, then all-gather). `scratch` holds what arrives; kept between calls.
  template <typename T, typename Combine>
  void RingAllReduce(T* data, size_t n, Combine combine, std::vector<T>& scratch);

  int rank_;
  int size_;
  std::shared_ptr<gloo::Context> context_;
  std::chrono::milliseconds timeout_;
  // Exchange calls so far; part of every message slot, so messages of different calls
  // can never match each other.
  uint64_t exchange_calls_ = 0;
  // All-reduce calls so far; part of their message slots, like exchange_calls_.
  uint64_t allreduce_calls_ = 0;
  std::vector<float> float_scratch_;
  std::vector<int64_t> int_scratch_;
};

}  // namespace ballast::internal

#endif  // BALLAST_WORKER_LIB_CPU_GLOO_COMMUNICATOR_H_
