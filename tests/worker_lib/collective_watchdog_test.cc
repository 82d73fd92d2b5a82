// CollectiveWatchdog with fake collectives and a fake clock: what the CUDA backend's NCCL
// communicator relies on to queue collectives without a host wait each and still never
// hang (worker_lib/cuda/nccl_communicator.cc).
#include "worker_lib/internal/collective_watchdog.h"

#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/fake_clock.h"

namespace ballast::internal {
namespace {

using ::testing::HasSubstr;
using State = WatchedCollective::State;

// A collective whose state the test sets; shared so the test keeps a handle after Watch.
struct FakeState {
  absl::Mutex mu;
  absl::StatusOr<State> state = State::kWaitingForInputs;
  int polls = 0;
};

class FakeCollective : public WatchedCollective {
 public:
  explicit FakeCollective(std::shared_ptr<FakeState> s) : s_(std::move(s)) {}
  absl::StatusOr<State> Poll() override {
    absl::MutexLock lock(&s_->mu);
    ++s_->polls;
    return s_->state;
  }

 private:
  std::shared_ptr<FakeState> s_;
};

void Set(FakeState& s, absl::StatusOr<State> state) {
  absl::MutexLock lock(&s.mu);
  s.state = std::move(state);
}

class WatchdogTest : public ::testing::Test {
 protected:
  std::unique_ptr<CollectiveWatchdog> Make(bool thread = false) {
    return std::make_unique<CollectiveWatchdog>(
        CollectiveWatchdogOptions{.timeout = absl::Seconds(10),
                                  .input_timeouts = 4,
                                  .poll_interval = absl::Milliseconds(1),
                                  .name = "rank 1 of 2",
                                  .clock = &clock_,
                                  .start_thread = thread},
        [this](const absl::Status& why) {
          absl::MutexLock lock(&mu_);
          aborts_.push_back(why);
        });
  }
  std::shared_ptr<FakeState> Watch(CollectiveWatchdog& w, const std::string& what) {
    auto state = std::make_shared<FakeState>();
    w.Watch(what, std::make_unique<FakeCollective>(state));
    return state;
  }
  std::vector<absl::Status> aborts() {
    absl::MutexLock lock(&mu_);
    return aborts_;
  }

  testing::FakeClock clock_;
  absl::Mutex mu_;
  std::vector<absl::Status> aborts_;
};

TEST_F(WatchdogTest, FinishedCollectivesLeaveAndNothingFails) {
  auto w = Make();
  auto a = Watch(*w, "all-reduce a");
  auto b = Watch(*w, "all-reduce b");
  w->PollOnce();
  EXPECT_EQ(w->in_flight(), 2u);
  Set(*a, State::kDone);
  Set(*b, State::kRunning);
  w->PollOnce();
  EXPECT_EQ(w->in_flight(), 1u);
  Set(*b, State::kDone);
  clock_.Advance(absl::Hours(1));  // long after: done is done
  w->PollOnce();
  EXPECT_EQ(w->in_flight(), 0u);
  EXPECT_TRUE(w->failure().ok());
  EXPECT_TRUE(aborts().empty());
}

TEST_F(WatchdogTest, TheTimeoutRunsFromWhenTheInputsAreReady) {
  auto w = Make();
  auto a = Watch(*w, "ncclAllReduce(sum)");
  // A straggler's compute takes 25 s: not a missing peer (the limit is 4 x 10 s).
  clock_.Advance(absl::Seconds(25));
  w->PollOnce();
  EXPECT_TRUE(w->failure().ok());
  Set(*a, State::kRunning);
  w->PollOnce();  // starts the 10 s here
  clock_.Advance(absl::Seconds(9));
  w->PollOnce();
  EXPECT_TRUE(w->failure().ok());
  clock_.Advance(absl::Seconds(1));
  w->PollOnce();
  const absl::Status failure = w->failure();
  EXPECT_EQ(failure.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(failure.message(), HasSubstr("ncclAllReduce(sum) on rank 1 of 2 did not complete "
                                           "within 10s (a peer is missing or stalled)"));
  ASSERT_EQ(aborts().size(), 1u);
  EXPECT_EQ(aborts()[0], failure);
}

TEST_F(WatchdogTest, InputsThatNeverBecomeReadyFailAfterInputTimeouts) {
  auto w = Make();
  Watch(*w, "ncclBroadcast");
  w->PollOnce();  // the oldest unfinished collective from here
  clock_.Advance(absl::Seconds(39));
  w->PollOnce();
  EXPECT_TRUE(w->failure().ok());
  clock_.Advance(absl::Seconds(1));
  w->PollOnce();
  EXPECT_EQ(w->failure().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(w->failure().message(),
              HasSubstr("the compute queued before ncclBroadcast on rank 1 of 2 did not "
                        "complete within 4 x 10s"));
}

// A step's collectives are queued well ahead of their turn: the time earlier ones take is
// not held against later ones.
TEST_F(WatchdogTest, InputsAreTimedFromWhenTheCollectiveBecomesTheOldest) {
  auto w = Make();
  auto a = Watch(*w, "first");
  auto b = Watch(*w, "second");
  w->PollOnce();
  clock_.Advance(absl::Seconds(30));  // the first waits for its inputs 30 s (limit 40)
  Set(*a, State::kDone);
  w->PollOnce();  // the second is the oldest now: 40 s from here
  clock_.Advance(absl::Seconds(39));
  w->PollOnce();
  EXPECT_TRUE(w->failure().ok()) << w->failure();
  clock_.Advance(absl::Seconds(1));
  w->PollOnce();
  EXPECT_THAT(w->failure().message(), HasSubstr("the compute queued before second"));
  EXPECT_EQ(b.use_count(), 2);  // still watched when it failed
}

TEST_F(WatchdogTest, OnlyTheOldestUnfinishedCollectiveIsTimed) {
  auto w = Make();
  auto a = Watch(*w, "first");
  auto b = Watch(*w, "second");
  Set(*a, State::kRunning);
  w->PollOnce();
  clock_.Advance(absl::Seconds(8));
  Set(*a, State::kDone);
  Set(*b, State::kRunning);
  w->PollOnce();  // the second starts its own 10 s now, not at its call
  clock_.Advance(absl::Seconds(8));
  w->PollOnce();
  EXPECT_TRUE(w->failure().ok()) << w->failure();
  clock_.Advance(absl::Seconds(2));
  w->PollOnce();
  EXPECT_THAT(w->failure().message(), HasSubstr("second on rank 1 of 2 did not complete"));
}

TEST_F(WatchdogTest, AnErrorFailsAtOnceNamingTheCollectiveAndAbortsOnce) {
  auto w = Make();
  auto a = Watch(*w, "ncclSend/ncclRecv group");
  Set(*a, absl::UnavailableError("remote process exited"));
  w->PollOnce();
  const absl::Status failure = w->failure();
  EXPECT_EQ(failure.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(failure.message(), HasSubstr("ncclSend/ncclRecv group failed on rank 1 of 2: "
                                           "remote process exited"));
  // Sticky, and the abort is not repeated by later failures or polls.
  EXPECT_EQ(w->Fail(absl::InternalError("later")), failure);
  w->PollOnce();
  EXPECT_EQ(w->failure(), failure);
  EXPECT_EQ(aborts().size(), 1u);
  // Nothing is polled once failed.
  const int polls = [&] {
    absl::MutexLock l(&a->mu);
    return a->polls;
  }();
  w->PollOnce();
  EXPECT_EQ(
      [&] {
        absl::MutexLock l(&a->mu);
        return a->polls;
      }(),
      polls);
}

TEST_F(WatchdogTest, AnAsyncErrorFailsWhileCollectivesAreInFlight) {
  std::atomic<bool> broken{false};
  CollectiveWatchdog w(
      {.timeout = absl::Seconds(10),
       .name = "rank 0 of 3",
       .clock = &clock_,
       .start_thread = false},
      [](const absl::Status&) {},
      [&] { return broken ? absl::UnavailableError("NCCL: remote error") : absl::OkStatus(); });
  auto a = Watch(w, "x");
  w.PollOnce();
  EXPECT_TRUE(w.failure().ok());
  broken = true;
  w.PollOnce();
  EXPECT_THAT(w.failure().message(), HasSubstr("on rank 0 of 3: NCCL: remote error"));
}

TEST_F(WatchdogTest, TheThreadFindsATimeoutByItself) {
  auto w = Make(/*thread=*/true);
  auto a = std::make_shared<FakeState>();
  a->state = State::kRunning;
  w->Watch("ncclAllReduce(sum)", std::make_unique<FakeCollective>(a));
  // Let the thread see it running, then cross the deadline. Wait for a second poll: the
  // thread reads the clock after the first Poll returns, so advancing the clock right after
  // the first could move the deadline along with it (seen once under ASan in CI).
  const absl::Time until = absl::Now() + absl::Seconds(20);
  while ([&] {
    absl::MutexLock l(&a->mu);
    return a->polls;
  }() < 2 &&
         absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  clock_.Advance(absl::Seconds(11));
  while (w->failure().ok() && absl::Now() < until) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_EQ(w->failure().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(aborts().size(), 1u);
  w.reset();  // joins the thread
}

}  // namespace
}  // namespace ballast::internal
