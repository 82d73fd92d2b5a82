// Real control-plane processes' parts, in-process, for integration tests: a coordinator
// gRPC server on a loopback port (restartable on the same port, with its SQLite store),
// and agents serving workers on Unix sockets.
//
//   InProcessCoordinator coordinator({.store_path = dir + "/c.db"});
//   ASSERT_TRUE(coordinator.Start().ok());
//   InProcessAgent agent("agent-a", dir + "/a.sock", coordinator.address());
//   ASSERT_TRUE(agent.Start().ok());
#ifndef BALLAST_TESTS_TESTING_CONTROL_PLANE_H_
#define BALLAST_TESTS_TESTING_CONTROL_PLANE_H_

#include <memory>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "agent/agent_state.h"
#include "agent/coordinator_session.h"
#include "agent/worker_service.h"
#include "coordinator/admin_service.h"
#include "coordinator/agent_service.h"
#include "coordinator/coordinator.h"
#include "coordinator/policy_store.h"
#include "coordinator/server.h"
#include "coordinator/speed_model.h"

namespace ballast::testing {

struct InProcessCoordinatorOptions {
  std::string store_path;
  absl::Duration tick = absl::Milliseconds(20);
  int max_message_bytes = 4 << 20;
  std::string host = "127.0.0.1";  // the listen address's host; address() stays loopback
  coordinator::ServerSecurityOptions security;  // TLS and admin auth, as the flags set them
  bool health_port = false;  // also serve plaintext grpc.health.v1 on a free port
  coordinator::CoordinatorOptions coordinator;
  coordinator::AgentServiceOptions agent_service;
};

class InProcessCoordinator {
 public:
  explicit InProcessCoordinator(InProcessCoordinatorOptions options) : options_(options) {}
  ~InProcessCoordinator() { Stop(); }
  // Starts on a free port the first time, on the same port after a Stop().
  absl::Status Start();
  // Kills the server mid-stream (streams are cancelled) and drops all in-memory state,
  // as a crash would; the store file stays.
  void Stop();
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  // The plaintext health port (options.health_port), valid while started.
  std::string health_address() const { return "127.0.0.1:" + std::to_string(health_port_); }
  coordinator::Coordinator* coordinator() { return coordinator_.get(); }
  // Valid while started.
  const coordinator::AdminAuthorizer& admin_auth() const { return *admin_auth_; }
  coordinator::AgentServiceImpl& agent_service() { return *agent_service_; }

 private:
  InProcessCoordinatorOptions options_;
  int port_ = 0;
  std::unique_ptr<coordinator::PolicyStore> store_;
  std::unique_ptr<coordinator::SpeedModel> speeds_;
  std::unique_ptr<coordinator::Coordinator> coordinator_;
  std::unique_ptr<coordinator::AgentServiceImpl> agent_service_;
  std::unique_ptr<coordinator::AdminServiceImpl> admin_service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<grpc::Server> health_server_;
  int health_port_ = 0;
  std::shared_ptr<const coordinator::AdminAuthorizer> admin_auth_;
  std::unique_ptr<absl::Notification> stop_;
  std::thread ticker_;
};

class InProcessAgent {
 public:
  // Null `credentials`: plaintext to the coordinator.
  // Non-empty `token`: the agent token it presents.
  InProcessAgent(std::string agent_id, std::string socket_path, std::string coordinator_address,
                 std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr,
                 std::string token = "")
      : agent_id_(std::move(agent_id)),
        socket_path_(std::move(socket_path)),
        coordinator_address_(std::move(coordinator_address)),
        credentials_(std::move(credentials)),
        token_(std::move(token)) {}
  ~InProcessAgent() { Stop(); }
  absl::Status Start();
  void Stop();
  const std::string& socket_path() const { return socket_path_; }
  agent::AgentState& state() { return *state_; }
  agent::CoordinatorSession& session() { return *session_; }

 private:
  std::string agent_id_;
  std::string socket_path_;
  std::string coordinator_address_;
  std::shared_ptr<grpc::ChannelCredentials> credentials_;
  std::string token_;
  std::unique_ptr<agent::AgentState> state_;
  std::unique_ptr<agent::WorkerService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<agent::CoordinatorSession> session_;
};

// Polls `condition` every few milliseconds until it holds or `timeout` passes.
bool WaitFor(const std::function<bool()>& condition, absl::Duration timeout);

}  // namespace ballast::testing

#endif  // BALLAST_TESTS_TESTING_CONTROL_PLANE_H_
