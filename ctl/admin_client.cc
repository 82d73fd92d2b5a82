#include "ctl/admin_client.h"

#include <grpcpp/grpcpp.h>

#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "ballast/v1/admin.grpc.pb.h"
#include "common/backoff.h"
#include "common/grpc_status.h"

namespace ballast::ctl {
namespace {

// A call that fails UNAVAILABLE (no connection) is made again after these pauses (the
// project's Backoff, from kFirstPause, each twice the last), while the deadline allows: a
// connection attempt can fail while the coordinator listens (a fresh-clone CI run saw the first
// admin call of tests/integration/control_plane_test.cc fail to connect, the agents beside it
// connecting 8 ms later), and a coordinator restarting is back within a second or so. Every admin
// call reads state or sets it to a value, so one the coordinator did apply before its
// answer was lost is harmless to repeat. A coordinator that stays down, or refuses the TLS
// handshake, still fails UNAVAILABLE, about a second later.
constexpr int kRetries = 3;
constexpr absl::Duration kFirstPause = absl::Milliseconds(150);

// The channel reconnects after a failed attempt no sooner than its backoff (1 s by default),
// and fails calls at once until then: short enough for the pauses above to see a new try.
std::shared_ptr<grpc::Channel> AdminChannel(const AdminClientOptions& options) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return grpc::CreateCustomChannel(
      options.address,
      options.credentials != nullptr ? options.credentials : grpc::InsecureChannelCredentials(),
      args);
}

class GrpcAdminClient final : public AdminClient {
 public:
  explicit GrpcAdminClient(const AdminClientOptions& options)
      : options_(options), stub_(v1::Admin::NewStub(AdminChannel(options))) {}

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
  absl::Status SetHold(const v1::SetHoldRequest& r) override {
    return Call<v1::SetHoldResponse>(r, &v1::Admin::Stub::SetHold).status();
  }
  absl::StatusOr<v1::Explanation> Explain(const v1::ExplainRequest& r) override {
    return Call<v1::Explanation>(r, &v1::Admin::Stub::Explain);
  }

 private:
  template <typename Response, typename Request, typename Method>
  absl::StatusOr<Response> Call(const Request& request, Method method) {
    const absl::Time deadline = absl::Now() + options_.deadline;
    Response response;
    grpc::Status status;
    Backoff backoff({.initial = kFirstPause, .max = options_.deadline, .jitter = Jitter::kNone});
    for (int retry = 0;; ++retry) {
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(deadline));
      if (!options_.token.empty()) {
        context.AddMetadata("authorization", absl::StrCat("Bearer ", options_.token));
      }
      status = (stub_.get()->*method)(&context, request, &response);
      if (status.error_code() != grpc::StatusCode::UNAVAILABLE || retry == kRetries) break;
      const absl::Duration pause = backoff.NextDelay();
      if (absl::Now() + pause >= deadline) break;
      absl::SleepFor(pause);
    }
    if (!status.ok()) {
      absl::Status s = FromGrpcStatus(status);
      switch (s.code()) {
        case absl::StatusCode::kUnavailable:
          // A failed TLS handshake looks like a closed socket from this side.
          return absl::Status(s.code(), absl::StrCat("coordinator at ", options_.address,
                                                     " not reachable: ", s.message(),
                                                     "; if it serves TLS, check --tls_ca, and "
                                                     "for mTLS --tls_cert and --tls_key"));
        case absl::StatusCode::kDeadlineExceeded:
          return absl::Status(s.code(), absl::StrCat("coordinator at ", options_.address,
                                                     " not reachable: ", s.message()));
        case absl::StatusCode::kUnauthenticated:  // only admin authorisation says this
          return absl::Status(
              s.code(),
              absl::StrCat(s.message(), options_.token.empty() ? "; pass --token_file" : ""));
        default:
          return s;
      }
    }
    return response;
  }

  const AdminClientOptions options_;
  std::unique_ptr<v1::Admin::Stub> stub_;
};

}  // namespace

std::unique_ptr<AdminClient> NewGrpcAdminClient(const AdminClientOptions& options) {
  return std::make_unique<GrpcAdminClient>(options);
}

std::unique_ptr<AdminClient> NewGrpcAdminClient(const std::string& address,
                                                absl::Duration deadline) {
  return NewGrpcAdminClient(AdminClientOptions{.address = address, .deadline = deadline});
}

}  // namespace ballast::ctl
