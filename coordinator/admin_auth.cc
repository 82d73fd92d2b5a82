#include "coordinator/admin_auth.h"

#include <openssl/crypto.h>
#include <grpc/grpc_security_constants.h>
#include <openssl/evp.h>

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/grpc_status.h"
#include "common/logging.h"

namespace ballast::coordinator {
namespace {

constexpr char kAuthorizationKey[] = "authorization";
constexpr absl::string_view kBearer = "bearer";

// The token of "Bearer <token>" (RFC 6750: the scheme is case-insensitive); nullopt when
// the value has another shape.
std::optional<absl::string_view> BearerToken(absl::string_view value) {
  value = absl::StripAsciiWhitespace(value);
  if (value.size() <= kBearer.size() ||
      !absl::EqualsIgnoreCase(value.substr(0, kBearer.size()), kBearer) ||
      value[kBearer.size()] != ' ') {
    return std::nullopt;
  }
  absl::string_view token = absl::StripLeadingAsciiWhitespace(value.substr(kBearer.size()));
  if (token.empty()) return std::nullopt;
  return token;
}

// CNs of the peer's certificate, when the TLS handshake verified one. Without TLS the
// auth context carries no x509 properties at all.
std::vector<std::string> VerifiedCommonNames(const grpc::ServerContext& context) {
  std::vector<std::string> cns;
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) return cns;
  const std::vector<grpc::string_ref> security =
      auth->FindPropertyValues(GRPC_TRANSPORT_SECURITY_TYPE_PROPERTY_NAME);
  if (security.empty() || grpc::string_ref(GRPC_SSL_TRANSPORT_SECURITY_TYPE) != security[0]) {
    return cns;
  }
  for (const grpc::string_ref& cn : auth->FindPropertyValues(GRPC_X509_CN_PROPERTY_NAME)) {
    cns.emplace_back(cn.data(), cn.size());
  }
  return cns;
}

}  // namespace

AdminAuthorizer::AdminAuthorizer(const AdminAuthOptions& options)
    : api_(options.api), token_set_(!options.token.empty()), allowed_cns_(options.allowed_cns) {
  if (token_set_) token_digest_ = Sha256(options.token);
}

AdminAuthorizer::Digest AdminAuthorizer::Sha256(absl::string_view data) {
  Digest digest{};
  unsigned int size = 0;
  // EVP_Digest with SHA-256 cannot fail short of memory exhaustion; an all-zero digest
  // then matches no real token's digest.
  (void)EVP_Digest(data.data(), data.size(), digest.data(), &size, EVP_sha256(), nullptr);
  return digest;
}

grpc::Status AdminAuthorizer::Authorize(const grpc::ServerContext& context,
                                        absl::string_view method) const {
  if (!enabled()) return grpc::Status::OK;
  std::optional<absl::string_view> authorization;
  const auto& metadata = context.client_metadata();
  if (auto it = metadata.find(kAuthorizationKey); it != metadata.end()) {
    authorization = absl::string_view(it->second.data(), it->second.size());
  }
  return ToGrpcStatus(Check(authorization, VerifiedCommonNames(context), method, context.peer()));
}

absl::Status AdminAuthorizer::Check(std::optional<absl::string_view> authorization,
                                    const std::vector<std::string>& verified_cns,
                                    absl::string_view method, absl::string_view peer) const {
  if (!enabled()) return absl::OkStatus();
  for (const std::string& cn : verified_cns) {
    if (std::find(allowed_cns_.begin(), allowed_cns_.end(), cn) != allowed_cns_.end()) {
      return absl::OkStatus();
    }
  }
  if (authorization.has_value()) {
    std::optional<absl::string_view> token = BearerToken(*authorization);
    if (!token.has_value()) {
      return Deny(absl::UnauthenticatedError("the authorization metadata must be 'Bearer <token>'"),
                  malformed_, "malformed", method, peer, verified_cns);
    }
    // Digests have one length, so the comparison's time says nothing about the token.
    const Digest digest = Sha256(*token);
    if (token_set_ &&
        CRYPTO_memcmp(digest.data(), token_digest_.data(), token_digest_.size()) == 0) {
      return absl::OkStatus();
    }
    return Deny(absl::PermissionDeniedError(absl::StrCat(api_, " token rejected")), bad_token_, "bad_token",
                method, peer, verified_cns);
  }
  if (!allowed_cns_.empty() && !verified_cns.empty()) {
    return Deny(absl::PermissionDeniedError(absl::StrCat("client certificate CN '",
                                                         absl::StrJoin(verified_cns, ","),
                                                         "' may not call the admin API")),
                cn_not_allowed_, "cn_not_allowed", method, peer, verified_cns);
  }
  return Deny(
      absl::UnauthenticatedError(absl::StrCat(
          api_, " calls need a bearer token ('authorization: Bearer <token>' metadata)",
          allowed_cns_.empty() ? "" : " or a client certificate whose CN is allowed")),
      no_credentials_, "no_credentials", method, peer, verified_cns);
}

absl::Status AdminAuthorizer::Deny(absl::Status status, std::atomic<int64_t>& counter,
                                   absl::string_view reason, absl::string_view method,
                                   absl::string_view peer,
                                   const std::vector<std::string>& verified_cns) const {
  counter.fetch_add(1, std::memory_order_relaxed);
  BALLAST_LOG(WARNING) << api_ << " call denied: method=" << method << " peer=" << peer
                       << " cn=" << (verified_cns.empty() ? "-" : absl::StrJoin(verified_cns, ","))
                       << " reason=" << reason;
  return status;
}

AdminAuthCounters AdminAuthorizer::counters() const {
  return AdminAuthCounters{.no_credentials = no_credentials_.load(std::memory_order_relaxed),
                           .malformed = malformed_.load(std::memory_order_relaxed),
                           .bad_token = bad_token_.load(std::memory_order_relaxed),
                           .cn_not_allowed = cn_not_allowed_.load(std::memory_order_relaxed)};
}

}  // namespace ballast::coordinator
