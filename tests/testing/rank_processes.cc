#include "testing/rank_processes.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
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
// running the parent's atexit handlers or gtest's reporting.
[[noreturn]] void RunChild(int rank, int size, const std::string& dir,
                           const std::function<absl::Status(RankContext&, std::string*)>& body,
                           const RankProcessesOptions& options) {
  std::string output;
  absl::Status status = [&]() -> absl::Status {
    absl::StatusOr<RendezvousStore> store = RendezvousStore::FileSystem(dir + "/store");
    if (!store.ok()) return store.status();
    absl::StatusOr<RankContext> ctx = StartRank(rank, size, *store, "ranks", options.ranks);
    if (!ctx.ok()) return ctx.status();
    return body(*ctx, &output);
  }();
  const bool written =
      WriteFile(absl::StrCat(dir, "/rank-", rank, ".out"), output) &&
      WriteFile(absl::StrCat(dir, "/rank-", rank, ".status"), EncodeStatus(status));
  _exit(written ? 0 : 3);
}

}  // namespace

bool ProcessRanksUsable(const std::string& backend, int ranks) {
  if (backend == "cpu") return true;
  if (backend != "cuda") return false;
  // Counted once, in a child: CUDA initialised here would not survive the forks that run
  // the ranks.
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
    if (pid < 0 || read(fds[0], &count, sizeof(count)) != static_cast<ssize_t>(sizeof(count))) {
      count = 0;
    }
    close(fds[0]);
    if (pid > 0) waitpid(pid, nullptr, 0);
    return count;
  }();
  return ranks <= gpus;
}

absl::Status RunRankProcesses(int size,
                              const std::function<absl::Status(RankContext&, std::string*)>& body,
                              const RankProcessesOptions& options,
                              std::vector<std::string>* outputs) {
  if (size < 1) return absl::InvalidArgumentError(absl::StrCat("size ", size, " must be >= 1"));
  char dir_template[] = "/tmp/ballast-ranks-XXXXXX";
  if (mkdtemp(dir_template) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp: ", strerror(errno)));
  }
  const std::string dir = dir_template;
  std::vector<pid_t> pids(size, -1);
  std::vector<std::optional<absl::Status>> results(size);
  for (int r = 0; r < size; ++r) {
    const pid_t pid = fork();
    if (pid == 0) RunChild(r, size, dir, body, options);
    if (pid < 0) {
      results[r] = absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
      continue;
    }
    pids[r] = pid;
  }

  // Reap until every rank has exited or the deadline passes; then kill what is left.
  const absl::Time deadline = absl::Now() + options.deadline;
  int running = 0;
  for (pid_t pid : pids) running += pid > 0 ? 1 : 0;
  while (running > 0) {
    const bool late = absl::Now() >= deadline;
    for (int r = 0; r < size; ++r) {
      if (pids[r] <= 0 || results[r].has_value()) continue;
      int wstatus = 0;
      pid_t got = waitpid(pids[r], &wstatus, WNOHANG);
      bool killed = false;
      if (got == 0 && late) {
        kill(pids[r], SIGKILL);
        got = waitpid(pids[r], &wstatus, 0);
        killed = true;
      }
      if (got != pids[r]) continue;
      --running;
      if (killed) {
        results[r] = absl::DeadlineExceededError(absl::StrCat(
            "still running after ", absl::FormatDuration(options.deadline), ": killed"));
      } else if (WIFSIGNALED(wstatus)) {
        results[r] = absl::InternalError(absl::StrCat("killed by signal ", WTERMSIG(wstatus), " (",
                                                      strsignal(WTERMSIG(wstatus)), ")"));
      } else if (WEXITSTATUS(wstatus) != 0) {
        results[r] = absl::InternalError(
            absl::StrCat("exited with status ", WEXITSTATUS(wstatus), " before reporting"));
      } else {
        results[r] = DecodeStatus(ReadFile(absl::StrCat(dir, "/rank-", r, ".status")));
      }
    }
    if (running > 0 && !late) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (outputs != nullptr) {
    outputs->assign(size, "");
    for (int r = 0; r < size; ++r) (*outputs)[r] = ReadFile(absl::StrCat(dir, "/rank-", r, ".out"));
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  for (int r = 0; r < size; ++r) {
    if (!results[r]->ok()) {
      return absl::Status(results[r]->code(),
                          absl::StrCat("rank ", r, ": ", results[r]->message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace ballast::testing
