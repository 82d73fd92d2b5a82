#include "testing/control_plane.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/status_macros.h"
#include "coordinator/server.h"

namespace ballast::testing {

absl::Status InProcessCoordinator::Start() {
  BALLAST_ASSIGN_OR_RETURN(store_, coordinator::SqlitePolicyStore::Open(options_.store_path));
  BALLAST_ASSIGN_OR_RETURN(speeds_,
                           coordinator::SpeedModel::Create(coordinator::SpeedModelOptions{},
                                                           RealClock()));
  BALLAST_ASSIGN_OR_RETURN(coordinator_, coordinator::Coordinator::Create(
                                             options_.coordinator, RealClock(),
                                             store_.get(), speeds_.get()));
  agent_service_ = std::make_unique<coordinator::AgentServiceImpl>(coordinator_.get(),
                                                                   options_.agent_service);
  admin_service_ = std::make_unique<coordinator::AdminServiceImpl>(coordinator_.get());
  coordinator::ServerOptions server_options;
  server_options.address = absl::StrCat(options_.host, ":", port_);  // 0 the first time
  server_options.max_message_bytes = options_.max_message_bytes;
  server_options.security = options_.security;
  if (options_.health_port) server_options.health_address = "127.0.0.1:0";
  BALLAST_ASSIGN_OR_RETURN(
      coordinator::RunningServer running,
      coordinator::StartServer(server_options, agent_service_.get(), admin_service_.get()));
  server_ = std::move(running.server);
  health_server_ = std::move(running.health_server);
  health_port_ = running.health_port;
  port_ = running.port;
  admin_auth_ = running.admin_auth;
  stop_ = std::make_unique<absl::Notification>();
  ticker_ = std::thread([this] {
    while (!stop_->WaitForNotificationWithTimeout(options_.tick)) coordinator_->Tick();
  });
  return absl::OkStatus();
}

void InProcessCoordinator::Stop() {
  if (server_ == nullptr) return;
  stop_->Notify();
  ticker_.join();
  // A zero deadline cancels every open stream at once, as a crash would.
  server_->Shutdown(std::chrono::system_clock::now());
  server_->Wait();
  server_.reset();
  if (health_server_) health_server_->Shutdown(std::chrono::system_clock::now());
  health_server_.reset();
  agent_service_.reset();
  admin_service_.reset();
  coordinator_.reset();
  speeds_.reset();
  store_.reset();
}

absl::Status InProcessAgent::Start() {
  state_ = std::make_unique<agent::AgentState>(4096);
  service_ = std::make_unique<agent::WorkerService>(state_.get());
  BALLAST_ASSIGN_OR_RETURN(server_, agent::StartWorkerServer(socket_path_, service_.get()));
  agent::CoordinatorSessionOptions options;
  options.coordinator_address = coordinator_address_;
  options.credentials = credentials_;
  options.token = token_;
  options.agent_id = agent_id_;
  options.node = agent_id_;
  options.batch_period = absl::Milliseconds(20);
  options.initial_backoff = absl::Milliseconds(20);
  options.max_backoff = absl::Milliseconds(500);
  session_ = std::make_unique<agent::CoordinatorSession>(options, state_.get());
  return absl::OkStatus();
}

void InProcessAgent::Stop() {
  if (server_ == nullptr) return;
  session_.reset();
  server_->Shutdown(std::chrono::system_clock::now());
  server_->Wait();
  server_.reset();
  service_.reset();
  state_.reset();
}

bool WaitFor(const std::function<bool()>& condition, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (condition()) return true;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return condition();
}

}  // namespace ballast::testing
