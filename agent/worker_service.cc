#include "agent/worker_service.h"

#include <sys/stat.h>

#include <filesystem>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>

#include "absl/strings/str_cat.h"

#include "absl/synchronization/mutex.h"
#include "common/grpc_status.h"
#include "common/logging.h"

namespace ballast::agent {
namespace {

// Writes to one worker's stream; plans come from the coordinator session's thread while
// this stream's handler thread reads, and gRPC allows one writer at a time.
class StreamChannel final : public WorkerChannel {
 public:
  explicit StreamChannel(grpc::ServerReaderWriter<v1::WorkerDirective, v1::WorkerMessage>* s)
      : stream_(s) {}
  bool Send(const v1::WorkerDirective& directive) override {
    absl::MutexLock lock(&mu_);
    return stream_->Write(directive);
  }

 private:
  absl::Mutex mu_;
  grpc::ServerReaderWriter<v1::WorkerDirective, v1::WorkerMessage>* stream_;
};

}  // namespace

grpc::Status WorkerService::Attach(
    grpc::ServerContext* /*context*/,
    grpc::ServerReaderWriter<v1::WorkerDirective, v1::WorkerMessage>* stream) {
  v1::WorkerMessage message;
  if (!stream->Read(&message)) return grpc::Status::OK;
  if (!message.has_hello()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "the first message of Attach must be hello");
  }
  const v1::WorkerIdentity identity = message.hello();
  StreamChannel channel(stream);
  if (absl::Status s = state_->AddWorker(identity, &channel); !s.ok()) return ToGrpcStatus(s);
  BALLAST_LOG(INFO) << "worker attached: job=" << identity.job() << " group=" << identity.group()
                    << " rank=" << identity.rank() << " device=" << identity.device();
  while (stream->Read(&message)) {
    if (!message.has_report()) continue;
    // A bad report is counted and dropped; the worker stays attached.
    (void)state_->EnqueueReport(identity, message.report());
  }
  state_->RemoveWorker(&channel);
  BALLAST_LOG(INFO) << "worker detached: job=" << identity.job() << " group=" << identity.group()
                    << " rank=" << identity.rank();
  return grpc::Status::OK;
}

absl::StatusOr<std::unique_ptr<grpc::Server>> StartWorkerServer(const std::string& socket_path,
                                                                WorkerService* service) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(socket_path).parent_path(), ec);
  std::filesystem::remove(socket_path, ec);  // a stale socket from a previous run
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat("unix:", socket_path), grpc::InsecureServerCredentials());
  builder.RegisterService(service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot listen on unix:", socket_path));
  }
  if (::chmod(socket_path.c_str(), 0660) != 0) {
    return absl::PermissionDeniedError(absl::StrCat("cannot restrict ", socket_path, " to 0660"));
  }
  return server;
}

}  // namespace ballast::agent
