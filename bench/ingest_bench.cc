// Coordinator ingest under load: simulated agents totalling --devices devices, each
// reporting --rate times a second, against a real ballast-coordinator process on
// loopback. Prints one JSON object:
//   reports offered / accepted / rejected / dropped (sender could not keep up),
//   the coordinator's CPU (cores, from /proc), and the latency from the first report that
//   reveals a straggler to the plan reaching the simulated agent (p50, p99 over groups).
//
// As a soak (`scripts/bench soak`), agents also come and go (--churn_per_second): a
// session ends, and either the same agent reconnects with the same workers (an agent
// restart) or a new agent takes its devices for a new job (a job ends, another starts).
// With --sample_every it prints, over time, the coordinator's resident memory and the
// size of its status reply and of /metrics, which must stay flat once the first
// departed jobs are forgotten (--coordinator_flags=--forget_after=...).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
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
ABSL_FLAG(double, churn_per_second, 0,
          "Agent sessions ended (and replaced) per second, over all agents; 0 = none");
ABSL_FLAG(double, sample_every, 0,
          "Print the coordinator's memory, status and /metrics size this often (seconds)");
ABSL_FLAG(std::string, coordinator_flags, "", "Extra coordinator flags, space-separated");

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
  std::map<std::string, double> straggle_sent;  // job/group -> first straggling report sent
  std::map<std::string, double> plan_arrived;   // job/group -> first plan received
  std::atomic<int64_t> offered{0};
  std::atomic<int64_t> dropped{0};
  std::atomic<int64_t> rejected{0};
  std::atomic<int64_t> sessions{0};
  std::atomic<int64_t> failed_sessions{0};
  std::atomic<bool> stop{false};
};

// One agent session: hello with its workers, then a batch of reports every period until
// `until` (or the end of the run); ends the stream cleanly, so every report written is
// read by the coordinator.
void RunSession(const std::string& agent_id, const std::string& job, int first_device,
                int devices, const std::string& address, double start, double until,
                int64_t& step, double& next, Shared& shared) {
  const int group_size = absl::GetFlag(FLAGS_group_size);
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  auto stub = ballast::v1::AgentService::NewStub(channel);
  grpc::ClientContext context;
  auto stream = stub->Session(&context);
  shared.sessions++;
  ballast::v1::AgentMessage hello;
  hello.mutable_hello()->set_agent_id(agent_id);
  for (int d = first_device; d < first_device + devices; ++d) {
    ballast::v1::WorkerIdentity* w = hello.mutable_hello()->add_workers();
    w->set_job(job);
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
  if (!stream->Write(hello)) {
    shared.failed_sessions++;
    stream->Finish();
    return;
  }
  std::thread reader([&] {
    ballast::v1::CoordinatorMessage m;
    while (stream->Read(&m)) {
      if (m.has_rejected()) shared.rejected++;
      if (!m.has_plan()) continue;
      std::lock_guard<std::mutex> lock(shared.mu);
      shared.plan_arrived.emplace(absl::StrCat(job, "/", m.plan().plan().group()), Now());
    }
  });
  const double period = 1.0 / absl::GetFlag(FLAGS_rate);
  const double straggle_at = start + absl::GetFlag(FLAGS_straggle_at);
  const int stragglers = absl::GetFlag(FLAGS_stragglers);
  bool ok = true;
  while (!shared.stop && Now() < until) {
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
      r->set_job(job);
      r->set_group(absl::StrCat("g", group));
      r->set_rank(d % group_size);
      r->mutable_step()->set_step(step);
      ballast::v1::BlockTiming* b = r->mutable_step()->add_blocks();
      b->set_block(0);
      b->set_compute_seconds((straggles ? 0.02 : 0.01) * (1 + 0.01 * (step % 3)));
      b->set_units_computed(8);
      if (straggles) {
        std::lock_guard<std::mutex> lock(shared.mu);
        shared.straggle_sent.emplace(absl::StrCat(job, "/g", group), Now());
      }
    }
    if (!stream->Write(batch)) {
      ok = false;
      break;
    }
    shared.offered += devices;
  }
  if (ok && !shared.stop) {
    stream->WritesDone();  // a clean leave: the coordinator reads what was written
    reader.join();
  } else {
    context.TryCancel();
    reader.join();
  }
  if (!stream->Finish().ok() && !shared.stop) shared.failed_sessions++;
}

// An agent slot: sessions one after another. Each ends after an exponential lifetime
// (mean agents / churn rate); then the same agent reconnects, or (every other time) a new
// agent takes the devices for a new job.
void RunAgent(int agent, int first_device, int devices, const std::string& address,
              double start, Shared& shared) {
  const double churn = absl::GetFlag(FLAGS_churn_per_second);
  const double mean_life = churn > 0 ? absl::GetFlag(FLAGS_agents) / churn : 0;
  std::mt19937_64 rng(agent);
  std::exponential_distribution<double> life(mean_life > 0 ? 1 / mean_life : 1);
  int64_t step = 0;
  double next = start;
  for (int generation = 0; !shared.stop; ++generation) {
    // Without churn all agents serve one job. With churn each agent slot has its own job,
    // from the start, so the cluster holds as many jobs at every moment (plus those left
    // and not yet forgotten): what grows after that is the coordinator's, not the load's.
    const int incarnation = generation / 2;  // a new agent and job every second session
    const std::string agent_id = absl::StrCat("agent-", agent, "-", incarnation);
    const std::string job = churn > 0 ? absl::StrCat("ingest-", agent, "-", incarnation) : "ingest";
    const double until = mean_life > 0 ? Now() + life(rng) : std::numeric_limits<double>::infinity();
    RunSession(agent_id, job, first_device, devices, address, start, until, step, next, shared);
  }
}

// The value of an unlabelled series in a Prometheus text exposition; -1 when absent.
double MetricValue(const std::string& body, absl::string_view name) {
  const std::string key = absl::StrCat("\n", name, " ");
  const size_t at = body.find(key);
  return at == std::string::npos ? -1 : std::stod(body.substr(at + key.size()));
}

// Resident memory of a process, from /proc/PID/status (MB).
double ResidentMegabytes(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (absl::StartsWith(line, "VmRSS:")) return std::stod(line.substr(6)) / 1024;
  }
  return -1;
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
    std::vector<std::string> args = {binary, listen, store, metrics};
    for (absl::string_view flag : absl::StrSplit(absl::GetFlag(FLAGS_coordinator_flags), ' ',
                                                 absl::SkipEmpty())) {
      args.emplace_back(flag);
    }
    std::vector<char*> argv_c;
    for (std::string& a : args) argv_c.push_back(a.data());
    argv_c.push_back(nullptr);
    execv(binary.c_str(), argv_c.data());
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
  // Samples over time: memory, status reply and /metrics sizes, what the coordinator holds.
  struct Sample {
    double t, rss_mb, heap_mb;
    size_t status_bytes, metrics_bytes;
  };
  std::vector<Sample> samples;
  const double sample_every = absl::GetFlag(FLAGS_sample_every);
  const double end = start + absl::GetFlag(FLAGS_seconds);
  for (double next = start + sample_every; sample_every > 0 && next < end; next += sample_every) {
    std::this_thread::sleep_for(std::chrono::duration<double>(next - Now()));
    grpc::ClientContext c;
    c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    ballast::v1::ClusterStatus st;
    (void)admin->GetStatus(&c, ballast::v1::GetStatusRequest(), &st);
    absl::StatusOr<std::string> body = ballast::testing::HttpGet(port + 1, "/metrics");
    Sample sample{Now() - start, ResidentMegabytes(pid),
                  body.ok() ? MetricValue(*body, "ballast_coordinator_heap_in_use_bytes") / 1e6 : -1,
                  st.ByteSizeLong(), body.ok() ? body->size() : 0};
    samples.push_back(sample);
    std::printf(
        "{\"bench\":\"soak_sample\",\"seconds\":%.0f,\"coordinator_rss_mb\":%.1f,"
        "\"coordinator_heap_mb\":%.1f,"
        "\"status_bytes\":%zu,\"metrics_bytes\":%zu,\"jobs\":%d,\"agents\":%d,\"workers\":%d,"
        "\"sessions\":%lld,\"reports_offered\":%lld}\n",
        sample.t, sample.rss_mb, sample.heap_mb, sample.status_bytes, sample.metrics_bytes, st.jobs_size(),
        st.agents(), st.workers(), static_cast<long long>(shared.sessions.load()),
        static_cast<long long>(shared.offered.load()));
    std::fflush(stdout);
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(end - Now()));
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
    accepted = MetricValue(*body, "ballast_coordinator_reports_total{result=\"accepted\"}");
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
      "\"workers_registered\":%d,\"sessions\":%lld,\"sessions_failed\":%lld}\n",
      devices, agents, shared.offered.load() / wall, static_cast<long long>(shared.offered.load()),
      accepted, static_cast<long long>(shared.rejected.load()), static_cast<long long>(shared.dropped.load()),
      (cpu1 - cpu0) / wall, shared.straggle_sent.size(), static_cast<long long>(relieved),
      Percentile(latencies, 0.5), Percentile(latencies, 0.99), status.workers(),
      static_cast<long long>(shared.sessions.load()),
      static_cast<long long>(shared.failed_sessions.load()));
  if (!samples.empty()) {
    // Flat memory: the largest resident size and heap in use after the first minute
    // against the first sample after it; status and /metrics sizes at their largest.
    double after_minute = -1, peak = 0, heap_after_minute = -1, heap_peak = 0;
    size_t status_max = 0, metrics_max = 0;
    for (const Sample& x : samples) {
      if (x.t >= 60 && after_minute < 0) after_minute = x.rss_mb;
      if (x.t >= 60 && heap_after_minute < 0) heap_after_minute = x.heap_mb;
      if (x.t >= 60) peak = std::max(peak, x.rss_mb);
      if (x.t >= 60) heap_peak = std::max(heap_peak, x.heap_mb);
      status_max = std::max(status_max, x.status_bytes);
      metrics_max = std::max(metrics_max, x.metrics_bytes);
    }
    std::printf(
        "{\"bench\":\"soak\",\"minutes\":%.1f,\"churn_per_second\":%.2f,\"sessions\":%lld,"
        "\"rss_mb_at_1_min\":%.1f,\"rss_mb_peak_after_1_min\":%.1f,\"rss_mb_last\":%.1f,"
        "\"heap_mb_at_1_min\":%.1f,\"heap_mb_peak_after_1_min\":%.1f,\"heap_mb_last\":%.1f,"
        "\"status_bytes_max\":%zu,\"metrics_bytes_max\":%zu}\n",
        wall / 60, absl::GetFlag(FLAGS_churn_per_second),
        static_cast<long long>(shared.sessions.load()), after_minute, peak,
        samples.back().rss_mb, heap_after_minute, heap_peak, samples.back().heap_mb, status_max,
        metrics_max);
  }
  return 0;
}
