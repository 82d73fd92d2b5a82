#include "coordinator/admin_service.h"

#include <optional>

#include "common/grpc_status.h"
#include "coordinator/policy_proto.h"
#include "proto/validate.h"

namespace ballast::coordinator {

grpc::Status AdminServiceImpl::GetStatus(grpc::ServerContext* context,
                                         const v1::GetStatusRequest* req, v1::ClusterStatus* resp) {
  if (grpc::Status s = Authorize(context, "GetStatus"); !s.ok()) return s;
  absl::StatusOr<v1::ClusterStatus> status = coordinator_->Status(req->job());
  if (!status.ok()) return ToGrpcStatus(status.status());
  *resp = *std::move(status);
  return grpc::Status::OK;
}

grpc::Status AdminServiceImpl::GetPolicy(grpc::ServerContext* context,
                                         const v1::GetPolicyRequest* req, v1::Policy* resp) {
  if (grpc::Status s = Authorize(context, "GetPolicy"); !s.ok()) return s;
  absl::StatusOr<JobPolicy> policy = coordinator_->GetPolicy(req->job());
  if (!policy.ok()) return ToGrpcStatus(policy.status());
  *resp = PolicyToProto(*policy);
  return grpc::Status::OK;
}

grpc::Status AdminServiceImpl::SetPolicy(grpc::ServerContext* context,
                                         const v1::SetPolicyRequest* req, v1::Policy* resp) {
  if (grpc::Status s = Authorize(context, "SetPolicy"); !s.ok()) return s;
  if (absl::Status s = ValidateName("job", req->job()); !s.ok()) return ToGrpcStatus(s);
  absl::StatusOr<JobPolicy> policy = PolicyFromProto(req->policy());
  if (!policy.ok()) return ToGrpcStatus(policy.status());
  if (!req->preconfigure()) {
    if (absl::Status s = coordinator_->CheckJobKnown(req->job()); !s.ok()) return ToGrpcStatus(s);
  }
  if (absl::Status s = coordinator_->SetPolicy(req->job(), *policy); !s.ok()) {
    return ToGrpcStatus(s);
  }
  *resp = PolicyToProto(*policy);
  return grpc::Status::OK;
}

grpc::Status AdminServiceImpl::SetPaused(grpc::ServerContext* context,
                                         const v1::SetPausedRequest* req, v1::SetPausedResponse*) {
  if (grpc::Status s = Authorize(context, "SetPaused"); !s.ok()) return s;
  if (!req->job().empty() && !req->preconfigure()) {
    if (absl::Status s = coordinator_->CheckJobKnown(req->job()); !s.ok()) return ToGrpcStatus(s);
  }
  return ToGrpcStatus(coordinator_->SetPaused(req->job(), req->paused()));
}

grpc::Status AdminServiceImpl::SetCordon(grpc::ServerContext* context,
                                         const v1::SetCordonRequest* req, v1::SetCordonResponse*) {
  if (grpc::Status s = Authorize(context, "SetCordon"); !s.ok()) return s;
  return ToGrpcStatus(coordinator_->SetCordon(req->device(), req->cordoned(), req->reason()));
}

grpc::Status AdminServiceImpl::SetHold(grpc::ServerContext* context, const v1::SetHoldRequest* req,
                                       v1::SetHoldResponse*) {
  if (grpc::Status s = Authorize(context, "SetHold"); !s.ok()) return s;
  std::optional<GroupHold> hold;
  if (!req->release()) {
    hold = GroupHold{.rank = req->hold().rank(),
                     .offload_fraction = req->hold().offload_fraction(),
                     .reshard_fraction = req->hold().reshard_fraction()};
  }
  return ToGrpcStatus(coordinator_->SetHold(req->job(), req->group(), hold));
}

grpc::Status AdminServiceImpl::Explain(grpc::ServerContext* context, const v1::ExplainRequest* req,
                                       v1::Explanation* resp) {
  if (grpc::Status s = Authorize(context, "Explain"); !s.ok()) return s;
  absl::StatusOr<v1::Explanation> explanation = coordinator_->Explain(req->job(), req->group());
  if (!explanation.ok()) return ToGrpcStatus(explanation.status());
  *resp = *std::move(explanation);
  return grpc::Status::OK;
}

}  // namespace ballast::coordinator
