#include "coordinator/agent_service.h"

#include "absl/synchronization/mutex.h"
#include "common/grpc_status.h"

namespace ballast::coordinator {
namespace {

// Plans are pushed from the tick thread while this stream's handler thread reads; gRPC
// allows one writer at a time, hence the mutex.
class StreamSink final : public AgentSink {
 public:
  explicit StreamSink(grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::AgentMessage>* s)
      : stream_(s) {}
  void Send(const v1::CoordinatorMessage& message) override {
    absl::MutexLock lock(&mu_);
    stream_->Write(message);
  }

 private:
  absl::Mutex mu_;
  grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::AgentMessage>* stream_;
};

void Reject(StreamSink& sink, const absl::Status& status) {
  v1::CoordinatorMessage message;
  message.mutable_rejected()->set_code(static_cast<int32_t>(status.code()));
  message.mutable_rejected()->set_message(std::string(status.message()));
  sink.Send(message);
}

}  // namespace

grpc::Status AgentServiceImpl::Session(
    grpc::ServerContext* /*context*/,
    grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::AgentMessage>* stream) {
  v1::AgentMessage message;
  if (!stream->Read(&message)) return grpc::Status::OK;
  if (!message.has_hello()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "the first message of Session must be hello");
  }
  const std::string agent_id = message.hello().agent_id();
  StreamSink sink(stream);
  if (absl::Status s = coordinator_->AgentConnected(message.hello(), &sink); !s.ok()) {
    return ToGrpcStatus(s);
  }
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
          if (absl::Status s = coordinator_->Report(agent_id, report); !s.ok()) Reject(sink, s);
        }
        break;
      case v1::AgentMessage::kHello:
        status = absl::InvalidArgumentError("hello sent twice on one session");
        break;
      default:
        status = absl::InvalidArgumentError("empty agent message");
    }
    if (!status.ok()) Reject(sink, status);
  }
  coordinator_->AgentDisconnected(agent_id, &sink);
  return grpc::Status::OK;
}

}  // namespace ballast::coordinator
