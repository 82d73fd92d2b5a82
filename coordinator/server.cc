#include "coordinator/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>

#include "absl/strings/str_cat.h"

namespace ballast::coordinator {

absl::StatusOr<RunningServer> StartServer(const ServerOptions& options,
                                          AgentServiceImpl* agent_service,
                                          AdminServiceImpl* admin_service) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  RunningServer running;
  builder.AddListeningPort(options.address, grpc::InsecureServerCredentials(), &running.port);
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  // Agents' streams live for days: answer their keepalive pings, even between messages.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
  builder.RegisterService(agent_service);
  builder.RegisterService(admin_service);
  running.server = builder.BuildAndStart();
  if (running.server == nullptr || running.port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.address));
  }
  return running;
}

}  // namespace ballast::coordinator
