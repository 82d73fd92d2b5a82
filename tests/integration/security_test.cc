// Transport security and admin authorisation on real gRPC servers over loopback, with
// certificates made at test time (tests/testing/make_test_certs.sh):
//   - mTLS: an agent with a client certificate from the cluster CA connects and is
//     registered; without one, or with one from another CA, the handshake fails
//     (UNAVAILABLE) and the coordinator registers nothing;
//   - admin calls: no credentials UNAUTHENTICATED, a wrong token or a CN not allowed
//     PERMISSION_DENIED, the right token or an allowed CN OK; on every Admin method,
//     through ballastctl's own client;
//   - health stays open to anyone who completes the handshake.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "ballast/v1/admin.grpc.pb.h"
#include "ballast/v1/agent.grpc.pb.h"
#include "common/tls.h"
#include "ctl/admin_client.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "testing/control_plane.h"
#include "testing/test_certs.h"

namespace ballast {
namespace {

using ::ballast::testing::InProcessAgent;
using ::ballast::testing::InProcessCoordinator;
using ::ballast::testing::TestCerts;
using ::ballast::testing::WaitFor;
using ::testing::HasSubstr;

constexpr char kToken[] = "test-admin-token-6f1c";

class SecurityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new std::string(absl::StrCat(::testing::TempDir(), "/ballast-sec-", ::getpid()));
    absl::StatusOr<TestCerts> certs = testing::MakeTestCerts(*root_ + "/certs");
    ASSERT_TRUE(certs.ok()) << certs.status();
    certs_ = new TestCerts(*certs);
    token_file_ = new std::string(*root_ + "/admin-token");
    testing::WriteFile(*token_file_, absl::StrCat(kToken, "\n"));
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*root_);
    delete token_file_;
    delete certs_;
    delete root_;
  }

  void SetUp() override {
    static int n = 0;
    dir_ = absl::StrCat(*root_, "/t", n++);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    agents_.clear();
    coordinator_.reset();
    std::filesystem::remove_all(dir_);
  }

  // mTLS with the admin token and CN ballastctl-admin allowed: the recommended setup.
  static coordinator::ServerSecurityOptions Mtls() {
    return {.tls = certs_->Server(/*mtls=*/true),
            .admin_token_file = *token_file_,
            .admin_allowed_cns = {testing::kAdminCn}};
  }
  // Server-only TLS with the admin token.
  static coordinator::ServerSecurityOptions TlsWithToken() {
    return {.tls = certs_->Server(/*mtls=*/false), .admin_token_file = *token_file_};
  }

  void StartCoordinator(const coordinator::ServerSecurityOptions& security) {
    coordinator_ = std::make_unique<InProcessCoordinator>(
        testing::InProcessCoordinatorOptions{.store_path = dir_ + "/c.db", .security = security});
    ASSERT_TRUE(coordinator_->Start().ok());
  }

  // Credentials of a client trusting the cluster CA and presenting `name`'s certificate
  // ("" none); "plaintext" for no TLS at all.
  static std::shared_ptr<grpc::ChannelCredentials> Creds(const std::string& name) {
    if (name == "plaintext") return grpc::InsecureChannelCredentials();
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> creds =
        ChannelCredentialsFromFiles(certs_->Client(name));
    EXPECT_TRUE(creds.ok()) << creds.status();
    return creds.ok() ? *creds : nullptr;
  }

  std::unique_ptr<ctl::AdminClient> Admin(const std::string& cert, const std::string& token) {
    return ctl::NewGrpcAdminClient(ctl::AdminClientOptions{.address = coordinator_->address(),
                                                           .deadline = absl::Seconds(5),
                                                           .credentials = Creds(cert),
                                                           .token = token});
  }

  // An agent's Session as a raw stub: hello (with one worker), then end of stream.
  grpc::Status RawAgentSession(const std::string& cert) {
    auto stub =
        v1::AgentService::NewStub(grpc::CreateChannel(coordinator_->address(), Creds(cert)));
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    auto stream = stub->Session(&context);
    v1::AgentMessage hello;
    hello.mutable_hello()->set_agent_id("raw-agent");
    hello.mutable_hello()->set_node("node-raw");
    if (stream->Write(hello)) stream->WritesDone();
    // Read what the coordinator sends (its Welcome, once registered): a stream's status
    // comes only after its messages.
    v1::CoordinatorMessage reply;
    while (stream->Read(&reply)) {
    }
    return stream->Finish();
  }

  static std::string* root_;
  static TestCerts* certs_;
  static std::string* token_file_;
  std::string dir_;
  std::unique_ptr<InProcessCoordinator> coordinator_;
  std::vector<std::unique_ptr<InProcessAgent>> agents_;
};
std::string* SecurityTest::root_ = nullptr;
TestCerts* SecurityTest::certs_ = nullptr;
std::string* SecurityTest::token_file_ = nullptr;

TEST_F(SecurityTest, MtlsAgentWithAValidClientCertificateConnectsAndIsRegistered) {
  StartCoordinator(Mtls());
  agents_.push_back(std::make_unique<InProcessAgent>("node1", dir_ + "/a.sock",
                                                     coordinator_->address(), Creds("agent")));
  ASSERT_TRUE(agents_.back()->Start().ok());
  ASSERT_TRUE(WaitFor([&] { return coordinator_->coordinator()->connected_agents() == 1; },
                      absl::Seconds(10)));
  // The agent marks its session connected once its hello's write returns, which can be
  // after the coordinator has registered it: wait for that side too (it lagged once under
  // a full ctest -j2).
  EXPECT_TRUE(WaitFor([&] { return agents_.back()->session().connected(); }, absl::Seconds(10)));
  absl::StatusOr<v1::ClusterStatus> status = Admin("admin", "")->GetStatus({});
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->agents(), 1);
}

TEST_F(SecurityTest, MtlsAgentWithoutAClientCertificateCannotConnect) {
  StartCoordinator(Mtls());
  grpc::Status status = RawAgentSession("");
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
  EXPECT_EQ(coordinator_->coordinator()->connected_agents(), 0);
}

TEST_F(SecurityTest, MtlsAgentWithACertificateFromAnotherCaCannotConnect) {
  StartCoordinator(Mtls());
  // Its CN is even an allowed admin CN: only the signature decides.
  grpc::Status status = RawAgentSession("rogue");
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
  EXPECT_EQ(coordinator_->coordinator()->connected_agents(), 0);
  absl::Status admin = Admin("rogue", kToken)->GetStatus({}).status();
  EXPECT_EQ(admin.code(), absl::StatusCode::kUnavailable) << admin;
}

TEST_F(SecurityTest, PlaintextClientCannotTalkToATlsServer) {
  StartCoordinator(TlsWithToken());
  grpc::Status status = RawAgentSession("plaintext");
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
  EXPECT_EQ(coordinator_->coordinator()->connected_agents(), 0);
}

TEST_F(SecurityTest, ServerTlsAgentConnectsWithoutAClientCertificate) {
  StartCoordinator(TlsWithToken());
  EXPECT_TRUE(RawAgentSession("").ok());
}

TEST_F(SecurityTest, AdminCallsNeedTheBearerToken) {
  StartCoordinator(TlsWithToken());
  absl::Status none = Admin("", "")->GetStatus({}).status();
  EXPECT_EQ(none.code(), absl::StatusCode::kUnauthenticated) << none;
  EXPECT_THAT(none.message(), HasSubstr("--token_file"));

  absl::Status wrong = Admin("", "not-the-token")->GetStatus({}).status();
  EXPECT_EQ(wrong.code(), absl::StatusCode::kPermissionDenied) << wrong;

  absl::StatusOr<v1::ClusterStatus> right = Admin("", kToken)->GetStatus({});
  EXPECT_TRUE(right.ok()) << right.status();

  const coordinator::AdminAuthCounters counters = coordinator_->admin_auth().counters();
  EXPECT_EQ(counters.no_credentials, 1);
  EXPECT_EQ(counters.bad_token, 1);
}

TEST_F(SecurityTest, MalformedAuthorizationIsUnauthenticated) {
  StartCoordinator(TlsWithToken());
  auto stub = v1::Admin::NewStub(grpc::CreateChannel(coordinator_->address(), Creds("")));
  grpc::ClientContext context;
  context.AddMetadata("authorization", absl::StrCat("Basic ", kToken));
  v1::ClusterStatus response;
  grpc::Status status = stub->GetStatus(&context, v1::GetStatusRequest(), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(coordinator_->admin_auth().counters().malformed, 1);
}

TEST_F(SecurityTest, EveryAdminMethodIsAuthorisedAndADeniedCallChangesNothing) {
  StartCoordinator(TlsWithToken());
  std::unique_ptr<ctl::AdminClient> anonymous = Admin("", "");
  v1::SetPolicyRequest set;
  set.set_job("vit");
  set.mutable_policy()->set_mode("migrate");
  v1::GetPolicyRequest get;
  get.set_job("vit");
  v1::SetPausedRequest pause;
  pause.set_paused(true);
  v1::SetCordonRequest cordon;
  cordon.set_device("node-1/gpu0");
  cordon.set_cordoned(true);
  v1::ExplainRequest explain;
  explain.set_job("vit");
  explain.set_group("tp0");
  const std::vector<std::pair<std::string, absl::Status>> calls = {
      {"GetStatus", anonymous->GetStatus({}).status()},
      {"GetPolicy", anonymous->GetPolicy(get).status()},
      {"SetPolicy", anonymous->SetPolicy(set).status()},
      {"SetPaused", anonymous->SetPaused(pause)},
      {"SetCordon", anonymous->SetCordon(cordon)},
      {"Explain", anonymous->Explain(explain).status()},
  };
  for (const auto& [method, status] : calls) {
    EXPECT_EQ(status.code(), absl::StatusCode::kUnauthenticated) << method << ": " << status;
  }
  absl::StatusOr<v1::ClusterStatus> status = Admin("", kToken)->GetStatus({});
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_FALSE(status->paused());
  EXPECT_EQ(status->cordoned_devices_size(), 0);
  EXPECT_EQ(coordinator_->admin_auth().counters().no_credentials, 6);
}

TEST_F(SecurityTest, AllowedClientCertificateCnIsEnoughAndOthersAreDenied) {
  StartCoordinator(Mtls());
  v1::SetPausedRequest pause;
  pause.set_paused(true);
  absl::Status by_admin_cert = Admin("admin", "")->SetPaused(pause);
  EXPECT_TRUE(by_admin_cert.ok()) << by_admin_cert;
  absl::StatusOr<v1::ClusterStatus> status = Admin("admin", "")->GetStatus({});
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(status->paused());

  // agent-node1 is a valid cluster certificate, but not an admin.
  absl::Status by_agent_cert = Admin("agent", "")->GetStatus({}).status();
  EXPECT_EQ(by_agent_cert.code(), absl::StatusCode::kPermissionDenied) << by_agent_cert;
  EXPECT_THAT(by_agent_cert.message(), HasSubstr("agent-node1"));
  EXPECT_EQ(coordinator_->admin_auth().counters().cn_not_allowed, 1);

  // The token works from any verified client.
  EXPECT_TRUE(Admin("agent", kToken)->GetStatus({}).ok());
  EXPECT_EQ(Admin("agent", "wrong")->GetStatus({}).status().code(),
            absl::StatusCode::kPermissionDenied);
}

TEST_F(SecurityTest, HealthStaysOpenBehindTheHandshake) {
  StartCoordinator(Mtls());
  auto health = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(coordinator_->address(), Creds("agent")));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  grpc::health::v1::HealthCheckResponse response;
  grpc::Status status = health->Check(&context, grpc::health::v1::HealthCheckRequest(), &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
}

TEST_F(SecurityTest, PlaintextHealthPortServesHealthAndNothingElse) {
  coordinator_ = std::make_unique<InProcessCoordinator>(testing::InProcessCoordinatorOptions{
      .store_path = dir_ + "/c.db", .security = Mtls(), .health_port = true});
  ASSERT_TRUE(coordinator_->Start().ok());
  auto channel =
      grpc::CreateChannel(coordinator_->health_address(), grpc::InsecureChannelCredentials());
  // A probe without any certificate gets SERVING...
  auto health = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  grpc::health::v1::HealthCheckResponse response;
  grpc::Status status = health->Check(&context, grpc::health::v1::HealthCheckRequest(), &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  // ...but neither the admin API nor the agents' service is there, even with the token.
  auto admin = ctl::NewGrpcAdminClient(
      ctl::AdminClientOptions{.address = coordinator_->health_address(),
                              .deadline = absl::Seconds(5),
                              .credentials = grpc::InsecureChannelCredentials(),
                              .token = kToken});
  EXPECT_EQ(admin->GetStatus({}).status().code(), absl::StatusCode::kUnimplemented);
  auto stub = v1::AgentService::NewStub(channel);
  grpc::ClientContext session_context;
  session_context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  auto stream = stub->Session(&session_context);
  stream->WritesDone();
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::UNIMPLEMENTED);
  // The main port still demands a client certificate.
  EXPECT_EQ(RawAgentSession("plaintext").error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(SecurityTest, TokenAuthWorksOnPlaintextLoopback) {
  StartCoordinator({.admin_token_file = *token_file_});
  EXPECT_EQ(Admin("plaintext", "")->GetStatus({}).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(Admin("plaintext", kToken)->GetStatus({}).ok());
}

}  // namespace
}  // namespace ballast
