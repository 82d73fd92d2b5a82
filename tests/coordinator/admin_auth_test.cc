// AdminAuthorizer's decision apart from gRPC: a bearer token or an allowed certificate CN
// lets a call through; no credentials is UNAUTHENTICATED; wrong ones PERMISSION_DENIED;
// every denial is counted by reason. The same paths over real TLS are in
// tests/integration/security_test.cc.
#include "coordinator/admin_auth.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

namespace ballast::coordinator {
namespace {

using ::testing::HasSubstr;

constexpr char kToken[] = "0123456789abcdef";

absl::StatusCode Code(const AdminAuthorizer& auth, std::optional<absl::string_view> header,
                      std::vector<std::string> cns = {}) {
  return auth.Check(header, cns, "GetStatus", "ipv4:127.0.0.1:1").code();
}

TEST(AdminAuthorizerTest, WithNothingConfiguredEveryCallIsAllowed) {
  AdminAuthorizer auth(AdminAuthOptions{});
  EXPECT_FALSE(auth.enabled());
  EXPECT_EQ(Code(auth, std::nullopt), absl::StatusCode::kOk);
  EXPECT_EQ(Code(auth, "Bearer whatever"), absl::StatusCode::kOk);
}

TEST(AdminAuthorizerTest, BearerToken) {
  AdminAuthorizer auth(AdminAuthOptions{.token = kToken});
  EXPECT_TRUE(auth.enabled());
  EXPECT_EQ(Code(auth, absl::StrCat("Bearer ", kToken)), absl::StatusCode::kOk);
  EXPECT_EQ(Code(auth, absl::StrCat("bearer ", kToken)), absl::StatusCode::kOk);  // RFC 6750
  EXPECT_EQ(Code(auth, absl::StrCat("Bearer  ", kToken, " ")), absl::StatusCode::kOk);

  // Missing or malformed: the caller has not authenticated.
  absl::Status none = auth.Check(std::nullopt, {}, "GetStatus", "peer");
  EXPECT_EQ(none.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(none.message(), HasSubstr("Bearer <token>"));
  EXPECT_EQ(Code(auth, kToken), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(Code(auth, absl::StrCat("Basic ", kToken)), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(Code(auth, "Bearer "), absl::StatusCode::kUnauthenticated);

  // Wrong: same length, a prefix, longer, empty-ish.
  EXPECT_EQ(Code(auth, "Bearer 0123456789abcdeF"), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Code(auth, "Bearer 0123"), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Code(auth, absl::StrCat("Bearer ", kToken, "0")), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Code(auth, "Bearer x"), absl::StatusCode::kPermissionDenied);

  const AdminAuthCounters c = auth.counters();
  EXPECT_EQ(c.no_credentials, 1);
  EXPECT_EQ(c.malformed, 3);
  EXPECT_EQ(c.bad_token, 4);
  EXPECT_EQ(c.cn_not_allowed, 0);
}

TEST(AdminAuthorizerTest, AllowedCommonNames) {
  AdminAuthorizer auth(AdminAuthOptions{.allowed_cns = {"ballastctl-admin", "ops"}});
  EXPECT_TRUE(auth.enabled());
  EXPECT_EQ(Code(auth, std::nullopt, {"ballastctl-admin"}), absl::StatusCode::kOk);
  EXPECT_EQ(Code(auth, std::nullopt, {"ops"}), absl::StatusCode::kOk);

  absl::Status other = auth.Check(std::nullopt, {"agent-node1"}, "SetPolicy", "peer");
  EXPECT_EQ(other.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(other.message(), HasSubstr("'agent-node1'"));
  // No certificate at all (plaintext or TLS without mTLS): not authenticated.
  EXPECT_EQ(Code(auth, std::nullopt, {}), absl::StatusCode::kUnauthenticated);
  // No token is configured, so any token is wrong.
  EXPECT_EQ(Code(auth, "Bearer guess", {"agent-node1"}), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(auth.counters().cn_not_allowed, 1);
  EXPECT_EQ(auth.counters().bad_token, 1);
}

TEST(AdminAuthorizerTest, EitherCredentialIsEnough) {
  AdminAuthorizer auth(AdminAuthOptions{.token = kToken, .allowed_cns = {"ballastctl-admin"}});
  EXPECT_EQ(Code(auth, absl::StrCat("Bearer ", kToken), {"agent-node1"}), absl::StatusCode::kOk);
  EXPECT_EQ(Code(auth, std::nullopt, {"ballastctl-admin"}), absl::StatusCode::kOk);
  EXPECT_EQ(Code(auth, "Bearer wrong", {"agent-node1"}), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Code(auth, std::nullopt, {"agent-node1"}), absl::StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace ballast::coordinator
