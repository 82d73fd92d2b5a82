// ballast-agent: one per node. Serves the node's training processes on a Unix socket,
// batches their timings to the coordinator over one stream, relays plans back.
//
//   ballast-agent --coordinator=coord.example:7070 --socket=/run/ballast/agent.sock
//       --tls_ca=ca.crt --tls_cert=node1.crt --tls_key=node1.key
#include <grpcpp/grpcpp.h>
#include <prometheus/registry.h>
#include <unistd.h>

#include <filesystem>
#include <memory>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "agent/agent_state.h"
#include "agent/coordinator_session.h"
#include "agent/metrics.h"
#include "agent/worker_service.h"
#include "common/backoff.h"
#include "common/daemon.h"
#include "common/keepalive.h"
#include "common/logging.h"
#include "common/protobuf_log.h"
#include "common/tls.h"

ABSL_FLAG(std::string, coordinator, "127.0.0.1:7070", "Coordinator address (host:port)");
ABSL_FLAG(std::string, socket, "/run/ballast/agent.sock", "Unix socket for local workers");
ABSL_FLAG(std::string, node, "", "This node's name (default: the hostname)");
ABSL_FLAG(std::string, agent_id, "", "This agent's id (default: the node name)");
ABSL_FLAG(absl::Duration, batch_period, absl::Milliseconds(100),
          "How often queued reports are sent to the coordinator");
ABSL_FLAG(int32_t, report_queue, 65536, "Reports held while the coordinator is away");
ABSL_FLAG(absl::Duration, reconnect_initial_backoff, absl::Milliseconds(100),
          "First wait before reconnecting to the coordinator; doubles (jittered) per failed "
          "attempt, and starts over only once the coordinator has answered the hello");
ABSL_FLAG(absl::Duration, reconnect_max_backoff, absl::Seconds(10),
          "Longest wait between reconnect attempts: the agent is back within this long of "
          "the coordinator becoming reachable");
ABSL_FLAG(absl::Duration, coordinator_keepalive, absl::Seconds(10),
          "HTTP/2 keepalive ping interval (and ping timeout) on the coordinator stream: a "
          "silently cut link is noticed within twice this; the coordinator refuses pings "
          "more often than every 5s");
ABSL_FLAG(std::string, metrics, "127.0.0.1:9465", "Prometheus /metrics address ('' = off)");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA that signs the coordinator's certificate; set (or with --tls_cert), the "
          "agent connects over TLS");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM client certificate presented to the coordinator (mTLS); needs --tls_key");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, token_file, "",
          "File holding the agent token the coordinator asks for (its --agent_token_file)");

namespace {

std::string Hostname() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  return name;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("ballast-agent: the per-node Ballast agent");
  absl::ParseCommandLine(argc, argv);
  ballast::RateLimitProtobufLogs();  // before any server or channel parses a message
  const std::string node =
      absl::GetFlag(FLAGS_node).empty() ? Hostname() : absl::GetFlag(FLAGS_node);
  const std::string agent_id =
      absl::GetFlag(FLAGS_agent_id).empty() ? node : absl::GetFlag(FLAGS_agent_id);
  const std::string socket_path = absl::GetFlag(FLAGS_socket);
  if (absl::GetFlag(FLAGS_report_queue) < 1) {
    std::fprintf(stderr, "--report_queue must be >= 1\n");
    return 2;
  }
  if (absl::GetFlag(FLAGS_batch_period) <= absl::ZeroDuration()) {
    std::fprintf(stderr, "--batch_period must be positive\n");
    return 2;
  }
  if (absl::Status s = ballast::ValidateBackoffOptions(
          {.initial = absl::GetFlag(FLAGS_reconnect_initial_backoff),
           .max = absl::GetFlag(FLAGS_reconnect_max_backoff)});
      !s.ok()) {
    std::fprintf(stderr, "--reconnect_initial_backoff / --reconnect_max_backoff: %s\n",
                 std::string(s.message()).c_str());
    return 2;
  }
  if (absl::GetFlag(FLAGS_coordinator_keepalive) < ballast::kMinKeepaliveInterval) {
    std::fprintf(stderr,
                 "--coordinator_keepalive must be at least %s: the coordinator refuses pings "
                 "more often\n",
                 absl::FormatDuration(ballast::kMinKeepaliveInterval).c_str());
    return 2;
  }

  // Certificates first: a bad file should stop the agent before it takes the socket.
  auto credentials = ballast::ChannelCredentialsFromFiles({.cert = absl::GetFlag(FLAGS_tls_cert),
                                                           .key = absl::GetFlag(FLAGS_tls_key),
                                                           .ca = absl::GetFlag(FLAGS_tls_ca)});
  if (!credentials.ok()) {
    BALLAST_LOG(ERROR) << credentials.status().message();
    return 1;
  }
  std::string token;
  if (!absl::GetFlag(FLAGS_token_file).empty()) {
    absl::StatusOr<std::string> read =
        ballast::ReadBearerTokenFile(absl::GetFlag(FLAGS_token_file));
    if (!read.ok()) {
      BALLAST_LOG(ERROR) << "--token_file: " << read.status().message();
      return 1;
    }
    token = *std::move(read);
  }

  ballast::agent::AgentState state(absl::GetFlag(FLAGS_report_queue));
  ballast::agent::WorkerService worker_service(&state);
  auto server = ballast::agent::StartWorkerServer(socket_path, &worker_service);
  if (!server.ok()) {
    BALLAST_LOG(ERROR) << server.status().message();
    return 1;
  }

  ballast::agent::CoordinatorSessionOptions session_options;
  session_options.coordinator_address = absl::GetFlag(FLAGS_coordinator);
  session_options.credentials = *credentials;
  session_options.token = token;
  session_options.agent_id = agent_id;
  session_options.node = node;
  session_options.batch_period = absl::GetFlag(FLAGS_batch_period);
  session_options.initial_backoff = absl::GetFlag(FLAGS_reconnect_initial_backoff);
  session_options.max_backoff = absl::GetFlag(FLAGS_reconnect_max_backoff);
  session_options.keepalive = absl::GetFlag(FLAGS_coordinator_keepalive);
  auto session = std::make_unique<ballast::agent::CoordinatorSession>(session_options, &state);
  BALLAST_LOG(INFO) << "ballast-agent " << agent_id << " serving workers on unix:" << socket_path
                    << ", coordinator " << session_options.coordinator_address
                    << (absl::GetFlag(FLAGS_tls_ca).empty() && absl::GetFlag(FLAGS_tls_cert).empty()
                            ? " (plaintext)"
                            : " (TLS)");

  auto registry = std::make_shared<prometheus::Registry>();
  ballast::agent::AgentMetrics metrics(*registry, node, "0.1.0");
  auto exposer = ballast::ServeMetrics(absl::GetFlag(FLAGS_metrics), registry);
  if (!exposer.ok()) {
    BALLAST_LOG(ERROR) << exposer.status().message();
    return 1;
  }

  absl::Notification& shutdown = ballast::ShutdownOnSignal();
  while (!shutdown.WaitForNotificationWithTimeout(absl::Milliseconds(500))) {
    metrics.Update(state.stats(), session->connected(), session->connects());
  }
  BALLAST_LOG(INFO) << "ballast-agent " << agent_id << " shutting down";
  session.reset();
  (*server)->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  std::error_code ec;
  std::filesystem::remove(socket_path, ec);
  return 0;
}
