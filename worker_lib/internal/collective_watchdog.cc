#include "internal/collective_watchdog.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/clock.h"

namespace ballast::internal {

CollectiveWatchdog::CollectiveWatchdog(CollectiveWatchdogOptions options,
                                       std::function<void(const absl::Status&)> abort,
                                       std::function<absl::Status()> async_error)
    : options_(std::move(options)), abort_(std::move(abort)), async_error_(std::move(async_error)) {
  if (options_.start_thread) thread_ = std::thread([this] { Loop(); });
}

CollectiveWatchdog::~CollectiveWatchdog() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

absl::Duration CollectiveWatchdog::Now() const {
  return (options_.clock != nullptr ? options_.clock : RealClock())->Monotonic();
}

void CollectiveWatchdog::Watch(std::string what, std::unique_ptr<WatchedCollective> work) {
  Entry entry{.what = std::move(what), .work = std::move(work)};
  absl::MutexLock lock(&mu_);
  in_flight_.push_back(std::move(entry));
}

absl::Status CollectiveWatchdog::failure() const {
  absl::MutexLock lock(&mu_);
  return failure_;
}

size_t CollectiveWatchdog::in_flight() const {
  absl::MutexLock lock(&mu_);
  return in_flight_.size();
}

absl::Status CollectiveWatchdog::Fail(absl::Status cause) {
  absl::Status failure;
  {
    absl::MutexLock lock(&mu_);
    if (failure_.ok()) failure_ = std::move(cause);
    if (aborted_) return failure_;
    aborted_ = true;
    failure = failure_;
  }
  // Outside the lock: the abort may take the owner's locks and wait on the device.
  abort_(failure);
  return failure;
}

void CollectiveWatchdog::PollOnce() {
  absl::MutexLock poll(&poll_mu_);
  for (;;) {
    Entry* head = nullptr;
    {
      absl::MutexLock lock(&mu_);
      if (!failure_.ok() || in_flight_.empty()) return;
      // Stable without the lock: Watch only appends (a deque keeps references), and only
      // this pass, under poll_mu_, removes or changes entries.
      head = &in_flight_.front();
    }
    const absl::StatusOr<WatchedCollective::State> state = head->work->Poll();
    const absl::Duration now = Now();
    if (!head->timed) {
      head->timed = true;
      head->deadline = now + options_.input_timeouts * options_.timeout;
    }
    if (!state.ok()) {
      Fail(absl::Status(state.status().code(),
                        absl::StrCat(head->what, " failed on ", options_.name, ": ",
                                     state.status().message(), "; communicator aborted")))
          .IgnoreError();  // kept as failure()
      return;
    }
    if (*state == WatchedCollective::State::kDone) {
      absl::MutexLock lock(&mu_);
      in_flight_.pop_front();
      continue;
    }
    if (*state == WatchedCollective::State::kRunning && !head->running) {
      head->running = true;
      head->deadline = now + options_.timeout;
    }
    if (now >= head->deadline) {
      const std::string limit = absl::FormatDuration(options_.timeout);
      Fail(
          absl::DeadlineExceededError(
              head->running
                  ? absl::StrCat(head->what, " on ", options_.name, " did not complete within ",
                                 limit, " (a peer is missing or stalled); communicator aborted")
                  : absl::StrCat("the compute queued before ", head->what, " on ", options_.name,
                                 " did not complete within ", options_.input_timeouts, " x ", limit,
                                 "; communicator aborted")))
          .IgnoreError();  // kept as failure()
      return;
    }
    break;
  }
  if (async_error_ != nullptr) {
    if (absl::Status status = async_error_(); !status.ok()) {
      Fail(absl::Status(status.code(), absl::StrCat("on ", options_.name, ": ", status.message(),
                                                    "; communicator aborted")))
          .IgnoreError();  // kept as failure()
    }
  }
}

void CollectiveWatchdog::Loop() {
  if (options_.thread_start) options_.thread_start();
  mu_.Lock();
  while (!stop_) {
    mu_.AwaitWithTimeout(absl::Condition(&stop_), options_.poll_interval);
    if (stop_) break;
    mu_.Unlock();
    PollOnce();
    mu_.Lock();
  }
  mu_.Unlock();
}

}  // namespace ballast::internal
