// The coordinator server's security checks before it listens: which addresses count as
// loopback, the refusal to serve an unauthorised admin API beyond loopback, and start-up
// errors for unusable token and certificate files (each naming the flag or the file).
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

  EXPECT_TRUE(ValidateServerSecurity("0.0.0.0:7070", {.allow_insecure_admin = true}).ok());
  EXPECT_TRUE(ValidateServerSecurity("0.0.0.0:7070", {.admin_token_file = "/t"}).ok());
  EXPECT_TRUE(ValidateServerSecurity("0.0.0.0:7070", {.tls = {.cert = "c", .key = "k", .ca = "ca"},
                                                      .admin_allowed_cns = {"ballastctl-admin"}})
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

  EXPECT_TRUE(Start({.host = "0.0.0.0", .security = {.allow_insecure_admin = true}}).ok());
  EXPECT_FALSE(coordinator_->admin_auth().enabled());
  testing::WriteFile(dir_ + "/token", "t0ken\n");
  EXPECT_TRUE(Start({.host = "0.0.0.0", .security = {.admin_token_file = dir_ + "/token"}}).ok());
  EXPECT_TRUE(coordinator_->admin_auth().enabled());
}

TEST_F(StartServerTest, TokenFileErrorsNameTheFile) {
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
