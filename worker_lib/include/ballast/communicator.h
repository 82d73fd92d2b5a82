// The collective half of a backend: the group's all-reduce and friends, over Gloo (TCP,
// host memory) or NCCL (device memory).
//
// Every method is collective over the group (Exchange: every rank calls it, in the same
// sequence), and the contract is the same on every backend:
//
// Ordering. A collective reads what the compute queued before it left, and the compute
// queued after it reads its results: callers never wait for anything themselves.
//   - CPU (Gloo): the call returns when the results are in place.
//   - CUDA with NCCL: the call returns once the collective is queued on the backend's
//     stream, after the compute it depends on; no host wait per collective. A watchdog
//     thread (internal/collective_watchdog.h) times each queued collective.
//   - CUDA host-staged (several ranks on one GPU): one host wait per collective, for its
//     inputs to reach host memory; its results are queued back onto the stream.
// Results in host memory (the plan agreement's int64s, a host buffer of any call) are in
// place when the call returns, on every backend. On CUDA with NCCL those are a step's only
// host waits besides TpGroup::EndStep's (two a step; at one rank the plan agreement needs
// none); host-staged collectives add their own.
//
// Failures. A peer that never arrives yields DEADLINE_EXCEEDED or UNAVAILABLE after the
// communicator's timeout instead of hanging. On CUDA the timeout runs from when the
// collective's inputs are ready on this rank, so this rank's own slow compute is not
// taken for a missing peer; a peer slower than the timeout is one. On CUDA with NCCL a
// queued collective can fail after its call returned: the watchdog then aborts the
// communicator (which ends whatever is still queued on the device), the next call on this
// rank fails with the failure, which names the collective when one did not complete
// (an error NCCL reports for the communicator as a whole names none), and so does
// Compute::Synchronize; its peers' watchdogs do the same. What the failed collective
// should have written is undefined, so such a rank restarts from a checkpoint, and an
// aborted NCCL communicator stays aborted. On Gloo a failed or timed-out call leaves the
// group out of step: recreate the backend.
//
// Exchange: a rank never sends to or receives from itself.
//
// Memory. Buffers may be host memory or backend memory: NCCL stages host buffers through
// the device, the host-staged communicator stages device buffers through pinned host
// memory.
#ifndef BALLAST_COMMUNICATOR_H_
#define BALLAST_COMMUNICATOR_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace ballast {

// One message of a point-to-point `Exchange`.
struct PeerTransfer {
  int peer = 0;
  float* data = nullptr;  // const for sends; written for receives
  size_t count = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // data[i] = sum over ranks of data[i].
  virtual absl::Status AllReduceSum(float* data, size_t n) = 0;
  // data[i] = min over ranks of data[i]. Used for plan agreement.
  virtual absl::Status AllReduceMin(int64_t* data, size_t n) = 0;
  virtual absl::Status Broadcast(float* data, size_t n, int root) = 0;
  // Sum over ranks into `data` on root; other ranks' buffers are left unspecified.
  virtual absl::Status Reduce(float* data, size_t n, int root) = 0;
  // out (size n * size()) = concatenation of every rank's `in` (size n), in rank order.
  virtual absl::Status AllGather(const float* in, size_t n, float* out) = 0;
  // Posts every send and receive at once and waits for all of them, so callers need no
  // global ordering of point-to-point messages. Messages between one pair of ranks are
  // matched in the order they are listed on both sides. Collective: every rank of the
  // group calls it, in the same sequence, even with nothing to send or receive (that keeps
  // the per-call message tags in step on Gloo).
  virtual absl::Status Exchange(absl::Span<const PeerTransfer> sends,
                                absl::Span<const PeerTransfer> recvs) = 0;

  // Point-to-point conveniences over Exchange; collective in the same sense. A rank that is
  // neither sender nor receiver calls Exchange({}, {}).
  absl::Status Send(const float* data, size_t n, int peer) {
    PeerTransfer t{peer, const_cast<float*>(data), n};
    return Exchange({&t, 1}, {});
  }
  absl::Status Recv(float* data, size_t n, int peer) {
    PeerTransfer t{peer, data, n};
    return Exchange({}, {&t, 1});
  }
};

}  // namespace ballast

#endif  // BALLAST_COMMUNICATOR_H_
