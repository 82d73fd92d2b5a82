// The one retry schedule (common/backoff.h): delays grow to the cap, jitter stays in its
// bounds, Reset starts over, and the wait follows the injected clock, so none of this
// sleeps.
#include "common/backoff.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "testing/eventually.h"
#include "testing/fake_clock.h"

namespace ballast {
namespace {

using ::ballast::testing::Eventually;

using ::testing::HasSubstr;

constexpr absl::Duration kInitial = absl::Milliseconds(100);
constexpr absl::Duration kMax = absl::Seconds(10);

TEST(BackoffTest, WithoutJitterDelaysDoubleUpToTheCap) {
  testing::FakeClock clock;
  Backoff backoff({.initial = kInitial, .max = kMax, .jitter = Jitter::kNone}, &clock);
  std::vector<absl::Duration> delays;
  for (int i = 0; i < 10; ++i) delays.push_back(backoff.NextDelay());
  EXPECT_THAT(delays, ::testing::ElementsAre(absl::Milliseconds(100), absl::Milliseconds(200),
                                             absl::Milliseconds(400), absl::Milliseconds(800),
                                             absl::Milliseconds(1600), absl::Milliseconds(3200),
                                             absl::Milliseconds(6400), kMax, kMax, kMax));
  EXPECT_EQ(backoff.attempts(), 10);
}

TEST(BackoffTest, EqualJitterStaysBetweenHalfAndAllOfTheBase) {
  testing::FakeClock clock;
  Backoff backoff({.initial = kInitial, .max = kMax, .jitter = Jitter::kEqual, .seed = 42}, &clock);
  absl::Duration base = kInitial;
  absl::Duration lowest_fraction_seen = kMax;
  for (int i = 0; i < 200; ++i) {
    const absl::Duration d = backoff.NextDelay();
    EXPECT_GE(d, base / 2) << "attempt " << i;
    EXPECT_LE(d, base) << "attempt " << i;
    lowest_fraction_seen = std::min(lowest_fraction_seen, d - base / 2);
    base = std::min(base * 2, kMax);
  }
  // Jittered, not constant: over 190 attempts at the cap the spread is used.
  EXPECT_LT(lowest_fraction_seen, kMax / 10);
}

TEST(BackoffTest, FullJitterStaysWithinTheBase) {
  testing::FakeClock clock;
  Backoff backoff({.initial = kInitial, .max = kMax, .jitter = Jitter::kFull, .seed = 7}, &clock);
  absl::Duration base = kInitial;
  for (int i = 0; i < 100; ++i) {
    const absl::Duration d = backoff.NextDelay();
    EXPECT_GE(d, absl::ZeroDuration());
    EXPECT_LE(d, base);
    base = std::min(base * 2, kMax);
  }
}

TEST(BackoffTest, TheSameSeedGivesTheSameDelays) {
  Backoff a({.seed = 3}), b({.seed = 3});
  for (int i = 0; i < 20; ++i) EXPECT_EQ(a.NextDelay(), b.NextDelay());
}

TEST(BackoffTest, ResetStartsOverAndEndsTheOutage) {
  testing::FakeClock clock;
  Backoff backoff({.initial = kInitial, .max = kMax, .jitter = Jitter::kNone}, &clock);
  EXPECT_EQ(backoff.outage(), absl::ZeroDuration());
  for (int i = 0; i < 5; ++i) {
    clock.Advance(backoff.NextDelay());
  }
  EXPECT_EQ(backoff.attempts(), 5);
  EXPECT_EQ(backoff.outage(), absl::Milliseconds(100 + 200 + 400 + 800 + 1600));
  backoff.Reset();
  EXPECT_EQ(backoff.attempts(), 0);
  EXPECT_EQ(backoff.outage(), absl::ZeroDuration());
  EXPECT_EQ(backoff.NextDelay(), kInitial);
  clock.Advance(absl::Seconds(1));
  EXPECT_EQ(backoff.outage(), absl::Seconds(1));  // measured from the first failure
}

TEST(BackoffTest, LogsAttemptsOneTwoFourEightThenEverySixtyFourth) {
  Backoff backoff({});
  std::vector<int64_t> logged;
  for (int i = 0; i < 200; ++i) {
    backoff.NextDelay();
    if (backoff.ShouldLogAttempt()) logged.push_back(backoff.attempts());
  }
  EXPECT_THAT(logged, ::testing::ElementsAre(1, 2, 4, 8, 16, 32, 64, 128, 192));
}

TEST(BackoffTest, ValidateNamesTheBadField) {
  EXPECT_TRUE(ValidateBackoffOptions({}).ok());
  EXPECT_THAT(std::string(ValidateBackoffOptions({.initial = absl::ZeroDuration()}).message()),
              HasSubstr("initial backoff"));
  EXPECT_THAT(
      std::string(
          ValidateBackoffOptions({.initial = absl::Seconds(2), .max = absl::Seconds(1)}).message()),
      HasSubstr("max backoff"));
  EXPECT_THAT(std::string(ValidateBackoffOptions({.multiplier = 0.5}).message()),
              HasSubstr("multiplier"));
}

TEST(BackoffTest, InvalidOptionsAreClampedNotTrusted) {
  Backoff backoff({.initial = absl::Seconds(2),
                   .max = absl::Seconds(1),
                   .multiplier = 0.1,
                   .jitter = Jitter::kNone});
  EXPECT_EQ(backoff.NextDelay(), absl::Seconds(2));
  EXPECT_EQ(backoff.NextDelay(), absl::Seconds(2));  // never shrinks
}

TEST(WaitUnlessStoppedTest, ReturnsWhenTheFakeClockPassesTheDelay) {
  testing::FakeClock clock;
  absl::Mutex mu;
  bool stop = false;
  bool started = false;
  std::atomic<int> result{-1};
  std::thread waiter([&] {
    absl::MutexLock lock(&mu);
    started = true;  // set in the same hold of `mu` in which the wait reads the clock
    result = WaitUnlessStopped(&clock, absl::Seconds(5), mu, stop) ? 1 : 0;
  });
  // Once `mu` is free with `started` set, the waiter is inside the wait, its deadline
  // taken: the clock may move.
  ASSERT_TRUE(Eventually([&] {
    absl::MutexLock lock(&mu);
    return started;
  }));
  clock.Advance(absl::Seconds(4));
  // Not yet due: a wait that ignored the clock, or woke early, would be done by now
  // (one millisecond's recheck, 20 times over).
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(result.load(), -1);
  clock.Advance(absl::Seconds(1));
  EXPECT_TRUE(Eventually([&] { return result.load() != -1; }));
  waiter.join();
  EXPECT_EQ(result.load(), 1);
}

TEST(WaitUnlessStoppedTest, StopInterruptsTheWait) {
  testing::FakeClock clock;
  for (Clock* c : {static_cast<Clock*>(&clock), RealClock()}) {
    absl::Mutex mu;
    bool stop = false;
    std::atomic<int> result{-1};
    std::thread waiter([&] {
      absl::MutexLock lock(&mu);
      result = WaitUnlessStopped(c, absl::Hours(1), mu, stop) ? 1 : 0;
    });
    {
      absl::MutexLock lock(&mu);
      stop = true;
    }
    waiter.join();  // would hang for an hour if the stop did not wake it
    EXPECT_EQ(result.load(), 0);
  }
}

TEST(WaitUnlessStoppedTest, AZeroDelayReturnsAtOnce) {
  absl::Mutex mu;
  bool stop = false;
  absl::MutexLock lock(&mu);
  EXPECT_TRUE(WaitUnlessStopped(RealClock(), absl::ZeroDuration(), mu, stop));
}

}  // namespace
}  // namespace ballast
