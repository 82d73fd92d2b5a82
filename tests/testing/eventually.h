// Waiting in tests for something another thread does, on real time: polls `done` every
// millisecond until it holds or `timeout` passes (scaled under slow tools, timeouts.h).
// For a thread whose own waits run on a FakeClock, the test moves the clock and polls
// for the thread to have reacted; nothing here sleeps for a fixed time.
#ifndef BALLAST_TESTS_TESTING_EVENTUALLY_H_
#define BALLAST_TESTS_TESTING_EVENTUALLY_H_

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "testing/timeouts.h"

namespace ballast::testing {

// True once `done()` holds; false if it still does not after `timeout`.
template <typename F>
bool Eventually(F done, absl::Duration timeout = absl::Seconds(20)) {
  const absl::Time deadline = absl::Now() + ScaledTimeout(timeout);
  while (absl::Now() < deadline) {
    if (done()) return true;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return done();
}

}  // namespace ballast::testing

#endif  // BALLAST_TESTS_TESTING_EVENTUALLY_H_
