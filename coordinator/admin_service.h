// ballast.v1.Admin: the operators' API (ballastctl). gRPC glue only; the logic is
// Coordinator's. Every request is validated here or in Coordinator, with errors naming
// the field.
#ifndef BALLAST_COORDINATOR_ADMIN_SERVICE_H_
#define BALLAST_COORDINATOR_ADMIN_SERVICE_H_

#include "ballast/v1/admin.grpc.pb.h"
#include "coordinator/coordinator.h"

namespace ballast::coordinator {

class AdminServiceImpl final : public v1::Admin::Service {
 public:
  explicit AdminServiceImpl(Coordinator* coordinator) : coordinator_(coordinator) {}
  grpc::Status GetStatus(grpc::ServerContext*, const v1::GetStatusRequest*,
                         v1::ClusterStatus*) override;
  grpc::Status GetPolicy(grpc::ServerContext*, const v1::GetPolicyRequest*, v1::Policy*) override;
  grpc::Status SetPolicy(grpc::ServerContext*, const v1::SetPolicyRequest*, v1::Policy*) override;
  grpc::Status SetPaused(grpc::ServerContext*, const v1::SetPausedRequest*,
                         v1::SetPausedResponse*) override;
  grpc::Status SetCordon(grpc::ServerContext*, const v1::SetCordonRequest*,
                         v1::SetCordonResponse*) override;
  grpc::Status Explain(grpc::ServerContext*, const v1::ExplainRequest*,
                       v1::Explanation*) override;

 private:
  Coordinator* coordinator_;
};

}  // namespace ballast::coordinator

#endif  // BALLAST_COORDINATOR_ADMIN_SERVICE_H_
