// The coordinator's gRPC server, built the same way for the binary and for tests:
// AgentService + Admin, grpc.health.v1, server reflection, keepalive for agents' long-lived
// streams, a bound on message size, and the transport and admin security below.
//
// Security (docs: README "Security"):
//   - TLS from the server's certificate and key; with a client CA, mTLS: every peer on
//     the port (agents, ballastctl, health checkers) must present a certificate that CA
//     signed, so agents are authenticated by the handshake itself.
//   - Admin calls are authorised by a bearer token and/or allowed client-certificate CNs
//     (admin_auth.h). Health and reflection stay open to anyone who completes the
//     handshake.
//   - An admin API without authorisation is only served on loopback, unless
//     allow_insecure_admin says so explicitly.
//   - Agents are authenticated by mTLS or by an agent token (a bearer token like the
//     admin one, checked at the start of every session): workers' timings steer plans,
//     so an unauthenticated AgentService is only served on loopback, unless
//     allow_insecure_agents says so explicitly.
#ifndef BALLAST_COORDINATOR_SERVER_H_
#define BALLAST_COORDINATOR_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tls.h"
#include "coordinator/admin_auth.h"
#include "coordinator/admin_service.h"
#include "coordinator/agent_service.h"

namespace ballast::coordinator {

// Files are read when the server starts; every field maps to one coordinator flag.
struct ServerSecurityOptions {
  TlsFiles tls;                                // --tls_cert, --tls_key, --tls_client_ca (ca)
  std::string admin_token_file;                // --admin_token_file
  std::vector<std::string> admin_allowed_cns;  // --admin_allowed_cns (needs tls.ca)
  bool allow_insecure_admin = false;           // --allow_insecure_admin
  std::string agent_token_file;                // --agent_token_file
  bool allow_insecure_agents = false;          // --allow_insecure_agents
};

struct ServerOptions {
  std::string address = "127.0.0.1:7070";  // port 0 picks a free one
  // A second, plaintext port serving only grpc.health.v1 ('' = none): for probes that
  // cannot present a client certificate (the kubelet's gRPC probe) when `address` is
  // mTLS. It answers for this process only and exposes nothing else.
  std::string health_address;
  // Every request larger is refused (RESOURCE_EXHAUSTED) before it is parsed: with the
  // shape limits (CoordinatorOptions), what one agent's hello can cost is bounded.
  int max_message_bytes = 4 << 20;
  ServerSecurityOptions security;
};

struct RunningServer {
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  // The admin service's authorizer, for its denial counters (metrics).
  std::shared_ptr<const AdminAuthorizer> admin_auth;
  // The agent service's (agent token); enabled() false under mTLS or when open.
  std::shared_ptr<const AdminAuthorizer> agent_auth;
  // Set when options.health_address is.
  std::unique_ptr<grpc::Server> health_server;
  int health_port = 0;
};

// True for addresses only this host can reach: 127.0.0.0/8, ::1, "localhost", and unix:
// sockets. Wildcards (0.0.0.0, [::], an empty host) and every other host are not.
bool IsLoopbackAddress(absl::string_view address);

// The checks StartServer makes before reading any file: admin_allowed_cns needs a
// client CA (a CN is only proof once the handshake verified the certificate), an admin
// API without authorisation needs a loopback address or allow_insecure_admin, and an
// AgentService without mTLS or an agent token needs a loopback address or
// allow_insecure_agents. FAILED_PRECONDITION naming the flags otherwise. Logs a warning
// for an open admin API on loopback, and for a token that would travel in clear text
// beyond it.
absl::Status ValidateServerSecurity(const std::string& address,
                                    const ServerSecurityOptions& security);

// Reads the certificate and token files, validates, installs the authorizers into
// `admin_service` and `agent_service`, and starts serving. Errors name the file or the flag at
// fault.
absl::StatusOr<RunningServer> StartServer(const ServerOptions& options,
                                          AgentServiceImpl* agent_service,
                                          AdminServiceImpl* admin_service);

}  // namespace ballast::coordinator

#endif  // BALLAST_COORDINATOR_SERVER_H_
