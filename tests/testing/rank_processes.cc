#include "testing/rank_processes.h"

#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <exception>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "ballast/backend.h"

namespace ballast::testing {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

bool WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  return out.good();
}

// A rank's status travels as "<code>\n<message>".
std::string EncodeStatus(const absl::Status& status) {
  return absl::StrCat(static_cast<int>(status.code()), "\n", status.message());
}

absl::Status DecodeStatus(const std::string& text) {
  const size_t newline = text.find('\n');
  int code = 0;
  if (newline == std::string::npos || !absl::SimpleAtoi(text.substr(0, newline), &code)) {
    return absl::InternalError("left no status (it exited before its body returned)");
  }
  return absl::Status(static_cast<absl::StatusCode>(code), text.substr(newline + 1));
}

// The child's side: run the rank, leave its status and output in `dir`, and exit without
// running the parent's atexit handlers or gtest's reporting. An exception (Gloo throws)
// must not unwind into the gtest runner the child inherited, which would go on running
// tests in the child.
[[noreturn]] void RunChild(int rank, int size, const std::string& dir,
                           const std::function<absl::Status(RankContext&, std::string*)>& body,
                           const RankProcessesOptions& options) {
  // Dies with the parent (ctest killing a timed-out test), instead of lingering.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  std::string output;
  absl::Status status;
  try {
    status = [&]() -> absl::Status {
      absl::StatusOr<RendezvousStore> store = RendezvousStore::FileSystem(dir + "/store");
      if (!store.ok()) return store.status();
      absl::StatusOr<RankContext> ctx = StartRank(rank, size, *store, "ranks", options.ranks);
      if (!ctx.ok()) return ctx.status();
      return body(*ctx, &output);
    }();
  } catch (const std::exception& e) {
    status = absl::InternalError(absl::StrCat("exception: ", e.what()));
  } catch (...) {
    status = absl::InternalError("exception of unknown type");
  }
  const bool written =
      WriteFile(absl::StrCat(dir, "/rank-", rank, ".out"), output) &&
      WriteFile(absl::StrCat(dir, "/rank-", rank, ".status"), EncodeStatus(status));
  _exit(written ? 0 : 3);
}

// How a rank ended, and whether that is a cause (it crashed, hung or could not start)
// rather than, possibly, the effect of a peer's failure (a collective that timed out).
struct Outcome {
  absl::Status status;
  bool cause = false;
};

// Waits for `pid` until `deadline`, then kills it.
Outcome Reap(pid_t pid, absl::Time deadline, absl::Duration allowed, const std::string& dir,
             int rank) {
  int wstatus = 0;
  while (true) {
    const pid_t got = waitpid(pid, &wstatus, WNOHANG);
    if (got == pid) break;
    if (got < 0 && errno != EINTR) {
      return {absl::InternalError(absl::StrCat("waitpid: ", strerror(errno))), true};
    }
    if (absl::Now() >= deadline) {
      kill(pid, SIGKILL);
      while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
      }
      return {absl::DeadlineExceededError(
                  absl::StrCat("still running after ", absl::FormatDuration(allowed), ": killed")),
              true};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (WIFSIGNALED(wstatus)) {
    return {absl::InternalError(absl::StrCat("killed by signal ", WTERMSIG(wstatus), " (",
                                             strsignal(WTERMSIG(wstatus)), ")")),
            true};
  }
  if (WEXITSTATUS(wstatus) != 0) {
    return {absl::InternalError(
                absl::StrCat("exited with status ", WEXITSTATUS(wstatus), " before reporting")),
            true};
  }
  return {DecodeStatus(ReadFile(absl::StrCat(dir, "/rank-", rank, ".status"))), false};
}

std::string TempRoot() {
  const char* tmp = getenv("TMPDIR");
  return tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
}

}  // namespace

bool ProcessRanksUsable(const std::string& backend, int ranks) {
  if (backend == "cpu" || backend == "cpu-staged") return true;
  if (backend != "cuda" && backend != "cuda-staged") return false;
  // Counted once, in a child: CUDA initialised here would not survive the forks that run
  // the ranks. A child stuck in the driver counts as no GPU after 30 s.
  static const int gpus = [] {
    int fds[2];
    if (pipe(fds) != 0) return 0;
    const pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      const int count = CudaDeviceCount();
      const ssize_t n = write(fds[1], &count, sizeof(count));
      _exit(n == static_cast<ssize_t>(sizeof(count)) ? 0 : 1);
    }
    close(fds[1]);
    int count = 0;
    pollfd ready{.fd = fds[0], .events = POLLIN, .revents = 0};
    if (pid < 0 || poll(&ready, 1, 30000) != 1 ||
        read(fds[0], &count, sizeof(count)) != static_cast<ssize_t>(sizeof(count))) {
      count = 0;
    }
    close(fds[0]);
    if (pid > 0) {
      kill(pid, SIGKILL);  // a no-op once it has exited
      waitpid(pid, nullptr, 0);
    }
    return count;
  }();
  // Host-staged ranks share GPU 0; NCCL ranks need one GPU each.
  return backend == "cuda-staged" ? gpus > 0 : ranks <= gpus;
}

absl::Status RunRankProcesses(int size,
                              const std::function<absl::Status(RankContext&, std::string*)>& body,
                              const RankProcessesOptions& options,
                              std::vector<std::string>* outputs) {
  if (size < 1) return absl::InvalidArgumentError(absl::StrCat("size ", size, " must be >= 1"));
  std::string dir = TempRoot() + "/ballast-ranks-XXXXXX";
  if (mkdtemp(dir.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp in ", TempRoot(), ": ", strerror(errno)));
  }
  std::vector<pid_t> pids;
  absl::Status fork_failed;
  for (int r = 0; r < size; ++r) {
    const pid_t pid = fork();
    if (pid == 0) RunChild(r, size, dir, body, options);
    if (pid < 0) {
      // The ranks already started would wait for this one until their timeout.
      fork_failed = absl::InternalError(absl::StrCat("rank ", r, ": fork: ", strerror(errno)));
      for (pid_t started : pids) kill(started, SIGKILL);
      break;
    }
    pids.push_back(pid);
  }

  const absl::Time deadline = absl::Now() + options.deadline;
  std::vector<Outcome> outcomes;
  for (size_t r = 0; r < pids.size(); ++r) {
    outcomes.push_back(Reap(pids[r], deadline, options.deadline, dir, static_cast<int>(r)));
  }
  if (outputs != nullptr) {
    outputs->assign(size, "");
    for (int r = 0; r < size; ++r) (*outputs)[r] = ReadFile(absl::StrCat(dir, "/rank-", r, ".out"));
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  if (!fork_failed.ok()) return fork_failed;
  // A rank that crashed or hung is named before the peers whose collectives then failed.
  for (bool causes : {true, false}) {
    for (size_t r = 0; r < outcomes.size(); ++r) {
      const absl::Status& s = outcomes[r].status;
      if (s.ok() || outcomes[r].cause != causes) continue;
      return absl::Status(s.code(), absl::StrCat("rank ", r, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace ballast::testing
