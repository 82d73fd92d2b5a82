// ballast.v1.AgentService: one bidirectional stream per agent. gRPC glue only; the logic
// is Coordinator's. Refused input travels back as a Rejection message (the stream stays
// up) and is counted.
//
// Authentication: with an agent token set (--agent_token_file), a session must carry
// `authorization: Bearer <token>` metadata (UNAUTHENTICATED / PERMISSION_DENIED
// otherwise, before anything is read). Under mTLS the handshake already authenticated the
// agent; StartServer (server.h) refuses a non-loopback address with neither.
//
// A slow agent stalls nobody: what the coordinator sends a session (plans, from the tick
// thread that holds the coordinator's lock; rejections, from the session's own reader) is
// queued and written by the session's own writer thread, so no caller ever waits on the
// agent's network. The queue is bounded: a plan replaces the queued plan of its group
// (plans are whole and versioned: only the newest matters), and rejections past
// kMaxQueuedRejections are dropped. A write that has not completed within
// write_timeout (the agent stopped reading) cancels the session: the agent is dropped,
// its workers are detached, and it reconnects and gets the plans in force when it reads
// again.
#ifndef BALLAST_COORDINATOR_AGENT_SERVICE_H_
#define BALLAST_COORDINATOR_AGENT_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <set>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "ballast/v1/agent.grpc.pb.h"
#include "coordinator/admin_auth.h"
#include "coordinator/coordinator.h"

namespace ballast::coordinator {

struct AgentServiceOptions {
  // How long one write to an agent may block before its session is cancelled.
  absl::Duration write_timeout = absl::Seconds(10);
};

// Counters for metrics and tests.
struct AgentServiceCounters {
  int64_t sessions_cancelled_slow = 0;  // dropped for a write past write_timeout
  int64_t rejections_dropped = 0;       // not sent: the session's queue was full
};

class SessionWriter;

class AgentServiceImpl final : public v1::AgentService::Service {
 public:
  static constexpr size_t kMaxQueuedRejections = 256;

  explicit AgentServiceImpl(Coordinator* coordinator, AgentServiceOptions options = {});
  ~AgentServiceImpl() override;  // stops the watchdog; call after the server shut down
  // Before the server starts only: sessions read it without a lock. The default allows
  // every session (mTLS or loopback).
  void set_authorizer(std::shared_ptr<const AdminAuthorizer> authorizer) {
    authorizer_ = std::move(authorizer);
  }

  grpc::Status Session(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::AgentMessage>* stream) override;

  AgentServiceCounters counters() const;
  // Sessions whose current write has been blocked for at least `at_least` (agents not
  // reading), for metrics and tests.
  int32_t BlockedSessions(absl::Duration at_least) const;

 private:
  // Cancels sessions whose write has been blocked for longer than write_timeout.
  void Watchdog();

  Coordinator* const coordinator_;
  const AgentServiceOptions options_;
  std::shared_ptr<const AdminAuthorizer> authorizer_;

  mutable absl::Mutex mu_;
  std::set<SessionWriter*> writers_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<int64_t> sessions_cancelled_slow_{0};
  std::atomic<int64_t> rejections_dropped_{0};
  std::thread watchdog_;
};

}  // namespace ballast::coordinator

#endif  // BALLAST_COORDINATOR_AGENT_SERVICE_H_
