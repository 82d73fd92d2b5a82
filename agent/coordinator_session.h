// CoordinatorSession: the agent's one long-lived stream to the coordinator.
//
// A background thread connects, says hello (listing every attached worker), then every
// `batch_period` sends worker changes and a batch of queued reports; a reader thread
// relays plans to the workers through AgentState. When the stream breaks, workers keep
// training on their plans while the session retries on the Backoff schedule
// (common/backoff.h) of its options' clock.
//
// Established, not merely open. A stream is created, and the hello handed to gRPC, even
// with nothing at the other end (gRPC buffers the first write), so the session counts as
// established only once the coordinator has answered the hello: its Welcome (or any first
// message), or, from a coordinator older than the Welcome message, the stream still open
// `established_after` later on a connected (READY) channel; a coordinator refuses a hello
// by ending the stream at once. The backoff resets then and only then, which keeps a
// partition or a coordinator that drops every hello to attempts spaced by the growing
// backoff. Logs per outage: the loss, attempts 2, 4, 8... (Backoff::ShouldLogAttempt), and
// "reconnected after N attempts".
#ifndef BALLAST_AGENT_COORDINATOR_SESSION_H_
#define BALLAST_AGENT_COORDINATOR_SESSION_H_

#include <grpcpp/support/status.h>

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "agent/agent_state.h"
#include "common/backoff.h"
#include "common/clock.h"

namespace grpc {
class ChannelCredentials;
class ClientContext;
}  // namespace grpc

namespace ballast::agent {

struct CoordinatorSessionOptions {
  std::string coordinator_address;  // host:port
  // TLS / mTLS (ChannelCredentialsFromFiles in common/tls.h); null means plaintext.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // The agent token (coordinator --agent_token_file), sent as `authorization: Bearer`
  // metadata on every session; empty: none.
  std::string token;
  std::string agent_id;
  std::string node;
  absl::Duration batch_period = absl::Milliseconds(100);
  int32_t max_batch = 4096;
  // The reconnect schedule (equal jitter, doubling); must satisfy ValidateBackoffOptions.
  absl::Duration initial_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(10);
  // How long a stream a coordinator older than the Welcome leaves unanswered must stay
  // open on a connected channel to count as established (see above). Measured on `clock`, checked
  // every batch_period.
  absl::Duration established_after = absl::Seconds(1);
  // HTTP/2 keepalive on the stream, so a dead coordinator is noticed even when idle.
  absl::Duration keepalive = absl::Seconds(10);
  // Times the backoff and `established_after`; null: RealClock(). Not owned.
  Clock* clock = nullptr;
  uint64_t jitter_seed = 0;  // 0: random (BackoffOptions::seed)
};

class CoordinatorSession {
 public:
  CoordinatorSession(const CoordinatorSessionOptions& options, AgentState* state);
  ~CoordinatorSession();  // stops and joins
  CoordinatorSession(const CoordinatorSession&) = delete;
  CoordinatorSession& operator=(const CoordinatorSession&) = delete;

  // A stream is open and its hello sent (the coordinator may not have answered yet).
  bool connected() const;
  // Streams on which the hello was sent, reconnects included.
  int64_t connects() const;
  // The coordinator answered this stream's hello (see above).
  bool established() const;
  // Streams created so far: every reconnect attempt, answered or not.
  int64_t attempts() const;
  // Waiting out a backoff delay that has not yet elapsed on the options' clock (a test
  // moves its FakeClock only while this holds, so each attempt lands at its due time).
  bool backing_off() const;

 private:
  void Run();
  // One stream, from its creation to its end; returns the stream's final status.
  grpc::Status RunOnce();
  // The coordinator answered: log (re)connection, reset the backoff. Idempotent per stream.
  void MarkEstablished() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After a stream ended: the one log line this attempt is allowed (if any).
  void LogFailedAttempt(const grpc::Status& status, bool lost_session, absl::Duration delay)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const CoordinatorSessionOptions options_;
  AgentState* const state_;
  Clock* const clock_;
  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool connected_ ABSL_GUARDED_BY(mu_) = false;
  bool established_ ABSL_GUARDED_BY(mu_) = false;
  bool connected_before_ ABSL_GUARDED_BY(mu_) = false;  // any stream established yet
  int64_t connects_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t attempts_ ABSL_GUARDED_BY(mu_) = 0;
  Backoff backoff_ ABSL_GUARDED_BY(mu_);
  bool backing_off_ ABSL_GUARDED_BY(mu_) = false;
  absl::Duration retry_at_ ABSL_GUARDED_BY(mu_);  // clock_->Monotonic() of the next attempt
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::thread thread_;  // last: starts once the rest is built
};

}  // namespace ballast::agent

#endif  // BALLAST_AGENT_COORDINATOR_SESSION_H_
