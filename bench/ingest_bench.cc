// Coordinator ingest under load: simulated agents totalling --devices devices, each
// reporting --rate times a second, against a real ballast-coordinator process on
// loopback. Prints one JSON object:
//   reports offered / accepted / rejected / dropped (sender could not keep up),
//   the coordinator's CPU (cores, from /proc), and the latency from the first report that
//   reveals a straggler to the plan reaching the simulated agent (p50, p99 over groups).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "ballast/v1/admin.grpc.pb.h"
#include "ballast/v1/agent.grpc.pb.h"
#include "testing/http_get.h"

ABSL_FLAG(std::string, coordinator_binary, "build-release/coordinator/ballast-coordinator",
          "Path of the ballast-coordinator binary to measure");
ABSL_FLAG(int, devices, 10000, "Simulated devices (workers)");
ABSL_FLAG(int, agents, 50, "Simulated agents (devices are split evenly)");
ABSL_FLAG(int, group_size, 8, "TP group size");
ABSL_FLAG(double, rate, 10, "Reports per device per second");
ABSL_FLAG(int, stragglers, 100, "Groups in which one rank starts straggling");
ABSL_FLAG(double, seconds, 12, "Run length");
ABSL_FLAG(double, straggle_at, 4, "When (seconds into the run) the stragglers appear");
ABSL_FLAG(int, port, 17070, "Coordinator port on 127.0.0.1");

namespace {

using Clock = std::chrono::steady_clock;

double Now() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

// CPU seconds (user + system) of a process, from /proc/PID/stat.
double CpuSeconds(pid_t pid) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string content((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t close = content.rfind(')');
  if (close == std::string::npos) return 0;
  std::vector<std::string> fields = absl::StrSplit(content.substr(close + 2), ' ');
  // After the command: state is field 3; utime and stime are fields 14 and 15.
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  return (std::stod(fields[11]) + std::stod(fields[12])) / ticks;
}

struct Shared {
  std::mutex mu;
  std::map<std::string, double> straggle_sent;  // group -> first straggling report sent
  std::map<std::string, double> plan_arrived;   // group -> first plan received
  std::atomic<int64_t> offered{0};
  std::atomic<int64_t> dropped{0};
  std::atomic<int64_t> rejected{0};
  std::atomic<bool> stop{false};
};

void RunAgent(int agent, int first_device, int devices, const std::string& address,
              double start, Shared& shared) {
  const int group_size = absl::GetFlag(FLAGS_group_size);
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  auto stub = ballast::v1::AgentService::NewStub(channel);
  grpc::ClientContext context;
  auto stream = stub->Session(&context);
  ballast::v1::AgentMessage hello;
  hello.mutable_hello()->set_agent_id(absl::StrCat("agent-", agent));
  for (int d = first_device; d < first_device + devices; ++d) {
    ballast::v1::WorkerIdentity* w = hello.mutable_hello()->add_workers();
    w->set_job("ingest");
    w->set_group(absl::StrCat("g", d / group_size));
    w->set_rank(d % group_size);
    w->set_group_size(group_size);
    w->set_device(absl::StrCat("dev", d));
    ballast::v1::BlockInfo* b = w->add_blocks();
    b->set_block(0);
    b->set_num_units(8 * group_size);
    for (int u = 0; u < 8 * group_size; ++u) b->add_owner_of_unit(u / 8);
    b->set_unit_bytes(64 * 768 * 2 * 4);
  }
  if (!stream->Write(hello)) return;
  std::thread reader([&] {
    ballast::v1::CoordinatorMessage m;
    while (stream->Read(&m)) {
      if (m.has_rejected()) shared.rejected++;
      if (!m.has_plan()) continue;
      std::lock_guard<std::mutex> lock(shared.mu);
      shared.plan_arrived.emplace(m.plan().plan().group(), Now());
    }
  });
  const double period = 1.0 / absl::GetFlag(FLAGS_rate);
  const double straggle_at = start + absl::GetFlag(FLAGS_straggle_at);
  const int stragglers = absl::GetFlag(FLAGS_stragglers);
  int64_t step = 0;
  double next = start;
  while (!shared.stop) {
    const double now = Now();
    if (now < next) {
      std::this_thread::sleep_for(std::chrono::duration<double>(next - now));
      continue;
    }
    // A sender that falls a whole period behind skips that period's reports: they count
    // as dropped, as an agent's bounded queue would drop them.
    while (next + period < now) {
      next += period;
      shared.dropped += devices;
    }
    next += period;
    ++step;
    ballast::v1::AgentMessage batch;
    for (int d = first_device; d < first_device + devices; ++d) {
      const int group = d / group_size;
      const bool straggles = now >= straggle_at && group < stragglers && d % group_size == 0;
      ballast::v1::WorkerReport* r = batch.mutable_reports()->add_reports();
      r->set_job("ingest");
      r->set_group(absl::StrCat("g", group));
      r->set_rank(d % group_size);
      r->mutable_step()->set_step(step);
      ballast::v1::BlockTiming* b = r->mutable_step()->add_blocks();
      b->set_block(0);
      b->set_compute_seconds((straggles ? 0.02 : 0.01) * (1 + 0.01 * (step % 3)));
      b->set_units_computed(8);
      if (straggles) {
        std::lock_guard<std::mutex> lock(shared.mu);
        shared.straggle_sent.emplace(absl::StrCat("g", group), Now());
      }
    }
    if (!stream->Write(batch)) break;
    shared.offered += devices;
  }
  context.TryCancel();
  reader.join();
  stream->Finish();
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string binary = absl::GetFlag(FLAGS_coordinator_binary);
  const int port = absl::GetFlag(FLAGS_port);
  const std::string address = absl::StrCat("127.0.0.1:", port);
  const std::string dir = absl::StrCat("/tmp/ballast-ingest-", getpid());
  std::filesystem::create_directories(dir);

  const pid_t pid = fork();
  if (pid == 0) {
    const std::string listen = absl::StrCat("--listen=", address);
    const std::string store = absl::StrCat("--store=", dir, "/c.db");
    const std::string metrics = absl::StrCat("--metrics=127.0.0.1:", port + 1);
    execl(binary.c_str(), binary.c_str(), listen.c_str(), store.c_str(), metrics.c_str(),
          static_cast<char*>(nullptr));
    std::perror("exec ballast-coordinator");
    _exit(127);
  }
  // Wait (bounded) until the admin API answers.
  auto admin = ballast::v1::Admin::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  bool up = false;
  for (int i = 0; i < 100 && !up; ++i) {
    grpc::ClientContext c;
    c.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
    ballast::v1::ClusterStatus s;
    up = admin->GetStatus(&c, ballast::v1::GetStatusRequest(), &s).ok();
    if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!up) {
    std::fprintf(stderr, "coordinator did not come up at %s\n", address.c_str());
    kill(pid, SIGKILL);
    return 1;
  }

  Shared shared;
  const int devices = absl::GetFlag(FLAGS_devices), agents = absl::GetFlag(FLAGS_agents);
  const double start = Now() + 0.5;
  const double cpu0 = CpuSeconds(pid);
  std::vector<std::thread> threads;
  for (int a = 0; a < agents; ++a) {
    const int first = devices * a / agents, last = devices * (a + 1) / agents;
    threads.emplace_back([&, a, first, last] { RunAgent(a, first, last - first, address, start, shared); });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(start + absl::GetFlag(FLAGS_seconds) - Now()));
  const double cpu1 = CpuSeconds(pid);
  const double wall = Now() - start;
  grpc::ClientContext c;
  ballast::v1::ClusterStatus status;
  (void)admin->GetStatus(&c, ballast::v1::GetStatusRequest(), &status);
  shared.stop = true;
  for (auto& t : threads) t.join();
  // What the coordinator itself counted, once every sender has stopped and its last
  // batch was read (metrics refresh every 500 ms).
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  double accepted = -1;
  if (auto body = ballast::testing::HttpGet(port + 1, "/metrics"); body.ok()) {
    const std::string key = "ballast_coordinator_reports_total{result=\"accepted\"} ";
    if (size_t at = body->find(key); at != std::string::npos) {
      accepted = std::stod(body->substr(at + key.size()));
    }
  }
  kill(pid, SIGTERM);
  waitpid(pid, nullptr, 0);
  std::filesystem::remove_all(dir);

  std::vector<double> latencies;
  int64_t relieved = 0;
  for (const auto& [group, sent] : shared.straggle_sent) {
    auto it = shared.plan_arrived.find(group);
    if (it == shared.plan_arrived.end() || it->second < sent) continue;
    latencies.push_back(it->second - sent);
    ++relieved;
  }
  std::printf(
      "{\"bench\":\"ingest\",\"devices\":%d,\"agents\":%d,\"reports_per_second_offered\":%.0f,"
      "\"reports_offered\":%lld,\"reports_accepted\":%.0f,\"reports_rejected\":%lld,"
      "\"reports_dropped\":%lld,"
      "\"coordinator_cpu_cores\":%.3f,\"straggler_groups\":%zu,\"straggler_groups_relieved\":%lld,"
      "\"plan_latency_p50_seconds\":%.3f,\"plan_latency_p99_seconds\":%.3f,"
      "\"workers_registered\":%d}\n",
      devices, agents, shared.offered.load() / wall, static_cast<long long>(shared.offered.load()),
      accepted, static_cast<long long>(shared.rejected.load()), static_cast<long long>(shared.dropped.load()),
      (cpu1 - cpu0) / wall, shared.straggle_sent.size(), static_cast<long long>(relieved),
      Percentile(latencies, 0.5), Percentile(latencies, 0.99), status.workers());
  return 0;
}
