#include "torch_communicator.h"

#include <ATen/ATen.h>

#include <exception>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace ballast::torch_adapter {
namespace {

// A tensor over the caller's memory: no copy. The Communicator contract keeps the memory
// alive and unchanged until the call returns, and every call waits for its work.
at::Tensor Wrap(const float* data, size_t n) {
  return at::from_blob(const_cast<float*>(data), {static_cast<int64_t>(n)},
                       at::TensorOptions().dtype(at::kFloat));
}

absl::Status Failed(const char* what, const std::exception& e) {
  // c10::Error messages carry a C++ backtrace after the first line; operators need the
  // first line (what failed and why), not the stack.
  std::string message = e.what();
  if (const size_t eol = message.find('\n'); eol != std::string::npos) message.resize(eol);
  return absl::UnavailableError(absl::StrCat("torch process group ", what, " failed: ", message));
}

// Runs one c10d operation and waits for it, turning exceptions into a status.
absl::Status Run(const char* what, const std::function<c10::intrusive_ptr<c10d::Work>()>& start) {
  try {
    c10::intrusive_ptr<c10d::Work> work = start();
    work->wait();
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return Failed(what, e);
  }
}

}  // namespace

TorchCommunicator::TorchCommunicator(c10::intrusive_ptr<c10d::ProcessGroup> group)
    : group_(std::move(group)), rank_(group_->getRank()), size_(group_->getSize()) {}

absl::Status TorchCommunicator::AllReduceSum(float* data, size_t n) {
  if (n == 0) return absl::OkStatus();
  std::vector<at::Tensor> tensors{Wrap(data, n)};
  return Run("all-reduce(sum)", [&] {
    return group_->allreduce(tensors, c10d::AllreduceOptions{c10d::ReduceOp::SUM});
  });
}

absl::Status TorchCommunicator::AllReduceMin(int64_t* data, size_t n) {
  if (n == 0) return absl::OkStatus();
  std::vector<at::Tensor> tensors{
      at::from_blob(data, {static_cast<int64_t>(n)}, at::TensorOptions().dtype(at::kLong))};
  return Run("all-reduce(min)", [&] {
    return group_->allreduce(tensors, c10d::AllreduceOptions{c10d::ReduceOp::MIN});
  });
}

absl::Status TorchCommunicator::Broadcast(float* data, size_t n, int root) {
  if (n == 0) return absl::OkStatus();
  std::vector<at::Tensor> tensors{Wrap(data, n)};
  c10d::BroadcastOptions options;
  options.rootRank = root;
  return Run("broadcast", [&] { return group_->broadcast(tensors, options); });
}

absl::Status TorchCommunicator::Reduce(float* data, size_t n, int root) {
  if (n == 0) return absl::OkStatus();
  std::vector<at::Tensor> tensors{Wrap(data, n)};
  c10d::ReduceOptions options;
  options.rootRank = root;
  options.reduceOp = c10d::ReduceOp::SUM;
  return Run("reduce", [&] { return group_->reduce(tensors, options); });
}

absl::Status TorchCommunicator::AllGather(const float* in, size_t n, float* out) {
  if (n == 0) return absl::OkStatus();
  std::vector<at::Tensor> input{Wrap(in, n)};
  std::vector<std::vector<at::Tensor>> output(1);
  for (int r = 0; r < size_; ++r) output[0].push_back(Wrap(out + r * n, n));
  return Run("all-gather", [&] { return group_->allgather(output, input); });
}

absl::Status TorchCommunicator::Exchange(absl::Span<const PeerTransfer> sends,
                                         absl::Span<const PeerTransfer> recvs) {
  for (const auto* list : {&sends, &recvs}) {
    for (const PeerTransfer& t : *list) {
      if (t.peer < 0 || t.peer >= size_ || t.peer == rank_) {
        return absl::InvalidArgumentError(absl::StrCat("exchange peer ", t.peer,
                                                       " is not another rank of the group (rank ",
                                                       rank_, " of ", size_, ")"));
      }
    }
  }
  // The k-th message between one pair of ranks in this call carries tag k on both sides,
  // which matches messages in listed order (the Communicator contract). Every call waits
  // for all of its messages, so tags need not differ across calls.
  std::vector<std::vector<at::Tensor>> tensors;
  tensors.reserve(sends.size() + recvs.size());
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  absl::Status status;
  try {
    std::map<int, int> send_tag, recv_tag;
    for (const PeerTransfer& t : sends) {
      if (t.count == 0) continue;
      tensors.push_back({Wrap(t.data, t.count)});
      works.push_back(group_->send(tensors.back(), t.peer, send_tag[t.peer]++));
    }
    for (const PeerTransfer& t : recvs) {
      if (t.count == 0) continue;
      tensors.push_back({Wrap(t.data, t.count)});
      works.push_back(group_->recv(tensors.back(), t.peer, recv_tag[t.peer]++));
    }
  } catch (const std::exception& e) {
    status = Failed("send/recv", e);
  }
  // Wait for everything that was posted, even after a failure: the buffers are the
  // caller's and must not be written once this call has returned.
  for (auto& work : works) {
    try {
      work->wait();
    } catch (const std::exception& e) {
      if (status.ok()) status = Failed("send/recv", e);
    }
  }
  return status;
}

}  // namespace ballast::torch_adapter
