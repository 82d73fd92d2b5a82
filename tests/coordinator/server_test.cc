// The coordinator server's security checks before it listens: which addresses count as
// loopback, the refusal to serve an unauthorised admin API or unauthenticated agents
// beyond loopback, start-up errors for unusable token and certificate files (each naming
// the flag or the file), and the agent token on a real server.
#include "coordinator/server.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "testing/control_plane.h"
#include "testing/test_certs.h"

namespace ballast::coordinator {
namespace {

using ::ballast::testing::InProcessCoordinator;
using ::ballast::testing::InProcessCoordinatorOptions;
using ::testing::HasSubstr;

TEST(IsLoopbackAddressTest, OnlyAddressesThisHostAloneCanReach) {
  for (const char* address :
       {"127.0.0.1:7070", "127.1.2.3:0", "localhost:7070", "LOCALHOST:1", "[::1]:7070",
        "[::ffff:127.0.0.1]:7070", "unix:/run/b.sock", "unix-abstract:ballast"}) {
    EXPECT_TRUE(IsLoopbackAddress(address)) << address;
  }
  for (const char* address :
       {"0.0.0.0:7070", "[::]:7070", ":7070", "10.0.0.5:7070", "coord.example:7070",
        "[2001:db8::1]:7070", "128.0.0.1:7070", "[::ffff:10.0.0.1]:7070", ""}) {
    EXPECT_FALSE(IsLoopbackAddress(address)) << address;
  }
}

TEST(ValidateServerSecurityTest, UnauthorisedAdminApiOnlyOnLoopbackUnlessAllowed) {
  EXPECT_TRUE(ValidateServerSecurity("127.0.0.1:7070", {}).ok());

  absl::Status refused = ValidateServerSecurity("0.0.0.0:7070", {});
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.message(), HasSubstr("0.0.0.0:7070"));
  EXPECT_THAT(refused.message(), HasSubstr("--admin_token_file"));
  EXPECT_THAT(refused.message(), HasSubstr("--allow_insecure_admin"));

  EXPECT_TRUE(ValidateServerSecurity(
                  "0.0.0.0:7070", {.allow_insecure_admin = true, .allow_insecure_agents = true})
                  .ok());
  EXPECT_TRUE(
      ValidateServerSecurity("0.0.0.0:7070", {.admin_token_file = "/t", .agent_token_file = "/a"})
          .ok());
  EXPECT_TRUE(ValidateServerSecurity("0.0.0.0:7070", {.tls = {.cert = "c", .key = "k", .ca = "ca"},
                                                      .admin_allowed_cns = {"ballastctl-admin"}})
                  .ok());
}

TEST(ValidateServerSecurityTest, UnauthenticatedAgentsOnlyOnLoopbackUnlessAllowed) {
  EXPECT_TRUE(ValidateServerSecurity("127.0.0.1:7070", {.admin_token_file = "/t"}).ok());
  // An admin token alone does not authenticate agents.
  absl::Status refused = ValidateServerSecurity("0.0.0.0:7070", {.admin_token_file = "/t"});
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.message(), HasSubstr("refusing to serve agents on non-loopback address"));
  EXPECT_THAT(refused.message(), HasSubstr("--tls_client_ca"));
  EXPECT_THAT(refused.message(), HasSubstr("--agent_token_file"));
  EXPECT_THAT(refused.message(), HasSubstr("--allow_insecure_agents"));
  // TLS without client certificates does not either.
  EXPECT_FALSE(ValidateServerSecurity("10.0.0.5:7070", {.tls = {.cert = "c", .key = "k"},
                                                        .admin_token_file = "/t"})
                   .ok());
  EXPECT_TRUE(ValidateServerSecurity("10.0.0.5:7070", {.tls = {.cert = "c", .key = "k"},
                                                       .admin_token_file = "/t",
                                                       .agent_token_file = "/a"})
                  .ok());
  EXPECT_TRUE(ValidateServerSecurity(
                  "0.0.0.0:7070", {.admin_token_file = "/t", .allow_insecure_agents = true})
                  .ok());
}

TEST(ValidateServerSecurityTest, AllowedCnsNeedAClientCa) {
  absl::Status s = ValidateServerSecurity(
      "127.0.0.1:7070",
      {.tls = {.cert = "c", .key = "k"}, .admin_allowed_cns = {"ballastctl-admin"}});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("--admin_allowed_cns needs --tls_client_ca"));
}

class StartServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(::testing::TempDir(), "/ballast-srv-", ::getpid());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  absl::Status Start(InProcessCoordinatorOptions options) {
    options.store_path = dir_ + "/c.db";
    coordinator_ = std::make_unique<InProcessCoordinator>(options);
    return coordinator_->Start();
  }

  std::string dir_;
  std::unique_ptr<InProcessCoordinator> coordinator_;
};

TEST_F(StartServerTest, RefusesAnOpenAdminApiOnAWildcardAddress) {
  absl::Status s = Start({.host = "0.0.0.0"});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("--allow_insecure_admin"));

  EXPECT_TRUE(Start({.host = "0.0.0.0",
                     .security = {.allow_insecure_admin = true, .allow_insecure_agents = true}})
                  .ok());
  EXPECT_FALSE(coordinator_->admin_auth().enabled());
  testing::WriteFile(dir_ + "/token", "t0ken\n");
  testing::WriteFile(dir_ + "/agent-token", "agent-t0ken\n");
  EXPECT_TRUE(Start({.host = "0.0.0.0",
                     .security = {.admin_token_file = dir_ + "/token",
                                  .agent_token_file = dir_ + "/agent-token"}})
                  .ok());
  EXPECT_TRUE(coordinator_->admin_auth().enabled());
}

// A raw agent session with `authorization` metadata (none when empty): the status the
// server ends it with after a hello, or OK once the worker registered.
grpc::Status AgentSession(const std::string& address, const std::string& authorization,
                          InProcessCoordinator& coordinator) {
  auto stub = v1::AgentService::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  if (!authorization.empty()) context.AddMetadata("authorization", authorization);
  auto stream = stub->Session(&context);
  v1::AgentMessage hello;
  hello.mutable_hello()->set_agent_id("agent-1");
  v1::WorkerIdentity* w = hello.mutable_hello()->add_workers();
  w->set_job("vit");
  w->set_group("tp0");
  w->set_group_size(1);
  w->set_device("node/dev0");
  stream->Write(hello);
  if (testing::WaitFor([&] { return coordinator.coordinator()->attached_workers() == 1; },
                       absl::Seconds(2))) {
    context.TryCancel();
    stream->Finish();
    return grpc::Status::OK;
  }
  stream->WritesDone();
  return stream->Finish();
}

TEST_F(StartServerTest, AgentsWithoutTheAgentTokenAreRefused) {
  testing::WriteFile(dir_ + "/agent-token", "agent-t0ken\n");
  ASSERT_TRUE(Start({.security = {.agent_token_file = dir_ + "/agent-token"}}).ok());
  const std::string address = coordinator_->address();
  grpc::Status none = AgentSession(address, "", *coordinator_);
  EXPECT_EQ(none.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(none.error_message(), HasSubstr("agent calls need a bearer token"));
  grpc::Status wrong = AgentSession(address, "Bearer admin-t0ken", *coordinator_);
  EXPECT_EQ(wrong.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(wrong.error_message(), HasSubstr("agent token rejected"));
  EXPECT_EQ(coordinator_->coordinator()->attached_workers(), 0);  // nothing registered
  EXPECT_TRUE(AgentSession(address, "Bearer agent-t0ken", *coordinator_).ok());

  // The agent library presents it from its options.
  testing::InProcessAgent agent("agent-2", dir_ + "/agent.sock", address, nullptr, "agent-t0ken");
  ASSERT_TRUE(agent.Start().ok());
  EXPECT_TRUE(testing::WaitFor(
      [&] { return coordinator_->coordinator()->connected_agents() == 1; }, absl::Seconds(5)));
}

TEST_F(StartServerTest, TokenFileErrorsNameTheFile) {
  absl::Status agent = Start({.security = {.agent_token_file = dir_ + "/missing"}});
  EXPECT_EQ(agent.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(agent.message(), HasSubstr("--agent_token_file: "));

  absl::Status missing = Start({.security = {.admin_token_file = dir_ + "/missing"}});
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.message(), HasSubstr(dir_ + "/missing"));

  testing::WriteFile(dir_ + "/empty", "");
  absl::Status empty = Start({.security = {.admin_token_file = dir_ + "/empty"}});
  EXPECT_EQ(empty.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(empty.message(), HasSubstr("'" + dir_ + "/empty' is empty"));
}

TEST_F(StartServerTest, CertificateFileErrorsNameTheFile) {
  absl::Status s =
      Start({.security = {.tls = {.cert = dir_ + "/no.crt", .key = dir_ + "/no.key"}}});
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("TLS certificate file '" + dir_ + "/no.crt'"));
}

}  // namespace
}  // namespace ballast::coordinator
