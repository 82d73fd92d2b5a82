// ballast.v1.AgentService: one bidirectional stream per agent. gRPC glue only; the logic
// is Coordinator's. Refused input travels back as a Rejection message (the stream stays
// up) and is counted.
#ifndef BALLAST_COORDINATOR_AGENT_SERVICE_H_
#define BALLAST_COORDINATOR_AGENT_SERVICE_H_

#include "ballast/v1/agent.grpc.pb.h"
#include "coordinator/coordinator.h"

namespace ballast::coordinator {

class AgentServiceImpl final : public v1::AgentService::Service {
 public:
  explicit AgentServiceImpl(Coordinator* coordinator) : coordinator_(coordinator) {}
  grpc::Status Session(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::AgentMessage>* stream) override;

 private:
  Coordinator* coordinator_;
};

}  // namespace ballast::coordinator

#endif  // BALLAST_COORDINATOR_AGENT_SERVICE_H_
