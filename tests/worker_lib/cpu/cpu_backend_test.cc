// The CPU backend (worker_lib/cpu/cpu_backend.cc): options, failures across ranks (a
// missing or departed peer, a failed compute call, a closed socket) and rendezvous stores.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ballast/backend.h"
#include "common/status_macros.h"
#include "testing/rank_threads.h"

namespace ballast {
namespace {

using ::ballast::testing::RankContext;
using ::ballast::testing::RunRanks;
using ::ballast::testing::RunRanksOptions;

std::unique_ptr<Backend> SingleRank() {
  CpuBackendOptions options;
  options.prefix = "cpu-backend-single";
  auto backend = CreateCpuBackend(options);
  EXPECT_TRUE(backend.ok()) << backend.status();
  return *std::move(backend);
}

TEST(CpuBackendTest, RejectsBadOptions) {
  CpuBackendOptions options;
  options.rank = 2;
  options.size = 2;
  EXPECT_EQ(CreateCpuBackend(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.rank = 0;
  options.blas_threads = -1;
  EXPECT_THAT(std::string(CreateCpuBackend(options).status().message()),
              ::testing::HasSubstr("blas_threads"));
}

TEST(CpuBackendTest, MissingPeerTimesOutInsteadOfHanging) {
  CpuBackendOptions options;
  options.rank = 0;
  options.size = 2;  // rank 1 never arrives
  options.prefix = "missing-peer";
  options.timeout = absl::Milliseconds(500);
  auto backend = CreateCpuBackend(options);
  EXPECT_FALSE(backend.ok());
}

TEST(CpuBackendTest, PeerThatLeavesMidRunFailsTheCollective) {
  RendezvousStore store = RendezvousStore::InProcess();
  absl::Status rank0_status;
  std::thread rank1([&] {
    CpuBackendOptions options;
    options.rank = 1;
    options.size = 2;
    options.store = store;
    options.prefix = "leaver";
    options.timeout = absl::Seconds(1);
    auto backend = CreateCpuBackend(options);
    ASSERT_TRUE(backend.ok());
    // Leaves without taking part in rank 0's all-reduce.
  });
  CpuBackendOptions options;
  options.size = 2;
  options.store = store;
  options.prefix = "leaver";
  options.timeout = absl::Seconds(1);
  auto backend = CreateCpuBackend(options);
  rank1.join();
  ASSERT_TRUE(backend.ok()) << backend.status();
  std::vector<float> x(16, 1.0f);
  absl::Status status = (*backend)->comm().AllReduceSum(x.data(), x.size());
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr("allreduce"));
}

// A rank whose compute call failed skips the collective after it (it must not send what
// the call left) and aborts its communicator, which closes its connections: the peer's
// collective fails then, not at the 60 s timeout.
TEST(CpuBackendTest, AFailedComputeCallFailsThePeersCollectiveAtOnce) {
  RunRanksOptions options;
  options.timeout = absl::Seconds(60);
  const auto start = std::chrono::steady_clock::now();
  std::vector<absl::Status> got(2);
  absl::Status status = RunRanks(
      2,
      [&](RankContext& ctx) -> absl::Status {
        Compute& c = ctx.backend->compute();
        absl::StatusOr<Buffer> x = c.Allocate(16);
        if (!x.ok()) return x.status();
        if (ctx.rank == 0) {
          c.Gemm(false, false, -1, 4, 4, 1.0f, x->data(), 4, x->data(), 4, 0.0f, x->data(), 4);
        }
        got[ctx.rank] = ctx.backend->comm().AllReduceSum(x->data(), 16);
        return absl::OkStatus();
      },
      options);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(got[0].code(), absl::StatusCode::kInvalidArgument) << got[0];
  EXPECT_THAT(std::string(got[0].message()), ::testing::HasSubstr("AllReduceSum not run"));
  EXPECT_FALSE(got[1].ok());
  EXPECT_NE(got[1].code(), absl::StatusCode::kDeadlineExceeded) << got[1];
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}

// A peer that closed its sockets makes Gloo's writes fail (EPIPE) where SIGPIPE's default
// action would kill the whole process (CI once lost the test above that way: rank 1 wrote
// to rank 0's closed socket). Connecting turns that default into "ignore".
TEST(CpuBackendTest, AWriteToAClosedPeerFailsInsteadOfKillingTheProcess) {
  ASSERT_NE(signal(SIGPIPE, SIG_DFL), SIG_ERR);
  { std::unique_ptr<Backend> backend = SingleRank(); }
  struct sigaction now {};
  ASSERT_EQ(sigaction(SIGPIPE, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, SIG_IGN);
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  close(fds[1]);
  const char byte = 1;
  EXPECT_EQ(write(fds[0], &byte, 1), -1);  // with SIGPIPE's default the process ends here
  EXPECT_EQ(errno, EPIPE);
  close(fds[0]);
}

void OwnSigpipeHandler(int) {}

// A handler the program installed is its own business: the backend leaves it.
TEST(CpuBackendTest, AProgramsOwnSigpipeHandlerIsLeftAlone) {
  struct sigaction mine {};
  mine.sa_handler = OwnSigpipeHandler;
  sigemptyset(&mine.sa_mask);
  ASSERT_EQ(sigaction(SIGPIPE, &mine, nullptr), 0);
  { std::unique_ptr<Backend> backend = SingleRank(); }
  struct sigaction now {};
  ASSERT_EQ(sigaction(SIGPIPE, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, &OwnSigpipeHandler);
  ASSERT_NE(signal(SIGPIPE, SIG_DFL), SIG_ERR);
}

TEST(RendezvousStoreTest, FileSystemStoreCreatesDirectory) {
  const std::string dir = ::testing::TempDir() + "/ballast-rdv-" + std::to_string(::getpid());
  auto store = RendezvousStore::FileSystem(dir);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_NE(store->handle(), nullptr);
  EXPECT_FALSE(RendezvousStore::FileSystem("").ok());
  EXPECT_FALSE(RendezvousStore::FileSystem("/proc/forbidden/x").ok());
}

}  // namespace
}  // namespace ballast

namespace ballast {
namespace {

// A real redis-server on a free loopback port, stopped when the test ends.
class RedisServer {
 public:
  static constexpr const char* kBinary = "/usr/bin/redis-server";

  RedisServer() {
    // Ask the kernel for a free port, then hand it to redis.
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    ::close(fd);
    pid_ = ::fork();
    if (pid_ == 0) {
      const std::string port = std::to_string(port_);
      ::execl(kBinary, kBinary, "--port", port.c_str(), "--bind", "127.0.0.1", "--save", "",
              "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning",
              static_cast<char*>(nullptr));
      std::_Exit(127);
    }
  }
  ~RedisServer() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  int port() const { return port_; }

 private:
  int port_ = 0;
  pid_t pid_ = -1;
};

TEST(RendezvousStoreTest, RedisStoreConnectsRanks) {
  if (::access(RedisServer::kBinary, X_OK) != 0) {
    GTEST_SKIP() << "redis-server not installed (scripts/setup installs it)";
  }
  RedisServer server;
  // Poll until the server accepts connections (bounded), instead of sleeping a guess.
  absl::StatusOr<RendezvousStore> store = absl::UnavailableError("not tried");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!store.ok() && std::chrono::steady_clock::now() < deadline) {
    store = RendezvousStore::Redis("127.0.0.1", server.port());
    if (!store.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(store.ok()) << store.status();

  std::vector<absl::Status> results(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      // Each rank opens its own connection, as separate hosts would.
      auto own = RendezvousStore::Redis("127.0.0.1", server.port());
      if (!own.ok()) {
        results[r] = own.status();
        return;
      }
      CpuBackendOptions options;
      options.rank = r;
      options.size = 2;
      options.store = *own;
      options.prefix = "redis-run-" + std::to_string(::getpid());
      options.timeout = absl::Seconds(20);
      auto backend = CreateCpuBackend(options);
      if (!backend.ok()) {
        results[r] = backend.status();
        return;
      }
      std::vector<float> x = {1.0f + r};
      results[r] = (*backend)->comm().AllReduceSum(x.data(), 1);
      if (results[r].ok() && x[0] != 3.0f) results[r] = absl::InternalError("wrong sum");
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_TRUE(results[0].ok()) << results[0];
  EXPECT_TRUE(results[1].ok()) << results[1];
}

TEST(RendezvousStoreTest, UnreachableRedisIsAnError) {
  EXPECT_EQ(RendezvousStore::Redis("127.0.0.1", 1).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(RendezvousStore::Redis("", 6379).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RendezvousStore::Redis("127.0.0.1", 70000).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ballast
