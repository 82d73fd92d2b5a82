// CoordinatorSession: the agent's one long-lived stream to the coordinator.
//
// A background thread connects, says hello (listing every attached worker), then every
// `batch_period` sends worker changes and a batch of queued reports; a reader thread
// relays plans to the workers through AgentState. When the stream breaks, it reconnects
// with exponential backoff and full jitter, and workers keep training meanwhile.
#ifndef BALLAST_AGENT_COORDINATOR_SESSION_H_
#define BALLAST_AGENT_COORDINATOR_SESSION_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "agent/agent_state.h"

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
  absl::Duration initial_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(10);
  // HTTP/2 keepalive on the stream, so a dead coordinator is noticed even when idle.
  absl::Duration keepalive = absl::Seconds(10);
};

class CoordinatorSession {
 public:
  CoordinatorSession(const CoordinatorSessionOptions& options, AgentState* state);
  ~CoordinatorSession();  // stops and joins
  CoordinatorSession(const CoordinatorSession&) = delete;
  CoordinatorSession& operator=(const CoordinatorSession&) = delete;

  bool connected() const;
  int64_t connects() const;

 private:
  void Run();
  bool RunOnce();  // one connection; true if it was established

  const CoordinatorSessionOptions options_;
  AgentState* const state_;
  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool connected_ ABSL_GUARDED_BY(mu_) = false;
  int64_t connects_ ABSL_GUARDED_BY(mu_) = 0;
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::thread thread_;
};

}  // namespace ballast::agent

#endif  // BALLAST_AGENT_COORDINATOR_SESSION_H_
