#include "agent/coordinator_session.h"

#include <grpcpp/grpcpp.h>

#include <random>

#include "ballast/v1/agent.grpc.pb.h"
#include "common/logging.h"

namespace ballast::agent {

CoordinatorSession::CoordinatorSession(const CoordinatorSessionOptions& options,
                                       AgentState* state)
    : options_(options), state_(state) {
  thread_ = std::thread([this] { Run(); });
}

CoordinatorSession::~CoordinatorSession() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    if (context_ != nullptr) context_->TryCancel();
  }
  thread_.join();
}

bool CoordinatorSession::connected() const {
  absl::MutexLock lock(&mu_);
  return connected_;
}

int64_t CoordinatorSession::connects() const {
  absl::MutexLock lock(&mu_);
  return connects_;
}

void CoordinatorSession::Run() {
  std::mt19937_64 rng(std::random_device{}());
  absl::Duration backoff = options_.initial_backoff;
  for (;;) {
    const bool established = RunOnce();
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    if (established) backoff = options_.initial_backoff;
    // Full jitter, so the agents of a cluster do not all reconnect at the same instant
    // after a coordinator restart.
    const double fraction = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), backoff * fraction);
    if (stopping_) return;
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
}

bool CoordinatorSession::RunOnce() {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, absl::ToInt64Milliseconds(options_.keepalive));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, absl::ToInt64Milliseconds(options_.keepalive));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  auto channel = grpc::CreateCustomChannel(
      options_.coordinator_address,
      options_.credentials != nullptr ? options_.credentials : grpc::InsecureChannelCredentials(),
      args);
  auto stub = v1::AgentService::NewStub(channel);
  grpc::ClientContext context;
  if (!options_.token.empty()) context.AddMetadata("authorization", "Bearer " + options_.token);
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return false;
    context_ = &context;
  }
  auto stream = stub->Session(&context);
  v1::AgentMessage hello;
  hello.mutable_hello()->set_agent_id(options_.agent_id);
  hello.mutable_hello()->set_node(options_.node);
  state_->ClearWorkerEvents();  // the hello below lists every worker
  for (const v1::WorkerIdentity& w : state_->Workers()) *hello.mutable_hello()->add_workers() = w;
  bool ok = stream->Write(hello);
  bool reader_done = false;
  std::thread reader;
  if (ok) {
    absl::MutexLock lock(&mu_);
    connected_ = true;
    ++connects_;
    BALLAST_LOG(INFO) << "agent=" << options_.agent_id << " connected to coordinator "
                      << options_.coordinator_address;
    reader = std::thread([&] {
      v1::CoordinatorMessage message;
      while (stream->Read(&message)) {
        if (message.has_plan()) state_->DeliverPlan(message.plan());
        if (message.has_rejected()) {
          BALLAST_LOG(WARNING) << "agent=" << options_.agent_id
                               << " coordinator rejected input: " << message.rejected().message();
        }
      }
      absl::MutexLock lock(&mu_);
      reader_done = true;
    });
  }
  while (ok) {
    {
      absl::MutexLock lock(&mu_);
      auto wake = [&] { return stopping_ || reader_done; };
      mu_.AwaitWithTimeout(absl::Condition(&wake), options_.batch_period);
      if (stopping_ || reader_done) break;
    }
    for (v1::AgentMessage& event : state_->TakeWorkerEvents()) {
      if (!(ok = stream->Write(event))) break;
    }
    if (!ok) break;
    v1::AgentMessage batch;
    *batch.mutable_reports() = state_->TakeReports(options_.max_batch);
    if (batch.reports().reports_size() > 0 || batch.reports().dropped() > 0) {
      ok = stream->Write(batch);
    }
  }
  context.TryCancel();
  if (reader.joinable()) reader.join();
  const grpc::Status status = stream->Finish();
  absl::MutexLock lock(&mu_);
  context_ = nullptr;
  const bool was_connected = connected_;
  connected_ = false;
  if (was_connected && !stopping_) {
    BALLAST_LOG(WARNING) << "agent=" << options_.agent_id << " lost coordinator "
                         << options_.coordinator_address << ": " << status.error_message()
                         << "; reconnecting with backoff, workers keep their plans";
  }
  return was_connected;
}

}  // namespace ballast::agent
