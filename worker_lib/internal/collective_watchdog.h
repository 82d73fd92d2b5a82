// CollectiveWatchdog: watches collectives that run asynchronously (queued on a CUDA stream)
// so that no host thread has to wait for each one, and still no lost peer can hang a rank.
// PyTorch's ProcessGroupNCCL is the model: every collective is queued with an event after
// it; a thread of its own polls the events; past the timeout it aborts the communicator
// (which ends the collectives still queued on the device) and remembers why, so the next
// call on this rank fails naming the collective that did not complete.
//
// The timeout runs from when a collective's inputs are ready on this rank (the compute
// queued before it has run), not from the call: this rank's own slow forward pass is not
// a missing peer (a peer slower than the timeout is one). Inputs that never become ready
// (a kernel that never ends) fail it after `input_timeouts` timeouts, counted from when it
// became the oldest unfinished collective.
//
//   CollectiveWatchdog watchdog({.timeout = absl::Seconds(60), .name = "rank 1 of 2"},
//                               [&](const absl::Status& why) { ncclCommAbort(comm); });
//   watchdog.Watch("ncclAllReduce(sum)", std::make_unique<EventPair>(ready, done));
//   ...
//   BALLAST_RETURN_IF_ERROR(watchdog.failure());  // before every later call
//
// Plain C++ over the WatchedCollective interface, so it is tested with fakes on any
// machine (tests/worker_lib/collective_watchdog_test.cc).
#ifndef BALLAST_WORKER_LIB_INTERNAL_COLLECTIVE_WATCHDOG_H_
#define BALLAST_WORKER_LIB_INTERNAL_COLLECTIVE_WATCHDOG_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace ballast {
class Clock;
}  // namespace ballast

namespace ballast::internal {

// One collective in flight, as the watchdog sees it. Polled from the watchdog's thread.
class WatchedCollective {
 public:
  enum class State {
    kWaitingForInputs,  // the compute queued before it has not finished
    kRunning,           // its inputs are ready; it is moving data (or waiting for peers)
    kDone,
  };
  virtual ~WatchedCollective() = default;
  // Where it stands; an error when it (or the compute before it) failed.
  virtual absl::StatusOr<State> Poll() = 0;
};

struct CollectiveWatchdogOptions {
  // A collective still running this long after its inputs were ready has failed.
  absl::Duration timeout = absl::Seconds(60);
  // Inputs not ready after this many timeouts: the compute before it is stuck.
  int input_timeouts = 4;
  // How often the thread polls. A collective of a TP step takes tens of microseconds, so
  // this bounds how late a failure is noticed, not how fast work completes.
  absl::Duration poll_interval = absl::Milliseconds(2);
  // Who the watchdog watches for, in its messages ("rank 1 of 2").
  std::string name;
  // For deadlines; null: the real clock. Not owned.
  const Clock* clock = nullptr;
  // False: no thread; the owner (a test) calls PollOnce.
  bool start_thread = true;
  // Runs first on the thread (e.g. to set its CUDA device). Optional.
  std::function<void()> thread_start;
};

class CollectiveWatchdog {
 public:
  // `abort` runs once, at the first failure, on the thread that found it and without the
  // watchdog's lock: it must make everything still queued end (e.g. ncclCommAbort).
  // `async_error`, if set, is asked at every poll while collectives are in flight for a
  // failure not tied to one of them (e.g. ncclCommGetAsyncError).
  CollectiveWatchdog(CollectiveWatchdogOptions options,
                     std::function<void(const absl::Status&)> abort,
                     std::function<absl::Status()> async_error = nullptr);
  // Stops the thread. Does not abort: the owner decides what happens to work in flight.
  ~CollectiveWatchdog();
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  // Watches `work`, named `what` in messages, from now on. Collectives complete in the
  // order they are watched (one stream), so only the oldest unfinished one is timed.
  void Watch(std::string what, std::unique_ptr<WatchedCollective> work);
  // The first failure, for good: OK until one.
  absl::Status failure() const;
  // Collectives watched and not yet seen done.
  size_t in_flight() const;
  // Records `cause` as the failure (if none yet) and aborts; returns the failure held.
  // For failures the owner finds itself (an enqueue that failed).
  absl::Status Fail(absl::Status cause);
  // One pass: drops finished collectives, times the oldest unfinished one, fails on an
  // error or a deadline. The thread calls it every poll_interval.
  void PollOnce();

 private:
  struct Entry {
    std::string what;
    std::unique_ptr<WatchedCollective> work;
    // Timed from when it became the oldest unfinished one: a step's collectives are
    // queued well ahead of their turn, and the time earlier ones take is theirs.
    bool timed = false;
    bool running = false;
    absl::Duration deadline;  // on the clock's monotonic reading
  };
  absl::Duration Now() const;
  void Loop();

  const CollectiveWatchdogOptions options_;
  const std::function<void(const absl::Status&)> abort_;
  const std::function<absl::Status()> async_error_;

  mutable absl::Mutex mu_;
  std::deque<Entry> in_flight_ ABSL_GUARDED_BY(mu_);
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // Serializes PollOnce passes (the thread's and a test's), outside mu_ so that Watch
  // never waits for a poll of the device.
  absl::Mutex poll_mu_;
  std::thread thread_;
};

}  // namespace ballast::internal

#endif  // BALLAST_WORKER_LIB_INTERNAL_COLLECTIVE_WATCHDOG_H_
