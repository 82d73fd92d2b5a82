// A Clock for tests: time stands still until the test moves it, so a test can cross a
// timeout or a staleness limit exactly, without sleeping.
//
//   ballast::testing::FakeClock clock;
//   auto model = SpeedModel::Create({}, &clock);
//   clock.Advance(absl::Seconds(11));  // everything not reported since is now stale
//
// Thread-safe: the code under test may read it from its own threads while the test
// advances it.
#ifndef BALLAST_TESTS_TESTING_FAKE_CLOCK_H_
#define BALLAST_TESTS_TESTING_FAKE_CLOCK_H_

#include <cstdio>
#include <cstdlib>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace ballast::testing {

class FakeClock final : public Clock {
 public:
  // A fixed, recognisable start (2023-11-14 22:13:20 UTC) rather than the epoch, so that
  // code subtracting durations from Now() never meets negative times by accident.
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'700'000'000))
      : now_(start), monotonic_(absl::Hours(1)) {}

  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  absl::Duration Monotonic() const override {
    absl::MutexLock lock(&mu_);
    return monotonic_;
  }

  // Moves both readings forward by `d`. A monotonic clock never goes back, so a negative
  // `d` is a bug in the test: it aborts rather than let the test pass on a broken clock.
  void Advance(absl::Duration d) {
    if (d < absl::ZeroDuration()) {
      std::fprintf(stderr, "FakeClock::Advance(%s): negative\n", absl::FormatDuration(d).c_str());
      std::abort();
    }
    absl::MutexLock lock(&mu_);
    now_ += d;
    monotonic_ += d;
  }

  // Steps the wall clock only (as NTP may), leaving the monotonic reading alone.
  void SetNow(absl::Time t) {
    absl::MutexLock lock(&mu_);
    now_ = t;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
  absl::Duration monotonic_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ballast::testing

#endif  // BALLAST_TESTS_TESTING_FAKE_CLOCK_H_
