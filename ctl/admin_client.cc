#include "ctl/admin_client.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "ballast/v1/admin.grpc.pb.h"
#include "common/grpc_status.h"

namespace ballast::ctl {
namespace {

class GrpcAdminClient final : public AdminClient {
 public:
  GrpcAdminClient(const std::string& address, absl::Duration deadline)
      : address_(address),
        deadline_(deadline),
        stub_(v1::Admin::NewStub(
            grpc::CreateChannel(address, grpc::InsecureChannelCredentials()))) {}

  absl::StatusOr<v1::ClusterStatus> GetStatus(const v1::GetStatusRequest& r) override {
    return Call<v1::ClusterStatus>(r, &v1::Admin::Stub::GetStatus);
  }
  absl::StatusOr<v1::Policy> GetPolicy(const v1::GetPolicyRequest& r) override {
    return Call<v1::Policy>(r, &v1::Admin::Stub::GetPolicy);
  }
  absl::StatusOr<v1::Policy> SetPolicy(const v1::SetPolicyRequest& r) override {
    return Call<v1::Policy>(r, &v1::Admin::Stub::SetPolicy);
  }
  absl::Status SetPaused(const v1::SetPausedRequest& r) override {
    return Call<v1::SetPausedResponse>(r, &v1::Admin::Stub::SetPaused).status();
  }
  absl::Status SetCordon(const v1::SetCordonRequest& r) override {
    return Call<v1::SetCordonResponse>(r, &v1::Admin::Stub::SetCordon).status();
  }
  absl::StatusOr<v1::Explanation> Explain(const v1::ExplainRequest& r) override {
    return Call<v1::Explanation>(r, &v1::Admin::Stub::Explain);
  }

 private:
  template <typename Response, typename Request, typename Method>
  absl::StatusOr<Response> Call(const Request& request, Method method) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + deadline_));
    Response response;
    grpc::Status status = (stub_.get()->*method)(&context, request, &response);
    if (!status.ok()) {
      absl::Status s = FromGrpcStatus(status);
      if (s.code() == absl::StatusCode::kUnavailable ||
          s.code() == absl::StatusCode::kDeadlineExceeded) {
        return absl::Status(s.code(), absl::StrCat("coordinator at ", address_,
                                                   " not reachable: ", s.message()));
      }
      return s;
    }
    return response;
  }

  const std::string address_;
  const absl::Duration deadline_;
  std::unique_ptr<v1::Admin::Stub> stub_;
};

}  // namespace

std::unique_ptr<AdminClient> NewGrpcAdminClient(const std::string& address,
                                                absl::Duration deadline) {
  return std::make_unique<GrpcAdminClient>(address, deadline);
}

}  // namespace ballast::ctl
