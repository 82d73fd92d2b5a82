#include "internal/staged_communicator.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace ballast::internal {
namespace {
// Slots in the staging memory start at 256-byte boundaries: what cudaMalloc gives, and
// enough for any vector load.
constexpr size_t kAlign = 256;
}  // namespace

absl::StatusOr<std::unique_ptr<StagedCommunicator>> StagedCommunicator::Create(
    std::unique_ptr<Communicator> host, std::unique_ptr<HostStaging> staging) {
  if (host == nullptr || staging == nullptr) {
    return absl::InvalidArgumentError("StagedCommunicator needs a host communicator and staging");
  }
  return std::unique_ptr<StagedCommunicator>(
      new StagedCommunicator(std::move(host), std::move(staging)));
}

template <typename Collective>
absl::Status StagedCommunicator::Run(absl::Span<Staged> buffers, Collective&& collective) {
  size_t total = 0;  // staging bytes
  for (Staged& b : buffers) {
    b.host = b.caller;
    if (b.bytes == 0 || b.caller == nullptr) continue;
    BALLAST_ASSIGN_OR_RETURN(b.staged, staging_->IsBackendMemory(b.caller));
    if (!b.staged) continue;
    b.offset = total;
    total += (b.bytes + kAlign - 1) / kAlign * kAlign;
  }
  if (total == 0) return collective();
  // The previous collective's copies out of the staging memory may still be queued: the
  // copies in below are queued after them, and the host touches the memory only after the
  // wait below, so reusing it is safe (HostMemory waits itself before it replaces it).
  BALLAST_ASSIGN_OR_RETURN(char* base, staging_->HostMemory(total));
  for (Staged& b : buffers) {
    if (!b.staged) continue;
    b.host = base + b.offset;
    if (b.copy_in) {
      BALLAST_RETURN_IF_ERROR(staging_->QueueToHost(b.caller, b.host, b.bytes));
      staged_bytes_ += static_cast<int64_t>(b.bytes);
    }
  }
  BALLAST_RETURN_IF_ERROR(staging_->Wait());
  BALLAST_RETURN_IF_ERROR(collective());
  for (const Staged& b : buffers) {
    if (!b.staged || !b.copy_out) continue;
    BALLAST_RETURN_IF_ERROR(staging_->QueueToBackend(b.host, b.caller, b.bytes));
    staged_bytes_ += static_cast<int64_t>(b.bytes);
  }
  return absl::OkStatus();
}

absl::Status StagedCommunicator::AllReduceSum(float* data, size_t n) {
  Staged b{data, n * sizeof(float), true, true};
  return Run({&b, 1}, [&] { return host_->AllReduceSum(static_cast<float*>(b.host), n); });
}

absl::Status StagedCommunicator::AllReduceMin(int64_t* data, size_t n) {
  Staged b{data, n * sizeof(int64_t), true, true};
  return Run({&b, 1}, [&] { return host_->AllReduceMin(static_cast<int64_t*>(b.host), n); });
}

absl::Status StagedCommunicator::Broadcast(float* data, size_t n, int root) {
  Staged b{data, n * sizeof(float), rank() == root, rank() != root};
  return Run({&b, 1}, [&] { return host_->Broadcast(static_cast<float*>(b.host), n, root); });
}

absl::Status StagedCommunicator::Reduce(float* data, size_t n, int root) {
  Staged b{data, n * sizeof(float), true, rank() == root};
  return Run({&b, 1}, [&] { return host_->Reduce(static_cast<float*>(b.host), n, root); });
}

absl::Status StagedCommunicator::AllGather(const float* in, size_t n, float* out) {
  Staged b[2] = {{const_cast<float*>(in), n * sizeof(float), true, false},
                 {out, n * static_cast<size_t>(size()) * sizeof(float), false, true}};
  return Run(b, [&] {
    return host_->AllGather(static_cast<const float*>(b[0].host), n,
                            static_cast<float*>(b[1].host));
  });
}

absl::Status StagedCommunicator::Exchange(absl::Span<const PeerTransfer> sends,
                                          absl::Span<const PeerTransfer> recvs) {
  std::vector<Staged> buffers;
  buffers.reserve(sends.size() + recvs.size());
  for (const PeerTransfer& t : sends) buffers.push_back({t.data, t.count * sizeof(float), true});
  for (const PeerTransfer& t : recvs) {
    buffers.push_back({t.data, t.count * sizeof(float), false, true});
  }
  return Run(absl::MakeSpan(buffers), [&] {
    // The host communicator sees the same messages in the same order, over host memory.
    std::vector<PeerTransfer> host_sends(sends.begin(), sends.end());
    std::vector<PeerTransfer> host_recvs(recvs.begin(), recvs.end());
    for (size_t i = 0; i < host_sends.size(); ++i) {
      host_sends[i].data = static_cast<float*>(buffers[i].host);
    }
    for (size_t i = 0; i < host_recvs.size(); ++i) {
      host_recvs[i].data = static_cast<float*>(buffers[sends.size() + i].host);
    }
    return host_->Exchange(host_sends, host_recvs);
  });
}

}  // namespace ballast::internal
