// An injectable source of time. Production code takes a `Clock*`; tests pass a
// `FakeClock` (tests/testing/fake_clock.h) and drive it, so no test sleeps to wait.
#ifndef BALLAST_COMMON_CLOCK_H_
#define BALLAST_COMMON_CLOCK_H_

#include "absl/time/time.h"

namespace ballast {

class Clock {
 public:
  virtual ~Clock() = default;
  // Wall-clock time, for timestamps shown to operators.
  virtual absl::Time Now() const = 0;
  // A monotonic reading (arbitrary epoch) for measuring intervals; never goes back.
  virtual absl::Duration Monotonic() const = 0;
};

// The process-wide real clock (absl::Now, std::chrono::steady_clock).
Clock* RealClock();

}  // namespace ballast

#endif  // BALLAST_COMMON_CLOCK_H_
