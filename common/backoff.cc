#include "common/backoff.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace ballast {
namespace {

// How often a wait on a clock other than the real one looks at it again (real time).
constexpr absl::Duration kForeignClockPoll = absl::Milliseconds(1);

uint64_t SeedOrRandom(uint64_t seed) { return seed != 0 ? seed : std::random_device{}(); }

}  // namespace

absl::Status ValidateBackoffOptions(const BackoffOptions& options) {
  if (options.initial <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("initial backoff ", absl::FormatDuration(options.initial), " must be > 0"));
  }
  if (options.max < options.initial) {
    return absl::InvalidArgumentError(
        absl::StrCat("max backoff ", absl::FormatDuration(options.max),
                     " must be >= the initial backoff ", absl::FormatDuration(options.initial)));
  }
  if (!(options.multiplier >= 1.0)) {  // also refuses NaN
    return absl::InvalidArgumentError(
        absl::StrCat("backoff multiplier ", options.multiplier, " must be >= 1"));
  }
  return absl::OkStatus();
}

Backoff::Backoff(const BackoffOptions& options, Clock* clock)
    : options_(options),
      clock_(clock != nullptr ? clock : RealClock()),
      rng_(SeedOrRandom(options.seed)) {
  options_.initial = std::max(options_.initial, absl::Nanoseconds(1));
  options_.max = std::max(options_.max, options_.initial);
  if (!(options_.multiplier >= 1.0)) options_.multiplier = 1.0;
  base_ = options_.initial;
}

absl::Duration Backoff::NextDelay() {
  if (attempts_ == 0) outage_start_ = clock_->Monotonic();
  ++attempts_;
  const absl::Duration base = base_;
  // Saturates at max: once there, multiplying again could only overflow.
  base_ =
      base_ >= options_.max ? options_.max : std::min(base_ * options_.multiplier, options_.max);
  switch (options_.jitter) {
    case Jitter::kNone:
      return base;
    case Jitter::kFull:
      return base * std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
    case Jitter::kEqual:
      return base / 2 + (base / 2) * std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
  }
  return base;
}

void Backoff::Reset() {
  base_ = options_.initial;
  attempts_ = 0;
}

absl::Duration Backoff::outage() const {
  return attempts_ == 0 ? absl::ZeroDuration() : clock_->Monotonic() - outage_start_;
}

bool Backoff::ShouldLogAttempt() const {
  return attempts_ > 0 && ((attempts_ & (attempts_ - 1)) == 0 || attempts_ % 64 == 0);
}

bool WaitUnlessStopped(Clock* clock, absl::Duration delay, absl::Mutex& mu, const bool& stop) {
  if (clock == nullptr) clock = RealClock();
  const bool real = clock == RealClock();
  const absl::Duration deadline = clock->Monotonic() + delay;
  while (!stop) {
    const absl::Duration left = deadline - clock->Monotonic();
    if (left <= absl::ZeroDuration()) return true;
    mu.AwaitWithTimeout(absl::Condition(&stop), real ? left : std::min(left, kForeignClockPoll));
  }
  return false;
}

}  // namespace ballast
