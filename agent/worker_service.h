// The agent's service for local workers (ballast.v1.WorkerAgent), over its Unix socket.
// gRPC glue only: the logic lives in AgentState.
#ifndef BALLAST_AGENT_WORKER_SERVICE_H_
#define BALLAST_AGENT_WORKER_SERVICE_H_

#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "agent/agent_state.h"
#include "ballast/v1/worker.grpc.pb.h"

namespace ballast::agent {

class WorkerService final : public v1::WorkerAgent::Service {
 public:
  explicit WorkerService(AgentState* state) : state_(state) {}
  grpc::Status Attach(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::WorkerDirective, v1::WorkerMessage>* stream) override;

 private:
  AgentState* state_;
};

// Serves `service` on the Unix socket `socket_path` (replacing a stale socket file), with
// grpc.health.v1 and reflection, and restricts the socket to its owner and group (0660):
// only the node's training processes may attach. Used by the binary and by tests.
absl::StatusOr<std::unique_ptr<grpc::Server>> StartWorkerServer(const std::string& socket_path,
                                                                WorkerService* service);

}  // namespace ballast::agent

#endif  // BALLAST_AGENT_WORKER_SERVICE_H_
