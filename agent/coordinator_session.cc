#include "agent/coordinator_session.h"

#include <grpcpp/grpcpp.h>

#include "ballast/v1/agent.grpc.pb.h"
#include "common/grpc_status.h"
#include "common/logging.h"

namespace ballast::agent {
namespace {

// Durations in log lines, to the millisecond ("1.234s", not "1.23456789s").
std::string ForLog(absl::Duration d) {
  return absl::FormatDuration(absl::Trunc(d, absl::Milliseconds(1)));
}

std::string Describe(const grpc::Status& status) {
  if (status.ok()) return "the stream ended before the coordinator answered the hello";
  return FromGrpcStatus(status).ToString();
}

}  // namespace

CoordinatorSession::CoordinatorSession(const CoordinatorSessionOptions& options, AgentState* state)
    : options_(options),
      state_(state),
      clock_(options.clock != nullptr ? options.clock : RealClock()),
      backoff_({.initial = options.initial_backoff,
                .max = options.max_backoff,
                .jitter = Jitter::kEqual,
                .seed = options.jitter_seed},
               clock_) {
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

bool CoordinatorSession::established() const {
  absl::MutexLock lock(&mu_);
  return established_;
}

int64_t CoordinatorSession::attempts() const {
  absl::MutexLock lock(&mu_);
  return attempts_;
}

bool CoordinatorSession::backing_off() const {
  absl::MutexLock lock(&mu_);
  return backing_off_ && clock_->Monotonic() < retry_at_;
}

void CoordinatorSession::Run() {
  for (;;) {
    const grpc::Status status = RunOnce();
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    const bool lost_session = established_;
    established_ = false;
    const absl::Duration delay = backoff_.NextDelay();
    LogFailedAttempt(status, lost_session, delay);
    backing_off_ = true;
    retry_at_ = clock_->Monotonic() + delay;
    const bool go_on = WaitUnlessStopped(clock_, delay, mu_, stopping_);
    backing_off_ = false;
    if (!go_on) return;
  }
}

void CoordinatorSession::MarkEstablished() {
  if (established_) return;
  established_ = true;
  const std::string outage = ForLog(backoff_.outage());
  if (backoff_.attempts() == 0) {
    BALLAST_LOG(INFO) << "agent=" << options_.agent_id << " connected to coordinator "
                      << options_.coordinator_address;
  } else {
    BALLAST_LOG(INFO) << "agent=" << options_.agent_id
                      << (connected_before_ ? " reconnected" : " connected") << " to coordinator "
                      << options_.coordinator_address << " after " << backoff_.attempts()
                      << (backoff_.attempts() == 1 ? " attempt, " : " attempts, ") << outage;
  }
  backoff_.Reset();
  connected_before_ = true;
}

void CoordinatorSession::LogFailedAttempt(const grpc::Status& status, bool lost_session,
                                          absl::Duration delay) {
  const int64_t n = backoff_.attempts();
  const std::string next = ForLog(delay);
  const std::string outage = ForLog(backoff_.outage());
  if (lost_session) {
    BALLAST_LOG(WARNING) << "agent=" << options_.agent_id << " lost coordinator "
                         << options_.coordinator_address << ": " << Describe(status)
                         << "; reconnecting with backoff (next attempt in " << next
                         << "), workers keep their plans";
  } else if (n == 1) {
    BALLAST_LOG(WARNING) << "agent=" << options_.agent_id << " cannot reach coordinator "
                         << options_.coordinator_address << ": " << Describe(status)
                         << "; retrying with backoff (next attempt in " << next << ")";
  } else if (backoff_.ShouldLogAttempt()) {
    BALLAST_LOG(WARNING) << "agent=" << options_.agent_id << " coordinator "
                         << options_.coordinator_address << " still unreachable after " << n
                         << " attempts in " << outage << ": " << Describe(status)
                         << "; next attempt in " << next;
  }
}

grpc::Status CoordinatorSession::RunOnce() {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, absl::ToInt64Milliseconds(options_.keepalive));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, absl::ToInt64Milliseconds(options_.keepalive));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // A channel of its own for every attempt: gRPC's shared subchannels keep their own
  // reconnect backoff (up to 120 s), which would hold the agent away long after the link
  // is back; the session's backoff is the only one.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto channel = grpc::CreateCustomChannel(
      options_.coordinator_address,
      options_.credentials != nullptr ? options_.credentials : grpc::InsecureChannelCredentials(),
      args);
  auto stub = v1::AgentService::NewStub(channel);
  grpc::ClientContext context;
  if (!options_.token.empty()) context.AddMetadata("authorization", "Bearer " + options_.token);
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return grpc::Status::CANCELLED;
    context_ = &context;
    ++attempts_;
  }
  const absl::Duration opened_at = clock_->Monotonic();
  auto stream = stub->Session(&context);
  v1::AgentMessage hello;
  hello.mutable_hello()->set_agent_id(options_.agent_id);
  hello.mutable_hello()->set_node(options_.node);
  state_->ClearWorkerEvents();  // the hello below lists every worker
  for (const v1::WorkerIdentity& w : state_->Workers()) *hello.mutable_hello()->add_workers() = w;
  bool ok = stream->Write(hello);
  bool reader_done = false;
  bool cancel = true;  // on the way out: stopping, or a write failed
  std::thread reader;
  if (ok) {
    absl::MutexLock lock(&mu_);
    connected_ = true;
    ++connects_;
    reader = std::thread([&] {
      v1::CoordinatorMessage message;
      bool answered = false;
      while (stream->Read(&message)) {
        if (!answered) {
          answered = true;
          absl::MutexLock lock(&mu_);
          MarkEstablished();
        }
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
      if (reader_done && !stopping_) {
        // The coordinator ended the stream: its status is final; a cancel now would
        // only overwrite it with CANCELLED in the log.
        cancel = false;
        break;
      }
      if (stopping_) break;
    }
    // A coordinator older than the Welcome message says nothing after an accepted hello: a
    // stream it kept open this long on a connected channel is one it accepted (a refusal
    // ends it at once). Current coordinators answer, and the reader marks it above.
    if (clock_->Monotonic() - opened_at >= options_.established_after &&
        channel->GetState(/*try_to_connect=*/false) == GRPC_CHANNEL_READY) {
      absl::MutexLock lock(&mu_);
      MarkEstablished();
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
  if (cancel) context.TryCancel();
  if (reader.joinable()) reader.join();
  const grpc::Status status = stream->Finish();
  absl::MutexLock lock(&mu_);
  context_ = nullptr;
  connected_ = false;
  return status;
}

}  // namespace ballast::agent
