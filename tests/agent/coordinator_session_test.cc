// The agent's reconnect loop against a real loopback coordinator stand-in, on a fake
// clock: a coordinator that accepts the stream and drops it before answering the hello
// (what a partition looked like in issue 38, 20-40 attempts a second) sees attempts spaced
// by the growing backoff; an answered hello starts the backoff over.
//
// The test moves the fake clock in small steps, and only while the session is waiting out
// a delay that has not elapsed (CoordinatorSession::backing_off), so each attempt reaches
// the stand-in at its due time on the fake clock, within one step, however slow the machine.
#include "agent/coordinator_session.h"

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "ballast/v1/agent.grpc.pb.h"
#include "testing/eventually.h"
#include "testing/fake_clock.h"

namespace ballast::agent {
namespace {

using ::ballast::testing::Eventually;

constexpr absl::Duration kInitial = absl::Milliseconds(100);
constexpr absl::Duration kMax = absl::Seconds(2);
constexpr absl::Duration kStep = absl::Milliseconds(10);

// What the stand-in does with a session once it has read the hello.
enum class Answer {
  kDropUnanswered,   // ends the stream at once, says nothing: the storm case
  kWelcomeThenDrop,  // answers the hello with a Welcome, then ends the stream
  kHoldSilently,     // keeps the stream open, says nothing (a coordinator older than the
                     // Welcome), until released
};

class FakeCoordinator final : public v1::AgentService::Service {
 public:
  explicit FakeCoordinator(Clock* clock) : clock_(clock) {}

  grpc::Status Session(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::AgentMessage>* stream) override {
    v1::AgentMessage hello;
    if (!stream->Read(&hello) || !hello.has_hello()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no hello");
    }
    Answer answer;
    {
      absl::MutexLock lock(&mu_);
      attempts_at_.push_back(clock_->Monotonic());
      answer = answer_;
    }
    switch (answer) {
      case Answer::kDropUnanswered:
        break;
      case Answer::kWelcomeThenDrop: {
        v1::CoordinatorMessage message;
        message.mutable_welcome();
        stream->Write(message);
        break;
      }
      case Answer::kHoldSilently: {
        absl::MutexLock lock(&mu_);
        while (!release_ && !context->IsCancelled()) {
          mu_.AwaitWithTimeout(absl::Condition(&release_), absl::Milliseconds(10));
        }
        release_ = false;
        break;
      }
    }
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "stand-in ends the session");
  }

  void set_answer(Answer answer) {
    absl::MutexLock lock(&mu_);
    answer_ = answer;
  }
  void Release() {
    absl::MutexLock lock(&mu_);
    release_ = true;
  }
  std::vector<absl::Duration> attempts_at() const {
    absl::MutexLock lock(&mu_);
    return attempts_at_;
  }
  size_t attempts() const {
    absl::MutexLock lock(&mu_);
    return attempts_at_.size();
  }

 private:
  Clock* const clock_;
  mutable absl::Mutex mu_;
  Answer answer_ ABSL_GUARDED_BY(mu_) = Answer::kDropUnanswered;
  bool release_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<absl::Duration> attempts_at_ ABSL_GUARDED_BY(mu_);
};

class CoordinatorSessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&coordinator_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_NE(port, 0);
    address_ = absl::StrCat("127.0.0.1:", port);
  }

  void TearDown() override {
    session_.reset();  // cancels its stream before the server goes
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  }

  void StartSession() {
    CoordinatorSessionOptions options;
    options.coordinator_address = address_;
    options.agent_id = "agent-1";
    options.node = "node-1";
    options.batch_period = absl::Milliseconds(5);
    options.initial_backoff = kInitial;
    options.max_backoff = kMax;
    options.established_after = absl::Seconds(1);
    options.clock = &clock_;
    options.jitter_seed = 1;
    session_ = std::make_unique<CoordinatorSession>(options, &state_);
  }

  // Moves the fake clock while the session waits out a delay, until the stand-in has seen
  // `n` attempts; false if the session stopped waiting and trying (20 s of real time).
  bool DriveUntilAttempts(size_t n) {
    while (coordinator_.attempts() < n) {
      if (!Eventually([&] { return session_->backing_off() || coordinator_.attempts() >= n; })) {
        return false;
      }
      if (coordinator_.attempts() >= n) break;
      clock_.Advance(kStep);
    }
    return true;
  }

  static std::vector<absl::Duration> Gaps(const std::vector<absl::Duration>& at) {
    std::vector<absl::Duration> gaps;
    for (size_t i = 1; i < at.size(); ++i) gaps.push_back(at[i] - at[i - 1]);
    return gaps;
  }

  testing::FakeClock clock_;
  FakeCoordinator coordinator_{&clock_};
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  AgentState state_{1024};
  std::unique_ptr<CoordinatorSession> session_;
};

TEST_F(CoordinatorSessionTest, UnansweredStreamsAreRetriedOnTheGrowingBackoff) {
  coordinator_.set_answer(Answer::kDropUnanswered);
  StartSession();
  ASSERT_TRUE(DriveUntilAttempts(10));
  const std::vector<absl::Duration> gaps = Gaps(coordinator_.attempts_at());
  // Equal jitter: the k-th wait is within [base/2, base], base = min(100ms * 2^k, 2s);
  // the fake clock moves in 10 ms steps, so an attempt lands up to one step late.
  absl::Duration base = kInitial;
  for (size_t k = 0; k < gaps.size(); ++k) {
    EXPECT_GE(gaps[k], base / 2) << "wait " << k << " of " << absl::FormatDuration(base);
    EXPECT_LE(gaps[k], base + kStep) << "wait " << k << " of " << absl::FormatDuration(base);
    base = std::min(base * 2, kMax);
  }
  // The whole point: 10 attempts took seconds, not the ~0.5 s that a backoff reset on every
  // new stream allowed (100 ms at most per wait).
  EXPECT_GE(coordinator_.attempts_at().back() - coordinator_.attempts_at().front(),
            absl::Seconds(3));
  EXPECT_FALSE(session_->established());
  EXPECT_GE(session_->attempts(), 10);
}

TEST_F(CoordinatorSessionTest, AnAnsweredHelloStartsTheBackoffOver) {
  coordinator_.set_answer(Answer::kWelcomeThenDrop);
  StartSession();
  ASSERT_TRUE(DriveUntilAttempts(8));
  // Every session was answered, so every wait is the first one: at most `initial`.
  for (absl::Duration gap : Gaps(coordinator_.attempts_at())) {
    EXPECT_GE(gap, kInitial / 2);
    EXPECT_LE(gap, kInitial + kStep);
  }
}

TEST_F(CoordinatorSessionTest, ASilentStreamCountsAsEstablishedOnlyAfterItsGracePeriod) {
  // Grow the backoff first with unanswered streams.
  coordinator_.set_answer(Answer::kDropUnanswered);
  StartSession();
  ASSERT_TRUE(DriveUntilAttempts(6));
  coordinator_.set_answer(Answer::kHoldSilently);
  ASSERT_TRUE(DriveUntilAttempts(7));
  ASSERT_TRUE(Eventually([&] { return session_->connected(); }));
  EXPECT_FALSE(session_->established());  // open, but nothing says the hello was taken
  clock_.Advance(absl::Milliseconds(999));
  EXPECT_FALSE(session_->established());
  clock_.Advance(absl::Milliseconds(1));
  ASSERT_TRUE(Eventually([&] { return session_->established(); }));

  // The backoff started over: once the stream ends, the next attempt comes within
  // `initial`, not after the ~2 s the six failures had grown it to.
  coordinator_.set_answer(Answer::kDropUnanswered);
  const absl::Duration released_at = clock_.Monotonic();
  coordinator_.Release();
  ASSERT_TRUE(DriveUntilAttempts(8));
  const std::vector<absl::Duration> at = coordinator_.attempts_at();
  EXPECT_LE(at[7] - released_at, kInitial + kStep);
  EXPECT_GE(at[7] - released_at, kInitial / 2);
}

TEST_F(CoordinatorSessionTest, StopsAtOnceWhileBackingOff) {
  coordinator_.set_answer(Answer::kDropUnanswered);
  StartSession();
  ASSERT_TRUE(DriveUntilAttempts(3));
  ASSERT_TRUE(Eventually([&] { return session_->backing_off(); }));
  session_.reset();  // would wait for the fake clock forever if Stop did not wake the wait
  SUCCEED();
}

}  // namespace
}  // namespace ballast::agent
