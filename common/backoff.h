// Backoff: the one retry schedule of every reconnecting client (the agent's stream to the
// coordinator, a worker's stream to its agent), on the injectable clock.
//
// The rule both loops follow: a failed attempt asks NextDelay() for the wait before the
// next one; the backoff is Reset() only once a session is established, meaning the peer
// answered the hello, never when a stream is merely created. A stream can be created, and
// even accept the hello into gRPC's buffers, with nothing at the other end; resetting there
// kept the delay at its initial value for a whole partition (issue 38: 20-40 attempts a
// second). Attempts also drive the logs: ShouldLogAttempt() keeps an outage to a few lines.
//
//   Backoff backoff({.initial = absl::Milliseconds(100), .max = absl::Seconds(10)}, clock);
//   for (;;) {
//     TryOnce();  // calls backoff.Reset() when the peer answers the hello
//     absl::MutexLock lock(&mu_);
//     if (!WaitUnlessStopped(clock, backoff.NextDelay(), mu_, stopping_)) return;
//   }
//
// Not thread-safe: one loop owns it (guard it with the loop's mutex if others read it).
#ifndef BALLAST_COMMON_BACKOFF_H_
#define BALLAST_COMMON_BACKOFF_H_

#include <cstdint>
#include <random>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace ballast {

enum class Jitter {
  kNone,  // exactly the exponential base (tests)
  kFull,  // uniform in [0, base]: widest spread, but a retry may come at once
  // Uniform in [base/2, base]: clients that lost the same peer do not retry in lockstep,
  // and the spacing still grows with every attempt (so the attempts and the log lines of
  // an outage stay few). The default.
  kEqual,
};

struct BackoffOptions {
  absl::Duration initial = absl::Milliseconds(100);
  absl::Duration max = absl::Seconds(10);
  double multiplier = 2.0;
  Jitter jitter = Jitter::kEqual;
  // Seeds the jitter; 0 draws a seed from std::random_device. Tests fix it.
  uint64_t seed = 0;
};

// OK when 0 < initial <= max and multiplier >= 1; else INVALID_ARGUMENT naming the field.
absl::Status ValidateBackoffOptions(const BackoffOptions& options);

class Backoff {
 public:
  // `options` must be valid (ValidateBackoffOptions; callers check flags at their edge);
  // out-of-range values are clamped rather than trusted. `clock` (not owned) times the
  // outage; null means RealClock().
  explicit Backoff(const BackoffOptions& options, Clock* clock = nullptr);

  // The wait before the next attempt, after a failed one: min(initial * multiplier^n, max)
  // jittered, n being the failures since the last Reset(). The first call after a Reset()
  // also marks the start of an outage.
  absl::Duration NextDelay();
  // A session was established: the next failure starts again from `initial`.
  void Reset();

  // Failed attempts (NextDelay calls) since the last Reset(); 0 outside an outage.
  int64_t attempts() const { return attempts_; }
  // Time since the first failure after the last Reset() (zero outside an outage).
  absl::Duration outage() const;
  // Whether the attempt just counted deserves a log line: the 1st, 2nd, 4th, 8th... and
  // then every 64th, so an outage of an hour at a 10 s cap logs ~15 lines, not 360.
  bool ShouldLogAttempt() const;

  const BackoffOptions& options() const { return options_; }

 private:
  BackoffOptions options_;
  Clock* const clock_;
  std::mt19937_64 rng_;
  absl::Duration base_;  // the un-jittered delay the next NextDelay() jitters
  int64_t attempts_ = 0;
  absl::Duration outage_start_;  // clock_->Monotonic() at the first failure
};

// Waits `delay` as measured by `clock`, or until `stop` becomes true; `mu` is held on entry
// and on return, and released while waiting so that whoever sets `stop` (under `mu`) wakes
// the wait at once. Returns false when stopped. With RealClock() it is one timed wait on
// `mu`; with any other clock time can jump when a test moves it, so the wait rechecks that
// clock every millisecond of real time: tests drive it with FakeClock::Advance, no sleeps.
bool WaitUnlessStopped(Clock* clock, absl::Duration delay, absl::Mutex& mu, const bool& stop)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

}  // namespace ballast

#endif  // BALLAST_COMMON_BACKOFF_H_
