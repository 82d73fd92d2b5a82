#include "common/clock.h"

#include <chrono>

#include "absl/time/clock.h"

namespace ballast {
namespace {

class SystemClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
  absl::Duration Monotonic() const override {
    return absl::FromChrono(std::chrono::steady_clock::now().time_since_epoch());
  }
};

}  // namespace

Clock* RealClock() {
  static SystemClock* clock = new SystemClock();
  return clock;
}

}  // namespace ballast
