#include "agent/worker_service.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

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
  // Attached: answer the hello, so the worker's reconnect loop knows the session is real.
  v1::WorkerDirective welcome;
  welcome.mutable_welcome();
  channel.Send(welcome);
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

namespace {

absl::Status PrepareSocketPath(const std::string& socket_path) {
  const std::filesystem::path parent =
      std::filesystem::absolute(std::filesystem::path(socket_path)).parent_path();
  struct stat info;
  if (::stat(parent.c_str(), &info) != 0) {
    std::error_code ec;
    std::filesystem::create_directories(parent, ec);
    // Group members keep search permission: training processes run in the agent's group.
    if (ec || ::chmod(parent.c_str(), 0750) != 0) {
      return absl::PermissionDeniedError(absl::StrCat("cannot create the socket directory ",
                                                      parent.string(), ": ",
                                                      ec ? ec.message() : std::strerror(errno)));
    }
  } else if (!S_ISDIR(info.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("the socket's parent ", parent.string(), " is not a directory"));
  } else if ((info.st_mode & S_IWOTH) != 0 && (info.st_mode & S_ISVTX) == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("the socket directory ", parent.string(),
                     " is world-writable without the sticky bit: any local user could replace the "
                     "socket; use a directory only the agent's user (and group) can write"));
  }
  if (::lstat(socket_path.c_str(), &info) == 0) {
    if (!S_ISSOCK(info.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat(socket_path, " exists and is not a socket; refusing to replace it"));
    }
    if (::unlink(socket_path.c_str()) != 0) {  // a stale socket from a previous run
      return absl::PermissionDeniedError(
          absl::StrCat("cannot remove the stale socket ", socket_path, ": ", std::strerror(errno)));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<grpc::Server>> StartWorkerServer(const std::string& socket_path,
                                                                WorkerService* service) {
  if (absl::Status s = PrepareSocketPath(socket_path); !s.ok()) return s;
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat("unix:", socket_path), grpc::InsecureServerCredentials());
  builder.RegisterService(service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot listen on unix:", socket_path));
  }
  // gRPC binds with the process umask (usually 022: owner-only connect, since connecting
  // needs write permission); until this chmod the directory's permissions are what keep
  // other users out, hence 0750 above.
  if (::chmod(socket_path.c_str(), 0660) != 0) {
    return absl::PermissionDeniedError(absl::StrCat("cannot restrict ", socket_path, " to 0660"));
  }
  return server;
}

}  // namespace ballast::agent
