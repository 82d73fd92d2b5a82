// The agent's service for local workers (ballast.v1.WorkerAgent), over its Unix socket.
// gRPC glue only: the logic lives in AgentState.
#ifndef BALLAST_AGENT_WORKER_SERVICE_H_
#define BALLAST_AGENT_WORKER_SERVICE_H_

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

}  // namespace ballast::agent

#endif  // BALLAST_AGENT_WORKER_SERVICE_H_
