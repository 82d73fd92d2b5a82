// GuardedCommunicator: a backend's communicator with the compute contract's ordering
// (ballast/compute.h), for every backend whose collectives run on the host (the CPU
// backend's Gloo, and the CUDA backend's host-staged collectives): a
// collective after a void compute call that failed does not run on what that call left.
// It returns the call's error, and the communicator is aborted from then on, since this
// rank has skipped a collective its peers are in and the group is out of step for good.
// Aborting closes the Gloo connections, so the peers fail at once instead of at their
// timeout. As on CUDA, a call with nothing to move (n == 0, an empty exchange) or a bad
// root does not take the failure; it is left for the next collective that moves data.
#ifndef BALLAST_WORKER_LIB_INTERNAL_GUARDED_COMMUNICATOR_H_
#define BALLAST_WORKER_LIB_INTERNAL_GUARDED_COMMUNICATOR_H_

#include <algorithm>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "ballast/communicator.h"
#include "common/status_macros.h"
#include "internal/compute_checks.h"

namespace ballast::internal {

class GuardedCommunicator final : public Communicator {
 public:
  GuardedCommunicator(std::unique_ptr<Communicator> inner, std::shared_ptr<ComputeFailure> failure)
      : rank_(inner->rank()),
        size_(inner->size()),
        inner_(std::move(inner)),
        failure_(std::move(failure)) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::Status AllReduceSum(float* data, size_t n) override {
    if (n == 0) return aborted_;
    BALLAST_RETURN_IF_ERROR(Ready("AllReduceSum"));
    return inner_->AllReduceSum(data, n);
  }
  absl::Status AllReduceMin(int64_t* data, size_t n) override {
    if (n == 0) return aborted_;
    BALLAST_RETURN_IF_ERROR(Ready("AllReduceMin"));
    return inner_->AllReduceMin(data, n);
  }
  absl::Status Broadcast(float* data, size_t n, int root) override {
    BALLAST_RETURN_IF_ERROR(CheckRoot("Broadcast", root));
    if (n == 0) return aborted_;
    BALLAST_RETURN_IF_ERROR(Ready("Broadcast"));
    return inner_->Broadcast(data, n, root);
  }
  absl::Status Reduce(float* data, size_t n, int root) override {
    BALLAST_RETURN_IF_ERROR(CheckRoot("Reduce", root));
    if (n == 0) return aborted_;
    BALLAST_RETURN_IF_ERROR(Ready("Reduce"));
    return inner_->Reduce(data, n, root);
  }
  absl::Status AllGather(const float* in, size_t n, float* out) override {
    if (n == 0) return aborted_;
    BALLAST_RETURN_IF_ERROR(Ready("AllGather"));
    return inner_->AllGather(in, n, out);
  }
  absl::Status Exchange(absl::Span<const PeerTransfer> sends,
                        absl::Span<const PeerTransfer> recvs) override {
    auto empty = [](absl::Span<const PeerTransfer> transfers) {
      return std::all_of(transfers.begin(), transfers.end(),
                         [](const PeerTransfer& t) { return t.count == 0; });
    };
    // Gloo still needs the call (its message tags count calls), but it moves nothing.
    if (empty(sends) && empty(recvs)) {
      BALLAST_RETURN_IF_ERROR(aborted_);
    } else {
      BALLAST_RETURN_IF_ERROR(Ready("Exchange"));
    }
    return inner_->Exchange(sends, recvs);
  }

 private:
  absl::Status CheckRoot(const char* what, int root) const {
    if (root >= 0 && root < size_) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": root ", root, " outside group of size ", size_));
  }

  absl::Status Ready(const char* what) {
    if (!aborted_.ok()) return aborted_;
    absl::Status failed = failure_->Take();
    if (failed.ok()) return absl::OkStatus();
    const absl::Status cause(failed.code(), absl::StrCat(what,
                                                         " not run: a compute call "
                                                         "before it failed: ",
                                                         failed.message()));
    aborted_ = absl::Status(cause.code(),
                            absl::StrCat("communicator was aborted earlier: ", cause.message()));
    inner_.reset();  // closes the connections: the peers' collectives fail now
    return cause;
  }

  const int rank_;
  const int size_;
  std::unique_ptr<Communicator> inner_;  // null once aborted
  std::shared_ptr<ComputeFailure> failure_;
  absl::Status aborted_;
};

}  // namespace ballast::internal

#endif  // BALLAST_WORKER_LIB_INTERNAL_GUARDED_COMMUNICATOR_H_
