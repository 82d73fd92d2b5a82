// AdminClient: the admin API as ballastctl (and tests) use it. GrpcAdminClient puts a
// deadline and the bearer token (if any) on every call; tests use FakeAdminClient
// (tests/testing/fake_admin_client.h).
#ifndef BALLAST_CTL_ADMIN_CLIENT_H_
#define BALLAST_CTL_ADMIN_CLIENT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ballast/v1/admin.pb.h"

namespace grpc {
class ChannelCredentials;
}  // namespace grpc

namespace ballast::ctl {

class AdminClient {
 public:
  virtual ~AdminClient() = default;
  virtual absl::StatusOr<v1::ClusterStatus> GetStatus(const v1::GetStatusRequest& request) = 0;
  virtual absl::StatusOr<v1::Policy> GetPolicy(const v1::GetPolicyRequest& request) = 0;
  virtual absl::StatusOr<v1::Policy> SetPolicy(const v1::SetPolicyRequest& request) = 0;
  virtual absl::Status SetPaused(const v1::SetPausedRequest& request) = 0;
  virtual absl::Status SetCordon(const v1::SetCordonRequest& request) = 0;
  virtual absl::Status SetHold(const v1::SetHoldRequest& request) = 0;
  virtual absl::StatusOr<v1::Explanation> Explain(const v1::ExplainRequest& request) = 0;
};

struct AdminClientOptions {
  std::string address = "127.0.0.1:7070";
  absl::Duration deadline = absl::Seconds(5);
  // TLS / mTLS (ChannelCredentialsFromFiles in common/tls.h); null means plaintext.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // Sent as `authorization: Bearer <token>` on every call; empty sends none.
  std::string token;
};

std::unique_ptr<AdminClient> NewGrpcAdminClient(const AdminClientOptions& options);
// Plaintext, without a token: a coordinator on loopback with admin auth off.
std::unique_ptr<AdminClient> NewGrpcAdminClient(const std::string& address,
                                                absl::Duration deadline);

}  // namespace ballast::ctl

#endif  // BALLAST_CTL_ADMIN_CLIENT_H_
