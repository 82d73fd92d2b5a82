#include "coordinator/agent_service.h"

#include <algorithm>
#include <deque>
#include <optional>
#include <string>

#include "common/grpc_status.h"
#include "common/logging.h"

namespace ballast::coordinator {

using Stream = grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::AgentMessage>;

// One session's outgoing messages and the thread that writes them (see the header).
class SessionWriter final : public AgentSink {
 public:
  static constexpr absl::Duration kFinishWriteFor = absl::Milliseconds(500);

  SessionWriter(grpc::ServerContext* context, Stream* stream, std::string agent_id,
                std::atomic<int64_t>* rejections_dropped)
      : context_(context),
        stream_(stream),
        agent_id_(std::move(agent_id)),
        rejections_dropped_(rejections_dropped),
        thread_([this] { Run(); }) {}

  // Stops writing. A write in flight gets a moment to finish (the Welcome to an agent that
  // hung up right after its hello, say), so a session that ended normally ends with its
  // own status rather than CANCELLED; one still stuck after that is cancelled (the
  // session is over, so is the stream).
  ~SessionWriter() override {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
      mu_.AwaitWithTimeout(absl::Condition(
                               +[](SessionWriter* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->mu_) {
                                 return !w->writing_since_.has_value();
                               },
                               this),
                           kFinishWriteFor);
      if (writing_since_.has_value()) context_->TryCancel();
    }
    thread_.join();
  }

  // Never waits on the network.
  void Send(const v1::CoordinatorMessage& message) override {
    absl::MutexLock lock(&mu_);
    if (stopping_ || failed_) return;
    if (message.has_plan()) {
      auto same_group = [&](const v1::CoordinatorMessage& queued) {
        return queued.has_plan() && queued.plan().job() == message.plan().job() &&
               queued.plan().plan().group() == message.plan().plan().group();
      };
      auto it = std::find_if(queue_.begin(), queue_.end(), same_group);
      if (it != queue_.end()) {
        *it = message;  // the newer plan of the group supersedes the queued one
        return;
      }
    } else if (message.has_rejected()) {
      if (queued_rejections_ >= AgentServiceImpl::kMaxQueuedRejections) {
        rejections_dropped_->fetch_add(1, std::memory_order_relaxed);
        return;
      }
      ++queued_rejections_;
    }  // else the Welcome: once a session, never dropped
    queue_.push_back(message);
  }

  absl::Duration BlockedFor() {
    absl::MutexLock lock(&mu_);
    return writing_since_.has_value() ? absl::Now() - *writing_since_ : absl::ZeroDuration();
  }

  // True (once) when a write has been blocked for longer than `timeout`: the session is
  // then cancelled, which ends the blocked write and the session's reads.
  bool CancelIfStuck(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    if (cancelled_ || !writing_since_.has_value() || absl::Now() - *writing_since_ <= timeout) {
      return false;
    }
    cancelled_ = true;
    BALLAST_LOG(WARNING) << "agent=" << agent_id_ << " has not read for "
                         << absl::FormatDuration(absl::Now() - *writing_since_)
                         << ": session cancelled (" << queue_.size() << " messages unsent)";
    context_->TryCancel();
    return true;
  }

 private:
  void Run() {
    while (true) {
      v1::CoordinatorMessage message;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](SessionWriter* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->mu_) {
              return w->stopping_ || !w->queue_.empty();
            },
            this));
        if (stopping_) return;
        message = std::move(queue_.front());
        queue_.pop_front();
        if (message.has_rejected()) --queued_rejections_;
        writing_since_ = absl::Now();
      }
      const bool ok = stream_->Write(message);
      absl::MutexLock lock(&mu_);
      writing_since_.reset();
      if (!ok) {
        failed_ = true;  // the stream is gone: the session's reads end too
        queue_.clear();
        return;
      }
    }
  }

  grpc::ServerContext* const context_;
  Stream* const stream_;
  const std::string agent_id_;
  std::atomic<int64_t>* const rejections_dropped_;

  absl::Mutex mu_;
  std::deque<v1::CoordinatorMessage> queue_ ABSL_GUARDED_BY(mu_);
  size_t queued_rejections_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<absl::Time> writing_since_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool failed_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts once the rest is built
};

namespace {

void Reject(SessionWriter& writer, const absl::Status& status) {
  v1::CoordinatorMessage message;
  message.mutable_rejected()->set_code(static_cast<int32_t>(status.code()));
  message.mutable_rejected()->set_message(std::string(status.message()));
  writer.Send(message);
}

}  // namespace

AgentServiceImpl::AgentServiceImpl(Coordinator* coordinator, AgentServiceOptions options)
    : coordinator_(coordinator),
      options_(options),
      authorizer_(std::make_shared<const AdminAuthorizer>(AdminAuthOptions{})),
      watchdog_([this] { Watchdog(); }) {}

AgentServiceImpl::~AgentServiceImpl() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  watchdog_.join();
}

void AgentServiceImpl::Watchdog() {
  // A quarter of the timeout: a stuck session is dropped within 1.25 write_timeouts.
  const absl::Duration period =
      std::clamp(options_.write_timeout / 4, absl::Milliseconds(10), absl::Seconds(1));
  absl::MutexLock lock(&mu_);
  while (!mu_.AwaitWithTimeout(absl::Condition(&stopping_), period)) {
    for (SessionWriter* writer : writers_) {
      if (writer->CancelIfStuck(options_.write_timeout)) {
        sessions_cancelled_slow_.fetch_add(1, std::memory_order_relaxed);
      }
    }
  }
}

int32_t AgentServiceImpl::BlockedSessions(absl::Duration at_least) const {
  absl::MutexLock lock(&mu_);
  int32_t n = 0;
  for (SessionWriter* writer : writers_) n += writer->BlockedFor() >= at_least;
  return n;
}

AgentServiceCounters AgentServiceImpl::counters() const {
  return AgentServiceCounters{
      .sessions_cancelled_slow = sessions_cancelled_slow_.load(std::memory_order_relaxed),
      .rejections_dropped = rejections_dropped_.load(std::memory_order_relaxed)};
}

grpc::Status AgentServiceImpl::Session(grpc::ServerContext* context, Stream* stream) {
  if (grpc::Status s = authorizer_->Authorize(*context, "AgentService.Session"); !s.ok()) {
    return s;
  }
  v1::AgentMessage message;
  if (!stream->Read(&message)) return grpc::Status::OK;
  if (!message.has_hello()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "the first message of Session must be hello");
  }
  const std::string agent_id = message.hello().agent_id();
  SessionWriter writer(context, stream, agent_id, &rejections_dropped_);
  {
    absl::MutexLock lock(&mu_);
    writers_.insert(&writer);
  }
  // Runs last, whatever the way out: the writer must be unregistered before it dies.
  struct Unregister {
    AgentServiceImpl* service;
    SessionWriter* writer;
    ~Unregister() {
      absl::MutexLock lock(&service->mu_);
      service->writers_.erase(writer);
    }
  } unregister{this, &writer};
  if (absl::Status s = coordinator_->AgentConnected(message.hello(), &writer); !s.ok()) {
    // A refused hello registered nothing; this only keeps the exit paths alike.
    coordinator_->AgentDisconnected(agent_id, &writer);
    return ToGrpcStatus(s);
  }
  // The hello is registered: answer it, so the agent's reconnect loop knows the session
  // is real (the plans in force, if any, went out just before).
  v1::CoordinatorMessage welcome;
  welcome.mutable_welcome();
  writer.Send(welcome);
  while (stream->Read(&message)) {
    absl::Status status;
    switch (message.kind_case()) {
      case v1::AgentMessage::kWorkerJoined:
        status = coordinator_->WorkerJoined(agent_id, message.worker_joined());
        break;
      case v1::AgentMessage::kWorkerLeft:
        status = coordinator_->WorkerLeft(agent_id, message.worker_left());
        break;
      case v1::AgentMessage::kReports:
        coordinator_->AgentDroppedReports(message.reports().dropped());
        for (const v1::WorkerReport& report : message.reports().reports()) {
          if (absl::Status s = coordinator_->Report(agent_id, report); !s.ok()) Reject(writer, s);
        }
        break;
      case v1::AgentMessage::kHello:
        status = absl::InvalidArgumentError("hello sent twice on one session");
        break;
      default:
        status = absl::InvalidArgumentError("empty agent message");
    }
    if (!status.ok()) Reject(writer, status);
  }
  coordinator_->AgentDisconnected(agent_id, &writer);
  if (context->IsCancelled()) {
    return grpc::Status(grpc::StatusCode::CANCELLED, "session cancelled");
  }
  return grpc::Status::OK;
}

}  // namespace ballast::coordinator
