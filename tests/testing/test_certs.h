// Certificates for TLS tests, made at test time by make_test_certs.sh (openssl CLI), so no
// key material is checked in and nothing expires in the repository.
//
//   absl::StatusOr<TestCerts> certs = MakeTestCerts(dir);
//   options.security.tls = certs->Server(/*mtls=*/true);
//   auto creds = ChannelCredentialsFromFiles(certs->Client("agent"));
//
// Names (see the script): "ca"; "server" (SAN IP:127.0.0.1, DNS:localhost); clients
// "admin" (CN ballastctl-admin), "agent" (CN agent-node1), and "rogue" (CN
// ballastctl-admin, signed by "rogue-ca", which the servers do not trust).
#ifndef BALLAST_TESTS_TESTING_TEST_CERTS_H_
#define BALLAST_TESTS_TESTING_TEST_CERTS_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/tls.h"

namespace ballast::testing {

inline constexpr char kAdminCn[] = "ballastctl-admin";
inline constexpr char kAgentCn[] = "agent-node1";

struct TestCerts {
  std::string dir;

  std::string Cert(const std::string& name) const { return dir + "/" + name + ".crt"; }
  std::string Key(const std::string& name) const { return dir + "/" + name + ".key"; }
  // The coordinator's files; with mtls, clients must present a certificate "ca" signed.
  TlsFiles Server(bool mtls) const {
    return {.cert = Cert("server"), .key = Key("server"), .ca = mtls ? Cert("ca") : ""};
  }
  // A client trusting "ca", presenting `name`'s certificate ("" presents none).
  TlsFiles Client(const std::string& name) const {
    if (name.empty()) return {.ca = Cert("ca")};
    return {.cert = Cert(name), .key = Key(name), .ca = Cert("ca")};
  }
};

// Writes the certificates into `dir` (created if missing).
absl::StatusOr<TestCerts> MakeTestCerts(const std::string& dir);

// Writes `contents` to `path` (a token file, a broken PEM file...).
void WriteFile(const std::string& path, const std::string& contents);

}  // namespace ballast::testing

#endif  // BALLAST_TESTS_TESTING_TEST_CERTS_H_
