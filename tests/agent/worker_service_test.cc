// The agent's worker socket is only reachable by the node's training processes: mode 0660,
// in a directory it creates 0750; it refuses a world-writable directory without the sticky
// bit, and never deletes a non-socket file sitting at its path. An attach is answered with
// a Welcome, so the worker's reconnect loop knows its session is real.
#include "agent/worker_service.h"

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "ballast/v1/worker.grpc.pb.h"

namespace ballast::agent {
namespace {

using ::testing::HasSubstr;

mode_t ModeOf(const std::string& path) {
  struct stat info;
  if (::lstat(path.c_str(), &info) != 0) return 0;
  return info.st_mode;
}

class WorkerServiceSocketTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Short: a Unix socket path must fit sockaddr_un::sun_path (108 bytes).
    dir_ = absl::StrCat("/tmp/bws-", ::getpid());
    std::filesystem::remove_all(dir_);
    ASSERT_EQ(::mkdir(dir_.c_str(), 0700), 0);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string dir_;
  AgentState state_{16};
  WorkerService service_{&state_};
};

TEST_F(WorkerServiceSocketTest, SocketIs0660InADirectoryItCreates0750) {
  const std::string socket = dir_ + "/run/ballast/agent.sock";
  absl::StatusOr<std::unique_ptr<grpc::Server>> server = StartWorkerServer(socket, &service_);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_TRUE(S_ISSOCK(ModeOf(socket)));
  EXPECT_EQ(ModeOf(socket) & 07777, 0660);
  EXPECT_EQ(ModeOf(dir_ + "/run/ballast") & 07777, 0750);
  (*server)->Shutdown();
}

TEST_F(WorkerServiceSocketTest, ReplacesAStaleSocket) {
  const std::string socket = dir_ + "/agent.sock";
  // A socket file left by a process that died: bound, then closed without unlink.
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::snprintf(address.sun_path, sizeof(address.sun_path), "%s", socket.c_str());
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ::close(fd);
  ASSERT_TRUE(S_ISSOCK(ModeOf(socket)));

  auto server = StartWorkerServer(socket, &service_);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ(ModeOf(socket) & 07777, 0660);
  (*server)->Shutdown();
}

TEST_F(WorkerServiceSocketTest, NeverDeletesAFileThatIsNotASocket) {
  const std::string path = dir_ + "/precious";
  std::ofstream(path) << "data";
  auto server = StartWorkerServer(path, &service_);
  EXPECT_EQ(server.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(server.status().message(), HasSubstr("is not a socket"));
  EXPECT_TRUE(S_ISREG(ModeOf(path)));
}

TEST_F(WorkerServiceSocketTest, RefusesAWorldWritableDirectoryWithoutTheStickyBit) {
  const std::string open_dir = dir_ + "/open";
  ASSERT_EQ(::mkdir(open_dir.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(open_dir.c_str(), 0777), 0);
  auto server = StartWorkerServer(open_dir + "/agent.sock", &service_);
  EXPECT_EQ(server.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(server.status().message(), HasSubstr("world-writable without the sticky bit"));

  // With the sticky bit (like /tmp), other users cannot remove or rename our socket.
  ASSERT_EQ(::chmod(open_dir.c_str(), 01777), 0);
  auto sticky = StartWorkerServer(open_dir + "/agent.sock", &service_);
  ASSERT_TRUE(sticky.ok()) << sticky.status();
  (*sticky)->Shutdown();
}

TEST_F(WorkerServiceSocketTest, AnAttachIsAnsweredWithAWelcomeAndARefusedOneIsNot) {
  const std::string socket = dir_ + "/agent.sock";
  auto server = StartWorkerServer(socket, &service_);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::WorkerAgent::NewStub(
      grpc::CreateChannel(absl::StrCat("unix:", socket), grpc::InsecureChannelCredentials()));
  {
    grpc::ClientContext context;
    // An agent that never answered would leave Read waiting: fail in seconds instead.
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    auto stream = stub->Attach(&context);
    v1::WorkerMessage hello;
    v1::WorkerIdentity* identity = hello.mutable_hello();
    identity->set_job("vit");
    identity->set_group("tp0");
    identity->set_rank(0);
    identity->set_group_size(2);
    identity->set_device("node/dev0");
    identity->set_node("node");
    ASSERT_TRUE(stream->Write(hello));
    v1::WorkerDirective first;
    ASSERT_TRUE(stream->Read(&first));
    EXPECT_TRUE(first.has_welcome()) << first.DebugString();
    context.TryCancel();
    stream->Finish();
  }
  {
    grpc::ClientContext context;
    auto stream = stub->Attach(&context);
    v1::WorkerMessage hello;
    hello.mutable_hello()->set_job("vit");  // no group, rank or device: refused
    ASSERT_TRUE(stream->Write(hello));
    v1::WorkerDirective reply;
    bool welcomed = false;
    while (stream->Read(&reply)) welcomed |= reply.has_welcome();
    EXPECT_FALSE(welcomed);
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  (*server)->Shutdown();
}

}  // namespace
}  // namespace ballast::agent
