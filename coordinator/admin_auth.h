// Who may call ballast.v1.Admin. Every admin handler starts with
//
//   if (grpc::Status s = authorizer.Authorize(*context, "SetPolicy"); !s.ok()) return s;
//
// A call is allowed when it carries `authorization: Bearer <token>` metadata with the
// configured token, or when its TLS peer presented a verified client certificate whose
// common name is in the allowed list. Otherwise:
//   - UNAUTHENTICATED: no credentials at all, or an authorization header that is not
//     "Bearer <token>";
//   - PERMISSION_DENIED: a wrong token, or a verified certificate whose CN is not allowed.
// Each denial is counted by reason (ballast_coordinator_admin_requests_denied_total{reason}) and
// logged with the method, the peer and its certificate CN; the token is never logged.
//
// The token is kept only as its SHA-256 digest, and compared digest to digest with
// CRYPTO_memcmp: the time taken depends on neither the token's content nor its length.
//
// A CN is only evidence when the server verified the certificate, i.e. runs mTLS with
// GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY; ValidateServerSecurity
// (server.h) refuses allowed CNs without a client CA.
#ifndef BALLAST_COORDINATOR_ADMIN_AUTH_H_
#define BALLAST_COORDINATOR_ADMIN_AUTH_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/server_context.h>
#include <grpcpp/support/status.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace ballast::coordinator {

struct AdminAuthOptions {
  std::string token;                     // the bearer token itself; empty: no token auth
  std::vector<std::string> allowed_cns;  // client-certificate CNs allowed (mTLS only)
  // What is guarded, for messages and logs: "admin", or "agent" for the AgentService's
  // token (--agent_token_file), which takes the same Bearer metadata.
  std::string api = "admin";

  bool enabled() const { return !token.empty() || !allowed_cns.empty(); }
};

// Admin calls refused, by reason (the label of the denial metric).
struct AdminAuthCounters {
  int64_t no_credentials = 0;  // UNAUTHENTICATED: neither a token nor an allowed cert
  int64_t malformed = 0;       // UNAUTHENTICATED: authorization is not "Bearer <token>"
  int64_t bad_token = 0;       // PERMISSION_DENIED
  int64_t cn_not_allowed = 0;  // PERMISSION_DENIED
};

class AdminAuthorizer {
 public:
  // With options that enable nothing, every call is allowed (loopback development).
  explicit AdminAuthorizer(const AdminAuthOptions& options);
  AdminAuthorizer(const AdminAuthorizer&) = delete;
  AdminAuthorizer& operator=(const AdminAuthorizer&) = delete;

  bool enabled() const { return token_set_ || !allowed_cns_.empty(); }

  // Reads the call's metadata and its TLS peer.
  grpc::Status Authorize(const grpc::ServerContext& context, absl::string_view method) const;

  // The decision itself, apart from gRPC. `authorization` is the metadata value, absent
  // when the call has none; `verified_cns` are the CNs of a certificate the TLS handshake
  // verified (empty without mTLS); `method` and `peer` are only logged.
  absl::Status Check(std::optional<absl::string_view> authorization,
                     const std::vector<std::string>& verified_cns, absl::string_view method,
                     absl::string_view peer) const;

  AdminAuthCounters counters() const;

 private:
  using Digest = std::array<unsigned char, 32>;
  static Digest Sha256(absl::string_view data);
  absl::Status Deny(absl::Status status, std::atomic<int64_t>& counter, absl::string_view reason,
                    absl::string_view method, absl::string_view peer,
                    const std::vector<std::string>& verified_cns) const;

  std::string api_;
  bool token_set_ = false;
  Digest token_digest_{};
  std::vector<std::string> allowed_cns_;
  // Counting a denial does not change what the authorizer decides.
  mutable std::atomic<int64_t> no_credentials_{0};
  mutable std::atomic<int64_t> malformed_{0};
  mutable std::atomic<int64_t> bad_token_{0};
  mutable std::atomic<int64_t> cn_not_allowed_{0};
};

}  // namespace ballast::coordinator

#endif  // BALLAST_COORDINATOR_ADMIN_AUTH_H_
