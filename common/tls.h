// TLS and bearer tokens for Ballast's gRPC links, from files named on the command line.
// Every binary reads its certificates and tokens the same way, so a missing, unreadable, empty or
// mismatched file is reported once, at start, naming the file, instead of surfacing later as an
// opaque handshake failure.
//
//   TlsFiles files{.cert = "/etc/ballast/coord.crt", .key = "/etc/ballast/coord.key",
//                  .ca = "/etc/ballast/ca.crt"};           // ca on a server: mTLS
//   BALLAST_ASSIGN_OR_RETURN(auto creds, ServerCredentialsFromFiles(files));
//   builder.AddListeningPort(address, creds);
//
// With no file given, both factories return insecure credentials: loopback development
// setups keep working without certificates.
#ifndef BALLAST_COMMON_TLS_H_
#define BALLAST_COMMON_TLS_H_

#include <memory>
#include <string>

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ballast {

// Paths of PEM files; an empty path means "not given".
struct TlsFiles {
  std::string cert;  // this side's certificate (chain), leaf first
  std::string key;   // its private key (unencrypted)
  // Server: the CA that signs client certificates; given, clients must present a
  // certificate it verifies (mTLS). Client: the CA that signs the server's certificate;
  // empty means the system's roots.
  std::string ca;

  bool any() const { return !cert.empty() || !key.empty() || !ca.empty(); }
};

// The whole of a file, for secrets and PEM files. `what` names the file's role in errors
// ("TLS certificate", "admin token"). NOT_FOUND when it does not exist, PERMISSION_DENIED
// when it cannot be read, INVALID_ARGUMENT when it is empty or not a regular file.
absl::StatusOr<std::string> ReadSecretFile(const std::string& path, absl::string_view what);

// PEM files, parsed with OpenSSL so that a wrong file fails here, naming it:
// INVALID_ARGUMENT when it holds no certificate (or no unencrypted private key), plus the
// errors of ReadSecretFile. A certificate file may hold a chain or a CA bundle.
absl::StatusOr<std::string> ReadCertificatePem(const std::string& path, absl::string_view what);
absl::StatusOr<std::string> ReadPrivateKeyPem(const std::string& path, absl::string_view what);

// A bearer token (coordinator --admin_token_file, ballastctl --token_file): the file's
// content with trailing whitespace (the newline editors add) removed. The errors of
// ReadSecretFile, and INVALID_ARGUMENT when only whitespace is left, or when the token holds
// whitespace or characters that cannot travel in gRPC metadata.
absl::StatusOr<std::string> ReadBearerTokenFile(const std::string& path);

// Server credentials: insecure when no file is given; TLS with cert + key; mTLS
// (GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY) when ca is given too.
// INVALID_ARGUMENT when cert or key is missing, or the key does not match the cert.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFromFiles(
    const TlsFiles& files);

// Channel credentials: insecure when no file is given; otherwise TLS verifying the server
// against ca (or the system roots), presenting cert + key when given (for mTLS).
// INVALID_ARGUMENT when only one of cert and key is given, or they do not match.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFromFiles(
    const TlsFiles& files);

}  // namespace ballast

#endif  // BALLAST_COMMON_TLS_H_
