// ballast.v1.Admin: the operators' API (ballastctl). gRPC glue only; the logic is
// Coordinator's. Every call is first authorised (admin_auth.h), then its request is
// validated here or in Coordinator, with errors naming the field.
#ifndef BALLAST_COORDINATOR_ADMIN_SERVICE_H_
#define BALLAST_COORDINATOR_ADMIN_SERVICE_H_

#include <memory>
#include <utility>

#include "ballast/v1/admin.grpc.pb.h"
#include "coordinator/admin_auth.h"
#include "coordinator/coordinator.h"

namespace ballast::coordinator {

class AdminServiceImpl final : public v1::Admin::Service {
 public:
  // Open (every call allowed) until StartServer installs the configured authorizer.
  explicit AdminServiceImpl(Coordinator* coordinator)
      : coordinator_(coordinator),
        authorizer_(std::make_shared<const AdminAuthorizer>(AdminAuthOptions{})) {}
  // Before the server starts only: handlers read it without a lock.
  void set_authorizer(std::shared_ptr<const AdminAuthorizer> authorizer) {
    authorizer_ = std::move(authorizer);
  }

  grpc::Status GetStatus(grpc::ServerContext*, const v1::GetStatusRequest*,
                         v1::ClusterStatus*) override;
  grpc::Status GetPolicy(grpc::ServerContext*, const v1::GetPolicyRequest*, v1::Policy*) override;
  grpc::Status SetPolicy(grpc::ServerContext*, const v1::SetPolicyRequest*, v1::Policy*) override;
  grpc::Status SetPaused(grpc::ServerContext*, const v1::SetPausedRequest*,
                         v1::SetPausedResponse*) override;
  grpc::Status SetCordon(grpc::ServerContext*, const v1::SetCordonRequest*,
                         v1::SetCordonResponse*) override;
  grpc::Status SetHold(grpc::ServerContext*, const v1::SetHoldRequest*,
                       v1::SetHoldResponse*) override;
  grpc::Status Explain(grpc::ServerContext*, const v1::ExplainRequest*, v1::Explanation*) override;

 private:
  grpc::Status Authorize(const grpc::ServerContext* context, absl::string_view method) const {
    return authorizer_->Authorize(*context, method);
  }

  Coordinator* coordinator_;
  std::shared_ptr<const AdminAuthorizer> authorizer_;
};

}  // namespace ballast::coordinator

#endif  // BALLAST_COORDINATOR_ADMIN_SERVICE_H_
