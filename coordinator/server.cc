#include "coordinator/server.h"

#include <arpa/inet.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/support/server_interceptor.h>
#include <netinet/in.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/keepalive.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace ballast::coordinator {
namespace {

// The host of "host:port", "[v6]:port" or a bare host.
absl::string_view HostOf(absl::string_view address) {
  if (absl::StartsWith(address, "[")) {
    const size_t close = address.find(']');
    return close == absl::string_view::npos ? address : address.substr(1, close - 1);
  }
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos) return address;
  // More than one colon without brackets: a bare IPv6 address, no port.
  if (address.find(':') != colon) return address;
  return address.substr(0, colon);
}

// gRPC answers a request body that does not parse as the method's message with INTERNAL
// and an empty message, which reads as a server fault. Our handlers never return an empty
// INTERNAL, so that status is the parse failure: say so, as the client's error.
class UnparsableRequestInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit UnparsableRequestInterceptor(std::string method) : method_(std::move(method)) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status status = methods->GetSendStatus();
      if (status.error_code() == grpc::StatusCode::INTERNAL && status.error_message().empty()) {
        methods->ModifySendStatus(grpc::Status(
            grpc::StatusCode::INVALID_ARGUMENT,
            absl::StrCat("the request body does not parse as the request message of ", method_)));
      }
    }
    methods->Proceed();
  }

 private:
  const std::string method_;
};

class UnparsableRequestInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new UnparsableRequestInterceptor(info->method());
  }
};

// The token in the file a flag names ('' when the flag is unset); errors name the flag.
absl::StatusOr<std::string> ReadTokenFlag(absl::string_view flag, const std::string& path) {
  if (path.empty()) return std::string();
  absl::StatusOr<std::string> token = ReadBearerTokenFile(path);
  if (!token.ok()) {
    return absl::Status(token.status().code(), absl::StrCat(flag, ": ", token.status().message()));
  }
  return token;
}

}  // namespace

bool IsLoopbackAddress(absl::string_view address) {
  if (absl::StartsWith(address, "unix:") || absl::StartsWith(address, "unix-abstract:")) {
    return true;  // only processes on this host, and the file's permissions, reach it
  }
  const std::string host(HostOf(address));
  if (absl::EqualsIgnoreCase(host, "localhost")) return true;
  in_addr v4;
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6;
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  // Wildcards ("", 0.0.0.0 and :: fall through above as non-loopback) and names: a name
  // may resolve to any interface, so it counts as reachable from the network.
  return false;
}

absl::Status ValidateServerSecurity(const std::string& address,
                                    const ServerSecurityOptions& security) {
  if (!security.admin_allowed_cns.empty() && security.tls.ca.empty()) {
    return absl::FailedPreconditionError(
        "--admin_allowed_cns needs --tls_client_ca: a client certificate's CN is only "
        "trusted once mTLS has verified the certificate");
  }
  const bool authorised = !security.admin_token_file.empty() || !security.admin_allowed_cns.empty();
  const bool loopback = IsLoopbackAddress(address);
  if (!authorised) {
    if (loopback) {
      BALLAST_LOG(WARNING) << "the admin API on " << address
                           << " is open to every local user: set --admin_token_file or "
                              "--admin_allowed_cns to require authorisation";
    } else if (security.allow_insecure_admin) {
      BALLAST_LOG(WARNING) << "the admin API on " << address
                           << " is open to anyone who can reach it (--allow_insecure_admin)";
    } else {
      return absl::FailedPreconditionError(absl::StrCat(
          "refusing to serve the admin API on non-loopback address ", address,
          " without authorisation: set --admin_token_file and/or --admin_allowed_cns (with "
          "--tls_client_ca), or pass --allow_insecure_admin to serve it open"));
    }
  }
  if (!security.admin_token_file.empty() && security.tls.cert.empty() && !loopback) {
    BALLAST_LOG(WARNING) << "the admin token travels in clear text to " << address
                         << ": set --tls_cert and --tls_key";
  }
  const bool agents_authenticated = !security.tls.ca.empty() || !security.agent_token_file.empty();
  if (!agents_authenticated && !loopback) {
    if (!security.allow_insecure_agents) {
      return absl::FailedPreconditionError(absl::StrCat(
          "refusing to serve agents on non-loopback address ", address,
          " without authenticating them (anyone reaching the port could register workers and "
          "steer plans): set --tls_client_ca (mTLS) or --agent_token_file, or pass "
          "--allow_insecure_agents"));
    }
    BALLAST_LOG(WARNING) << "agents on " << address
                         << " are not authenticated (--allow_insecure_agents)";
  }
  if (!security.agent_token_file.empty() && security.tls.cert.empty() && !loopback) {
    BALLAST_LOG(WARNING) << "the agent token travels in clear text to " << address
                         << ": set --tls_cert and --tls_key";
  }
  return absl::OkStatus();
}

absl::StatusOr<RunningServer> StartServer(const ServerOptions& options,
                                          AgentServiceImpl* agent_service,
                                          AdminServiceImpl* admin_service) {
  const ServerSecurityOptions& security = options.security;
  BALLAST_RETURN_IF_ERROR(ValidateServerSecurity(options.address, security));
  AdminAuthOptions admin_auth{.allowed_cns = security.admin_allowed_cns};
  BALLAST_ASSIGN_OR_RETURN(admin_auth.token,
                           ReadTokenFlag("--admin_token_file", security.admin_token_file));
  AdminAuthOptions agent_auth{.api = "agent"};
  BALLAST_ASSIGN_OR_RETURN(agent_auth.token,
                           ReadTokenFlag("--agent_token_file", security.agent_token_file));
  BALLAST_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                           ServerCredentialsFromFiles(security.tls));

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  RunningServer running;
  running.admin_auth = std::make_shared<const AdminAuthorizer>(admin_auth);
  admin_service->set_authorizer(running.admin_auth);
  running.agent_auth = std::make_shared<const AdminAuthorizer>(agent_auth);
  agent_service->set_authorizer(running.agent_auth);
  builder.AddListeningPort(options.address, credentials, &running.port);
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  // Agents' streams live for days: answer their keepalive pings, even between messages.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             absl::ToInt64Milliseconds(kMinKeepaliveInterval));
  builder.RegisterService(agent_service);
  builder.RegisterService(admin_service);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(std::make_unique<UnparsableRequestInterceptorFactory>());
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  running.server = builder.BuildAndStart();
  if (running.server == nullptr || running.port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.address));
  }
  if (!options.health_address.empty()) {
    // No service registered: the server carries only the default health service (and
    // reflection, which lists just that), so the plaintext port reveals nothing else.
    grpc::ServerBuilder health_builder;
    health_builder.AddListeningPort(options.health_address, grpc::InsecureServerCredentials(),
                                    &running.health_port);
    running.health_server = health_builder.BuildAndStart();
    if (running.health_server == nullptr || running.health_port == 0) {
      running.server->Shutdown();
      return absl::UnavailableError(
          absl::StrCat("--health_listen: cannot listen on ", options.health_address));
    }
  }
  return running;
}

}  // namespace ballast::coordinator
