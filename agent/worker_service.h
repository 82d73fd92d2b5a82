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

// Serves `service` on the Unix socket `socket_path`, with grpc.health.v1 and reflection.
// Used by the binary and by tests. Only the node's training processes may attach:
//   - the socket is restricted to its owner and group (0660);
//   - a parent directory it creates is 0750; an existing one that is world-writable
//     without the sticky bit is refused (FAILED_PRECONDITION), since any local user could
//     then replace the socket with their own and receive the workers' plans and reports;
//   - a stale socket from a previous run is replaced, but anything else at the path is
//     left alone (FAILED_PRECONDITION): a mistyped --socket must not delete a file.
absl::StatusOr<std::unique_ptr<grpc::Server>> StartWorkerServer(const std::string& socket_path,
                                                                WorkerService* service);

}  // namespace ballast::agent

#endif  // BALLAST_AGENT_WORKER_SERVICE_H_
