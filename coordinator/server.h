// The coordinator's gRPC server, built the same way for the binary and for tests:
// AgentService + Admin, grpc.health.v1, server reflection, keepalive for agents' long-lived
// streams, and a bound on message size.
#ifndef BALLAST_COORDINATOR_SERVER_H_
#define BALLAST_COORDINATOR_SERVER_H_

#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "coordinator/admin_service.h"
#include "coordinator/agent_service.h"

namespace ballast::coordinator {

struct ServerOptions {
  std::string address = "127.0.0.1:7070";  // port 0 picks a free one
  int max_message_bytes = 16 << 20;
};

struct RunningServer {
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

absl::StatusOr<RunningServer> StartServer(const ServerOptions& options,
                                          AgentServiceImpl* agent_service,
                                          AdminServiceImpl* admin_service);

}  // namespace ballast::coordinator

#endif  // BALLAST_COORDINATOR_SERVER_H_
