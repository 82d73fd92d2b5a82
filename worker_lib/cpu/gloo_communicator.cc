#include "cpu/gloo_communicator.h"

#include <gloo/allgather.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/reduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <signal.h>

#include <algorithm>
#include <exception>
#include <stdexcept>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace ballast::internal {
namespace {

// Top byte of every Exchange and all-reduce slot; Gloo's own collectives use prefixes
// 0x01..0x08.
constexpr uint64_t kExchangeSlotPrefix = 0x42;
constexpr uint64_t kAllReduceSlotPrefix = 0x43;

// The slot of message `index` of call `call` (counted per kind of call): the prefix, the
// call's low 32 bits, the index's low 20 bits. Messages of different calls never match.
uint64_t MessageSlot(uint64_t prefix, uint64_t call, uint64_t index) {
  return (prefix << 56) | ((call & 0xFFFFFFFFull) << 20) | (index & 0xFFFFF);
}

// Waits for one unbound-buffer send or receive (null: none was posted); throws like Gloo.
void WaitSent(gloo::transport::UnboundBuffer* buffer, std::chrono::milliseconds timeout) {
  if (buffer != nullptr && !buffer->waitSend(timeout)) throw std::runtime_error("send aborted");
}
void WaitReceived(gloo::transport::UnboundBuffer* buffer, std::chrono::milliseconds timeout) {
  if (buffer != nullptr && !buffer->waitRecv(timeout)) throw std::runtime_error("recv aborted");
}

// Gloo reports failures by throwing; Ballast reports them as a Status that says which
// operation failed, so a dead peer fails the step instead of killing the process.
absl::Status FromException(const char* op, const std::exception& e) {
  const std::string what = e.what();
  const std::string message = absl::StrCat("gloo ", op, " failed: ", what);
  if (absl::StrContains(what, "imed out") || absl::StrContains(what, "imeout")) {
    return absl::DeadlineExceededError(message);
  }
  return absl::UnavailableError(message);
}

template <typename Fn>
absl::Status Guard(const char* op, Fn&& fn) {
  try {
    fn();
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return FromException(op, e);
  }
}

// Gloo's TCP pairs write with writev, which raises SIGPIPE once the peer has closed its
// socket (a rank that failed or died), and SIGPIPE's default action kills the process:
// a dead peer must fail the call with a Status instead (seen in CI: a rank thread wrote
// to its failed peer's closed socket and the test process died). So connecting turns
// that default into "ignore", as Python and gRPC do; a handler the program installed is
// left alone.
void IgnoreSigpipeIfDefault() {
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) != 0) return;
  if ((current.sa_flags & SA_SIGINFO) != 0 || current.sa_handler != SIG_DFL) return;
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  sigaction(SIGPIPE, &ignore, nullptr);
}

}  // namespace

absl::StatusOr<std::unique_ptr<GlooCommunicator>> GlooCommunicator::Connect(
    int rank, int size, gloo::rendezvous::Store& store, const std::string& prefix,
    const std::string& hostname, absl::Duration timeout) {
  if (size < 1) return absl::InvalidArgumentError(absl::StrCat("size ", size, " must be >= 1"));
  if (rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " out of range [0, ", size, ")"));
  }
  IgnoreSigpipeIfDefault();
  const auto timeout_ms = std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout));
  std::shared_ptr<gloo::rendezvous::Context> context;
  absl::Status status = Guard("connect", [&] {
    gloo::transport::tcp::attr attr;
    attr.hostname = hostname;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::PrefixStore prefixed(prefix, store);
    context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    context->setTimeout(timeout_ms);
    context->connectFullMesh(prefixed, device);
    // connectFullMesh returns when this rank's side of every pair is up, possibly before
    // a peer has finished its handshake. Without this barrier a rank that goes on to do
    // nothing collective can tear its context down under a peer still connecting.
    if (size > 1) {
      gloo::BarrierOptions barrier(context);
      barrier.setTimeout(timeout_ms);
      gloo::barrier(barrier);
    }
  });
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat("rank ", rank, "/", size, " prefix '", prefix,
                                                    "': ", status.message()));
  }
  return std::unique_ptr<GlooCommunicator>(
      new GlooCommunicator(rank, size, std::move(context), timeout_ms));
}

// Sends are posted before receives, in the swap and in Exchange, because of how Gloo's
// TCP pairs share work between the calling thread and the device's event-loop thread.
// A send whose peer already waits is written in place by the calling thread, holding
// the pair's mutex. The loop thread only try-locks that mutex; when it fails, it returns
// to a level-triggered epoll that fires again at once, so it spins. Were the receive
// posted first, the waiting peer's payload (released by the receive's ready notice)
// would arrive during that write and wake the loop thread; on a rank whose threads share
// one core (a pinned rank, or a container with a one-CPU quota) the woken loop thread
// preempts the writer that holds the mutex and then spins until the scheduler's tick
// takes the core back. Measured on 2 cores, a ViT step's 2.4 MB all-reduces: the late
// rank spent 4.3 ms inside each (median; a 4 ms tick) with the receive first, 0.36 ms
// with the send first (docs/benchmarks.md, 2026-11-29 (d)). Posting the send first, the
// peer's payload cannot leave before this rank's receive is posted, after its write.
//
// Why not gloo::allreduce: on loopback TCP it costs about 1 ms a call whatever the size
// (16 floats: 1.1 ms; a ViT block's 786 KB output: 1.9-2.3 ms), while exchanging 786 KB
// through unbound buffers costs 0.35-0.45 ms. Gloo's older algorithm classes are fast
// too, but return before their last sends have left, which breaks a peer's collective
// when a rank tears down right after it. Measured in docs/benchmarks.md.
//
// Two ranks swap their whole buffers and each adds the other's: one round trip, the
// fewest a collective can have, which matters most on a rank that must wait for the CPU
// at every wake-up (a throttled straggler). a + b == b + a exactly, so both ranks end
// with bitwise the same values. The send is posted first (below).
//
// More ranks use a ring. Chunk k of the data is [n*k/p, n*(k+1)/p). In reduce-scatter
// step s, rank r sends chunk (r - s) mod p to its right and folds chunk (r - s - 1) mod p
// from its left into its own, so after p - 1 steps it holds chunk (r + 1) mod p reduced
// over all ranks; all-gather passes the reduced chunks on around the ring. Each chunk is
// reduced once and then copied, so every rank again ends with the same values.
//
// Every message is waited for before returning, so a rank may tear down as soon as the
// call returns.
template <typename T, typename Combine>
void GlooCommunicator::RingAllReduce(T* data, size_t n, Combine combine,
                                     std::vector<T>& scratch) {
  const uint64_t call = allreduce_calls_++;
  const int p = size_;
  const int right = (rank_ + 1) % p;
  const int left = (rank_ + p - 1) % p;
  auto slot = [call](int step) { return MessageSlot(kAllReduceSlotPrefix, call, step); };
  auto wait = [this](gloo::transport::UnboundBuffer* send, gloo::transport::UnboundBuffer* recv) {
    WaitSent(send, timeout_);
    WaitReceived(recv, timeout_);
  };
  auto send_view = context_->createUnboundBuffer(data, n * sizeof(T));
  if (p == 2) {
    if (scratch.size() < n) scratch.resize(n);
    auto incoming = context_->createUnboundBuffer(scratch.data(), n * sizeof(T));
    send_view->send(right, slot(0));  // first: see "Sends are posted before receives"
    incoming->recv(right, slot(0));
    wait(send_view.get(), incoming.get());
    std::transform(data, data + n, scratch.data(), data, combine);
    return;
  }
  auto begin = [n, p](int k) { return n * static_cast<size_t>(k) / static_cast<size_t>(p); };
  auto count = [&](int k) { return begin(k + 1) - begin(k); };
  if (scratch.size() < count(p - 1)) scratch.resize(count(p - 1));  // the largest chunk
  auto recv_view = context_->createUnboundBuffer(data, n * sizeof(T));
  auto incoming = context_->createUnboundBuffer(scratch.data(), scratch.size() * sizeof(T));
  for (int s = 0; s < p - 1; ++s) {
    const int out = (rank_ + p - s) % p;
    const int in = (rank_ + 2 * p - s - 1) % p;
    if (count(in) > 0) incoming->recv(left, slot(s), 0, count(in) * sizeof(T));
    if (count(out) > 0) {
      send_view->send(right, slot(s), begin(out) * sizeof(T), count(out) * sizeof(T));
    }
    wait(count(out) > 0 ? send_view.get() : nullptr, count(in) > 0 ? incoming.get() : nullptr);
    std::transform(data + begin(in), data + begin(in + 1), scratch.data(), data + begin(in),
                   combine);
  }
  for (int s = 0; s < p - 1; ++s) {
    const int out = (rank_ + 1 + p - s) % p;
    const int in = (rank_ + p - s) % p;
    const int step = p - 1 + s;
    if (count(in) > 0) {
      recv_view->recv(left, slot(step), begin(in) * sizeof(T), count(in) * sizeof(T));
    }
    if (count(out) > 0) {
      send_view->send(right, slot(step), begin(out) * sizeof(T), count(out) * sizeof(T));
    }
    wait(count(out) > 0 ? send_view.get() : nullptr, count(in) > 0 ? recv_view.get() : nullptr);
  }
}

absl::Status GlooCommunicator::AllReduceSum(float* data, size_t n) {
  if (size_ == 1 || n == 0) return absl::OkStatus();
  return Guard("allreduce(sum)", [&] {
    RingAllReduce(data, n, [](float a, float b) { return a + b; }, float_scratch_);
  });
}

absl::Status GlooCommunicator::AllReduceMin(int64_t* data, size_t n) {
  if (size_ == 1 || n == 0) return absl::OkStatus();
  return Guard("allreduce(min)", [&] {
    RingAllReduce(data, n, [](int64_t a, int64_t b) { return std::min(a, b); }, int_scratch_);
  });
}

absl::Status GlooCommunicator::Broadcast(float* data, size_t n, int root) {
  if (root < 0 || root >= size_) {
    return absl::InvalidArgumentError(absl::StrCat("broadcast root ", root, " out of range"));
  }
  if (size_ == 1 || n == 0) return absl::OkStatus();
  return Guard("broadcast", [&] {
    gloo::BroadcastOptions opts(context_);
    opts.setOutput(data, n);
    opts.setRoot(root);
    opts.setTimeout(timeout_);
    gloo::broadcast(opts);
  });
}

absl::Status GlooCommunicator::Reduce(float* data, size_t n, int root) {
  if (root < 0 || root >= size_) {
    return absl::InvalidArgumentError(absl::StrCat("reduce root ", root, " out of range"));
  }
  if (size_ == 1 || n == 0) return absl::OkStatus();
  // Gloo's reduce reads the input and writes the output on every rank; a scratch output
  // keeps `data` meaningful on the root without aliasing.
  std::vector<float> out(n);
  absl::Status status = Guard("reduce", [&] {
    gloo::ReduceOptions opts(context_);
    opts.setInput(data, n);
    opts.setOutput(out.data(), n);
    opts.setRoot(root);
    void (*fn)(void*, const void*, const void*, size_t) = &gloo::sum<float>;
    opts.setReduceFunction(fn);
    opts.setTimeout(timeout_);
    gloo::reduce(opts);
  });
  if (status.ok() && rank_ == root) std::copy(out.begin(), out.end(), data);
  return status;
}

absl::Status GlooCommunicator::AllGather(const float* in, size_t n, float* out) {
  if (n == 0) return absl::OkStatus();
  if (size_ == 1) {
    std::copy(in, in + n, out);
    return absl::OkStatus();
  }
  return Guard("allgather", [&] {
    gloo::AllgatherOptions opts(context_);
    opts.setInput(const_cast<float*>(in), n);
    opts.setOutput(out, n * size_);
    opts.setTimeout(timeout_);
    gloo::allgather(opts);
  });
}

absl::Status GlooCommunicator::CheckPeer(int peer, const char* what) const {
  if (peer < 0 || peer >= size_ || peer == rank_) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " peer ", peer, " invalid for rank ", rank_, " of ", size_));
  }
  return absl::OkStatus();
}

absl::Status GlooCommunicator::Exchange(absl::Span<const PeerTransfer> sends,
                                        absl::Span<const PeerTransfer> recvs) {
  const uint64_t call = exchange_calls_++;
  for (const auto& s : sends) {
    if (absl::Status st = CheckPeer(s.peer, "send"); !st.ok()) return st;
  }
  for (const auto& r : recvs) {
    if (absl::Status st = CheckPeer(r.peer, "recv"); !st.ok()) return st;
  }
  // The index is that of the message among those between the same pair, so the k-th
  // message from a to b matches the k-th receive posted by b for a.
  auto slot = [call](uint64_t index) { return MessageSlot(kExchangeSlotPrefix, call, index); };
  std::vector<int> sent_to(size_, 0);
  std::vector<int> received_from(size_, 0);
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> send_buffers;
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> recv_buffers;
  return Guard("exchange", [&] {
    // Sends first: see "Sends are posted before receives" above RingAllReduce.
    for (const auto& s : sends) {
      if (s.count == 0) continue;
      auto buf = context_->createUnboundBuffer(s.data, s.count * sizeof(float));
      buf->send(s.peer, slot(sent_to[s.peer]++));
      send_buffers.push_back(std::move(buf));
    }
    for (const auto& r : recvs) {
      if (r.count == 0) continue;
      auto buf = context_->createUnboundBuffer(r.data, r.count * sizeof(float));
      buf->recv(r.peer, slot(received_from[r.peer]++));
      recv_buffers.push_back(std::move(buf));
    }
    for (auto& b : send_buffers) WaitSent(b.get(), timeout_);
    for (auto& b : recv_buffers) WaitReceived(b.get(), timeout_);
  });
}

}  // namespace ballast::internal
