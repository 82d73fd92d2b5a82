#include "cuda/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "cuda/cuda_check.h"
#include "gloo/rendezvous/store.h"
#include "internal/collective_watchdog.h"

namespace ballast::cuda_internal {
namespace {

// Publishes rank 0's ncclUniqueId under "<prefix>/nccl_id" and reads it on the other ranks.
absl::StatusOr<ncclUniqueId> ShareUniqueId(const CudaBackendOptions& options) {
  ncclUniqueId id;
  if (options.size == 1) {
    BALLAST_NCCL_RETURN_IF_ERROR(ncclGetUniqueId(&id));  // nobody to share with
    return id;
  }
  auto* store = static_cast<gloo::rendezvous::Store*>(options.store.handle().get());
  if (store == nullptr) {
    return absl::InvalidArgumentError("CudaBackendOptions.store holds no rendezvous store");
  }
  const std::string key = absl::StrCat(options.prefix, "/nccl_id");
  if (options.rank == 0) {
    BALLAST_NCCL_RETURN_IF_ERROR(ncclGetUniqueId(&id));
    std::vector<char> bytes(sizeof(id));
    std::memcpy(bytes.data(), &id, sizeof(id));
    try {
      store->set(key, bytes);
    } catch (const std::exception& e) {
      return absl::InternalError(absl::StrCat("publishing ", key,
                                              " in the rendezvous store failed (is the prefix "
                                              "unique to this run?): ",
                                              e.what()));
    }
    return id;
  }
  std::vector<char> bytes;
  try {
    store->wait({key}, std::chrono::milliseconds(absl::ToInt64Milliseconds(options.timeout)));
    bytes = store->get(key);
  } catch (const std::exception& e) {
    return absl::DeadlineExceededError(
        absl::StrCat("rank ", options.rank, " did not get ", key, " from rank 0 within ",
                     absl::FormatDuration(options.timeout), ": ", e.what()));
  }
  if (bytes.size() != sizeof(id)) {
    return absl::DataLossError(
        absl::StrCat(key, " holds ", bytes.size(), " bytes, expected ", sizeof(id)));
  }
  std::memcpy(&id, bytes.data(), sizeof(id));
  return id;
}

// Events recycled between collectives: creating two per collective would cost more than
// queueing it.
class EventPool {
 public:
  explicit EventPool(int device) : device_(device) {}
  ~EventPool() {
    ScopedDevice scoped(device_);
    for (cudaEvent_t event : free_) cudaEventDestroy(event);
    cudaGetLastError();
  }
  absl::StatusOr<cudaEvent_t> Take() {
    {
      absl::MutexLock lock(&mu_);
      if (!free_.empty()) {
        cudaEvent_t event = free_.back();
        free_.pop_back();
        return event;
      }
    }
    cudaEvent_t event = nullptr;
    BALLAST_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    return event;
  }
  void Give(cudaEvent_t event) {
    absl::MutexLock lock(&mu_);
    free_.push_back(event);
  }

 private:
  const int device_;
  absl::Mutex mu_;
  std::vector<cudaEvent_t> free_ ABSL_GUARDED_BY(mu_);
};

// A queued collective as the watchdog sees it: `ready` after the compute before it,
// `done` after it.
class EventPair final : public internal::WatchedCollective {
 public:
  EventPair(EventPool* pool, cudaEvent_t ready, cudaEvent_t done)
      : pool_(pool), ready_(ready), done_(done) {}
  ~EventPair() override {
    pool_->Give(ready_);
    pool_->Give(done_);
  }
  // On the watchdog's thread, whose device is this one (thread_start).
  absl::StatusOr<State> Poll() override {
    const cudaError_t done = cudaEventQuery(done_);
    if (done == cudaSuccess) return State::kDone;
    if (done != cudaErrorNotReady) return BALLAST_CUDA_STATUS(done);
    const cudaError_t ready = cudaEventQuery(ready_);
    if (ready == cudaSuccess) return State::kRunning;
    if (ready != cudaErrorNotReady) return BALLAST_CUDA_STATUS(ready);
    return State::kWaitingForInputs;
  }

 private:
  EventPool* pool_;
  const cudaEvent_t ready_;
  const cudaEvent_t done_;
};

// One caller buffer of a collective, and what NCCL uses in its place.
struct StagedBuffer {
  void* caller = nullptr;
  size_t bytes = 0;
  bool copy_in = false;   // caller -> device before the operation
  bool copy_out = false;  // device -> caller after it
  void* device = nullptr;
  bool on_host = false;
  size_t offset = 0;  // in the staging scratch
};

class NcclCommunicator final : public Communicator {
 public:
  static absl::StatusOr<std::unique_ptr<Communicator>> Create(const CudaBackendOptions& options,
                                                              std::shared_ptr<StreamContext> ctx) {
    BALLAST_ASSIGN_OR_RETURN(ncclUniqueId id, ShareUniqueId(options));
    ScopedDevice scoped(ctx->device());
    BALLAST_RETURN_IF_ERROR(scoped.status());
    // Non-blocking: init and every enqueue return at once and their progress is read with
    // ncclCommGetAsyncError, which is what lets the waits here give up (and abort) after
    // the timeout. A blocking init waits for all peers with no bound.
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    const absl::Status init =
        BALLAST_NCCL_STATUS(ncclCommInitRankConfig(&comm, options.size, id, options.rank, &config));
    if (!init.ok()) {
      if (comm != nullptr) ncclCommAbort(comm);
      return init;
    }
    std::unique_ptr<NcclCommunicator> communicator(new NcclCommunicator(options, ctx, comm));
    BALLAST_RETURN_IF_ERROR(communicator->AwaitComm("ncclCommInitRankConfig"));
    return std::unique_ptr<Communicator>(std::move(communicator));
  }

  ~NcclCommunicator() override {
    ScopedDevice scoped(ctx_->device());
    absl::Status finalized = absl::FailedPreconditionError("aborted");
    {
      absl::MutexLock lock(&mu_);
      if (comm_ != nullptr) finalized = BALLAST_NCCL_STATUS(ncclCommFinalize(comm_));
    }
    {
      // Finalize flushes outstanding work and may wait on peers, so it gets the same bound
      // as a collective.
      if (finalized.ok() && AwaitComm("ncclCommFinalize").ok()) {
        absl::MutexLock lock(&mu_);
        if (comm_ != nullptr) ncclCommDestroy(comm_);
        comm_ = nullptr;
      }
    }
    watchdog_.reset();  // stops its thread before the communicator goes
    absl::MutexLock lock(&mu_);
    if (comm_ != nullptr) ncclCommAbort(comm_);
    comm_ = nullptr;
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  absl::Status AllReduceSum(float* data, size_t n) override {
    if (n == 0) return CheckUsable();
    if (data == nullptr) return absl::InvalidArgumentError("AllReduceSum: null data");
    StagedBuffer buffer{data, n * sizeof(float), true, true};
    return Run("ncclAllReduce(sum)", {&buffer, 1}, [&](ncclComm_t comm) {
      return BALLAST_NCCL_STATUS(
          ncclAllReduce(buffer.device, buffer.device, n, ncclFloat, ncclSum, comm, stream()));
    });
  }

  absl::Status AllReduceMin(int64_t* data, size_t n) override {
    if (n == 0) return CheckUsable();
    if (data == nullptr) return absl::InvalidArgumentError("AllReduceMin: null data");
    StagedBuffer buffer{data, n * sizeof(int64_t), true, true};
    return Run("ncclAllReduce(min)", {&buffer, 1}, [&](ncclComm_t comm) {
      return BALLAST_NCCL_STATUS(
          ncclAllReduce(buffer.device, buffer.device, n, ncclInt64, ncclMin, comm, stream()));
    });
  }

  absl::Status Broadcast(float* data, size_t n, int root) override {
    BALLAST_RETURN_IF_ERROR(CheckRoot("Broadcast", root));
    if (n == 0) return CheckUsable();
    if (data == nullptr) return absl::InvalidArgumentError("Broadcast: null data");
    StagedBuffer buffer{data, n * sizeof(float), rank_ == root, true};
    return Run("ncclBroadcast", {&buffer, 1}, [&](ncclComm_t comm) {
      return BALLAST_NCCL_STATUS(
          ncclBroadcast(buffer.device, buffer.device, n, ncclFloat, root, comm, stream()));
    });
  }

  absl::Status Reduce(float* data, size_t n, int root) override {
    BALLAST_RETURN_IF_ERROR(CheckRoot("Reduce", root));
    if (n == 0) return CheckUsable();
    if (data == nullptr) return absl::InvalidArgumentError("Reduce: null data");
    StagedBuffer buffer{data, n * sizeof(float), true, rank_ == root};
    return Run("ncclReduce", {&buffer, 1}, [&](ncclComm_t comm) {
      return BALLAST_NCCL_STATUS(
          ncclReduce(buffer.device, buffer.device, n, ncclFloat, ncclSum, root, comm, stream()));
    });
  }

  absl::Status AllGather(const float* in, size_t n, float* out) override {
    if (n == 0) return CheckUsable();
    if (in == nullptr || out == nullptr) {
      return absl::InvalidArgumentError("AllGather: null input or output");
    }
    StagedBuffer buffers[2] = {{const_cast<float*>(in), n * sizeof(float), true, false},
                               {out, n * static_cast<size_t>(size_) * sizeof(float), false, true}};
    return Run("ncclAllGather", buffers, [&](ncclComm_t comm) {
      return BALLAST_NCCL_STATUS(
          ncclAllGather(buffers[0].device, buffers[1].device, n, ncclFloat, comm, stream()));
    });
  }

  absl::Status Exchange(absl::Span<const PeerTransfer> sends,
                        absl::Span<const PeerTransfer> recvs) override {
    BALLAST_RETURN_IF_ERROR(CheckTransfers("send", sends));
    BALLAST_RETURN_IF_ERROR(CheckTransfers("receive", recvs));
    // Empty messages are skipped on both sides alike, so the pairwise order of the others
    // still matches.
    std::vector<StagedBuffer> buffers;
    std::vector<int> peers;
    size_t send_count = 0;
    for (const PeerTransfer& t : sends) {
      if (t.count == 0) continue;
      buffers.push_back({t.data, t.count * sizeof(float), true, false});
      peers.push_back(t.peer);
      ++send_count;
    }
    for (const PeerTransfer& t : recvs) {
      if (t.count == 0) continue;
      buffers.push_back({t.data, t.count * sizeof(float), false, true});
      peers.push_back(t.peer);
    }
    // Nothing to move: NCCL needs no call to stay in step (unlike Gloo's tags).
    if (buffers.empty()) return CheckUsable();
    return Run("ncclSend/ncclRecv group", absl::MakeSpan(buffers),
               [&](ncclComm_t comm) -> absl::Status {
                 BALLAST_NCCL_RETURN_IF_ERROR(ncclGroupStart());
                 absl::Status status;
                 for (size_t i = 0; i < buffers.size() && status.ok(); ++i) {
                   const size_t count = buffers[i].bytes / sizeof(float);
                   status = i < send_count
                                ? BALLAST_NCCL_STATUS(ncclSend(buffers[i].device, count, ncclFloat,
                                                               peers[i], comm, stream()))
                                : BALLAST_NCCL_STATUS(ncclRecv(buffers[i].device, count, ncclFloat,
                                                               peers[i], comm, stream()));
                 }
                 // Close the group even after a failed call inside it, so NCCL's per-thread
                 // group state does not leak into the next call.
                 const absl::Status ended = BALLAST_NCCL_STATUS(ncclGroupEnd());
                 return status.ok() ? ended : status;
               });
  }

 private:
  NcclCommunicator(const CudaBackendOptions& options, std::shared_ptr<StreamContext> ctx,
                   ncclComm_t comm)
      : rank_(options.rank),
        size_(options.size),
        // Capped so that now() + timeout cannot overflow for an infinite duration.
        timeout_(std::min(options.timeout, absl::Hours(24 * 365))),
        ctx_(ctx),
        comm_(comm),
        events_(ctx->device()),
        staging_(ctx) {
    watchdog_ = std::make_unique<internal::CollectiveWatchdog>(
        internal::CollectiveWatchdogOptions{
            .timeout = timeout_,
            .name = absl::StrCat("rank ", rank_, " of ", size_),
            // The thread's device, once: a thread that never chose one would otherwise
            // open a context on device 0 (hundreds of MB) at its first CUDA call.
            .thread_start = [device = ctx->device()] { cudaSetDevice(device); }},
        [this](const absl::Status& why) { AbortComm(why); }, [this] { return AsyncError(); });
  }

  cudaStream_t stream() const { return ctx_->stream(); }

  absl::Status CheckUsable() const {
    const absl::Status failure = watchdog_->failure();
    if (failure.ok()) return absl::OkStatus();
    return absl::Status(failure.code(),
                        absl::StrCat("NCCL communicator was aborted earlier: ", failure.message()));
  }

  absl::Status CheckRoot(const char* op, int root) const {
    if (root < 0 || root >= size_) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": root ", root, " outside group of size ", size_));
    }
    return absl::OkStatus();
  }

  absl::Status CheckTransfers(const char* what, absl::Span<const PeerTransfer> transfers) const {
    for (const PeerTransfer& t : transfers) {
      if (t.peer < 0 || t.peer >= size_) {
        return absl::InvalidArgumentError(
            absl::StrCat("Exchange: ", what, " peer ", t.peer, " outside group of size ", size_));
      }
      if (t.count > 0 && t.data == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("Exchange: ", what, " with peer ", t.peer, " has null data"));
      }
    }
    return absl::OkStatus();
  }

  // Validation failures above leave the communicator intact. Anything that goes wrong from
  // here on aborts it: this rank has then skipped or broken a collective that its peers
  // are in, so the group is out of step for good.
  template <typename Enqueue>
  absl::Status Run(const char* what, absl::Span<StagedBuffer> buffers, Enqueue&& enqueue) {
    BALLAST_RETURN_IF_ERROR(CheckUsable());
    if (absl::Status failed = ctx_->compute_failure()->Take(); !failed.ok()) {
      return Fail(absl::Status(failed.code(), absl::StrCat(what,
                                                           " not run: a compute call "
                                                           "before it failed: ",
                                                           failed.message())));
    }
    ScopedDevice scoped(ctx_->device());
    if (!scoped.status().ok()) return Fail(scoped.status());
    absl::Status status = Classify(buffers);
    if (!status.ok()) return Fail(std::move(status));
    if (size_ == 1) {
      status = OneRank(buffers);
      return status.ok() ? status : Fail(std::move(status));
    }
    absl::StatusOr<cudaEvent_t> ready = events_.Take();
    if (!ready.ok()) return Fail(ready.status());
    absl::StatusOr<cudaEvent_t> done = events_.Take();
    if (!done.ok()) {
      events_.Give(*ready);
      return Fail(done.status());
    }
    // Owns both events from here on, also on the error paths.
    auto watched = std::make_unique<EventPair>(&events_, *ready, *done);
    // `ready` marks where the compute queued before this collective ends: the timeout runs
    // from there, so a long forward pass ahead of it is not mistaken for a missing peer.
    status = BALLAST_CUDA_STATUS(cudaEventRecord(*ready, stream()));
    if (status.ok()) status = StageIn(buffers);
    if (status.ok()) {
      // Not under mu_: a launch can block (a full launch queue behind a hung collective),
      // and the watchdog's abort must still get through (AbortComm).
      ncclComm_t comm = Comm();
      status = comm == nullptr ? CheckUsable() : enqueue(comm);
    }
    // A non-blocking communicator may answer ncclInProgress before the collective is on
    // the stream (connections are made lazily, at an algorithm's first use): the events
    // and copies after it must wait until it is, and NCCL takes no other call meanwhile.
    if (status.ok()) status = AwaitComm(what);
    bool fill_host = false;
    if (status.ok()) status = StageOut(buffers, &fill_host);
    if (status.ok()) status = BALLAST_CUDA_STATUS(cudaEventRecord(*done, stream()));
    if (!status.ok()) return Fail(std::move(status));
    watchdog_->Watch(what, std::move(watched));
    // A host buffer (the plan agreement's) is the only reason to wait here.
    return fill_host ? WaitFor(*done, what) : absl::OkStatus();
  }

  // Sets where each buffer lives, asking CUDA once per buffer: device memory (this
  // device's, or managed) is handed to NCCL as is, host memory goes through the staging
  // scratch.
  absl::Status Classify(absl::Span<StagedBuffer> buffers) const {
    for (StagedBuffer& b : buffers) {
      BALLAST_ASSIGN_OR_RETURN(const bool on_device, ctx_->IsDeviceMemory(b.caller));
      b.on_host = !on_device;
      b.device = on_device ? b.caller : nullptr;
    }
    return absl::OkStatus();
  }

  // One rank: every collective is the identity, so nothing is queued and nothing waits
  // (the plan agreement at the start of every step of a one-rank group is such a call).
  // AllGather's one slot is a copy of its input, queued on the stream like any compute.
  absl::Status OneRank(absl::Span<StagedBuffer> buffers) {
    if (buffers.size() == 2 && buffers[0].copy_in && !buffers[0].copy_out && buffers[1].copy_out &&
        !buffers[1].copy_in) {
      const size_t bytes = std::min(buffers[0].bytes, buffers[1].bytes);
      if (buffers[0].on_host && buffers[1].on_host) {
        std::memmove(buffers[1].caller, buffers[0].caller, bytes);
        return absl::OkStatus();
      }
      BALLAST_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(buffers[1].caller, buffers[0].caller, bytes,
                                                   cudaMemcpyDefault, stream()));
      // A host output must hold the result when the call returns.
      if (buffers[1].on_host) return ctx_->WaitForStream("AllGather", 4 * ToChrono(timeout_));
    }
    return absl::OkStatus();
  }

  static std::chrono::nanoseconds ToChrono(absl::Duration d) {
    return absl::ToChronoNanoseconds(d);
  }

  // Host buffers go through the staging scratch: copied in (if needed) before the
  // operation. The scratch is reused by the next collective after this one on the stream.
  absl::Status StageIn(absl::Span<StagedBuffer> buffers) {
    // 256-byte slots, the alignment cudaMalloc gives and NCCL's kernels like.
    constexpr size_t kAlign = 256;
    size_t total = 0;
    for (StagedBuffer& b : buffers) {
      if (!b.on_host) continue;
      b.offset = total;
      total += (b.bytes + kAlign - 1) / kAlign * kAlign;
    }
    if (total == 0) return absl::OkStatus();
    BALLAST_ASSIGN_OR_RETURN(char* base, staging_.Reserve(total));
    for (StagedBuffer& b : buffers) {
      if (!b.on_host) continue;
      b.device = base + b.offset;
      if (b.copy_in) {
        BALLAST_CUDA_RETURN_IF_ERROR(
            cudaMemcpyAsync(b.device, b.caller, b.bytes, cudaMemcpyHostToDevice, stream()));
      }
    }
    return absl::OkStatus();
  }

  // Queues the copies back into host buffers. `*on_host`: whether any buffer is host
  // memory, which the caller may reuse once the call returns (a pinned one would still be
  // read or written by a queued copy), so the call waits for its collective.
  absl::Status StageOut(absl::Span<StagedBuffer> buffers, bool* on_host) {
    for (const StagedBuffer& b : buffers) {
      if (!b.on_host) continue;
      *on_host = true;
      if (!b.copy_out) continue;
      BALLAST_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(b.caller, b.device, b.bytes, cudaMemcpyDeviceToHost, stream()));
    }
    return absl::OkStatus();
  }

  // Waits for `done` (a collective whose result lands in host memory), giving up when the
  // watchdog fails the communicator: its abort ends the collective on the device.
  absl::Status WaitFor(cudaEvent_t done, const char* what) {
    for (int polls = 0;; ++polls) {
      const cudaError_t query = cudaEventQuery(done);
      if (query == cudaSuccess) return CheckUsable();
      if (query != cudaErrorNotReady) {
        const absl::Status status = BALLAST_CUDA_STATUS(query);
        return Fail(absl::Status(status.code(),
                                 absl::StrCat("waiting for ", what, ": ", status.message())));
      }
      BALLAST_RETURN_IF_ERROR(CheckUsable());
      PollPause(polls);
    }
  }

  // Waits until the communicator has finished an init or a finalize (no stream work),
  // polling its async error so the wait ends at the timeout.
  absl::Status AwaitComm(const char* what) {
    const auto deadline = std::chrono::steady_clock::now() + ToChrono(timeout_);
    for (int polls = 0;; ++polls) {
      ncclResult_t state = ncclSuccess;
      absl::Status status;
      {
        absl::MutexLock lock(&mu_);
        if (comm_ == nullptr) return CheckUsable();
        status = BALLAST_NCCL_STATUS(ncclCommGetAsyncError(comm_, &state));
      }
      if (status.ok() && state == ncclSuccess) return absl::OkStatus();
      if (status.ok() && state != ncclInProgress) {
        status = absl::Status(NcclErrorCode(state),
                              absl::StrCat(what, " failed on rank ", rank_, " of ", size_, ": ",
                                           ncclGetErrorString(state)));
      }
      if (!status.ok()) return Fail(std::move(status));
      if (std::chrono::steady_clock::now() >= deadline) {
        return Fail(absl::DeadlineExceededError(
            absl::StrCat(what, " on rank ", rank_, " of ", size_, " did not complete within ",
                         absl::FormatDuration(timeout_),
                         " (a peer is missing or stalled); communicator aborted")));
      }
      PollPause(polls);
    }
  }

  // The watchdog's probe for failures not tied to one collective.
  absl::Status AsyncError() {
    absl::MutexLock lock(&mu_);
    if (comm_ == nullptr) return absl::OkStatus();
    ncclResult_t state = ncclSuccess;
    BALLAST_RETURN_IF_ERROR(BALLAST_NCCL_STATUS(ncclCommGetAsyncError(comm_, &state)));
    if (state == ncclSuccess || state == ncclInProgress) return absl::OkStatus();
    return absl::Status(NcclErrorCode(state),
                        absl::StrCat(ncclGetErrorString(state),
                                     " (last NCCL error: ", ncclGetLastError(comm_), ")"));
  }

  // Records `cause` as the failure and aborts (once); returns the failure held.
  absl::Status Fail(absl::Status cause) { return watchdog_->Fail(std::move(cause)); }

  // The watchdog's abort: ends every collective still queued on the device (so a host wait
  // on the stream returns) and leaves the communicator unusable.
  // Runs on the watchdog's thread, or on the calling thread when it found the failure.
  // The pointer goes under mu_; the abort itself runs outside it, so an enqueue stuck in a
  // launch cannot hold it off (as ProcessGroupNCCL's watchdog, it may then abort under a
  // call in flight, which the abort is meant to end). The stream's context learns of it,
  // so Compute::Synchronize (the step's end) reports it too.
  void AbortComm(const absl::Status& why) {
    ncclComm_t comm = nullptr;
    {
      absl::MutexLock lock(&mu_);
      comm = std::exchange(comm_, nullptr);
    }
    if (comm == nullptr) return;
    BALLAST_LOG(ERROR) << "cuda backend: rank " << rank_ << " of " << size_
                       << ": aborting NCCL communicator: " << why.message();
    ctx_->SetCommunicatorFailure(why);
    ncclCommAbort(comm);
  }

  ncclComm_t Comm() {
    absl::MutexLock lock(&mu_);
    return comm_;
  }

  const int rank_;
  const int size_;
  const absl::Duration timeout_;
  std::shared_ptr<StreamContext> ctx_;
  // Guards the comm_ pointer between the calling thread and the watchdog's (abort, probe).
  absl::Mutex mu_;
  ncclComm_t comm_ ABSL_GUARDED_BY(mu_);
  EventPool events_;  // before the watchdog, whose entries give their events back to it
  DeviceScratch staging_;
  std::unique_ptr<internal::CollectiveWatchdog> watchdog_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(
    const CudaBackendOptions& options, std::shared_ptr<StreamContext> ctx) {
  return NcclCommunicator::Create(options, std::move(ctx));
}

}  // namespace ballast::cuda_internal
