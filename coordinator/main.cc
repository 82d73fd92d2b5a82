// ballast-coordinator: one per cluster. Serves agents (ballast.v1.AgentService) and
// operators (ballast.v1.Admin) over gRPC, with grpc.health.v1 and server reflection;
// exposes Prometheus metrics; keeps policies, pauses and cordons in SQLite.
//
//   ballast-coordinator --listen=0.0.0.0:7070 --metrics=0.0.0.0:9464
//       --store=/var/lib/ballast/coordinator.db
//       --tls_cert=coord.crt --tls_key=coord.key --tls_client_ca=ca.crt
//       --admin_token_file=/etc/ballast/admin-token --admin_allowed_cns=ballastctl-admin
#include <grpcpp/grpcpp.h>
#include <prometheus/registry.h>

#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/ascii.h"
#include "absl/synchronization/notification.h"
#include "common/clock.h"
#include "common/daemon.h"
#include "common/logging.h"
#include "common/protobuf_log.h"
#include "coordinator/admin_service.h"
#include "coordinator/agent_service.h"
#include "coordinator/coordinator.h"
#include "coordinator/fixed_costs.h"
#include "coordinator/metrics.h"
#include "coordinator/policy_store.h"
#include "coordinator/server.h"
#include "coordinator/speed_model.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:7070", "gRPC address for agents and admin calls");
ABSL_FLAG(std::string, health_listen, "",
          "Plaintext address serving only grpc.health.v1, for probes that cannot do mTLS "
          "('' = off)");
ABSL_FLAG(std::string, metrics, "127.0.0.1:9464", "Prometheus /metrics address ('' = off)");
ABSL_FLAG(std::string, store, "/var/lib/ballast/coordinator.db",
          "SQLite file for policies, pauses and cordons");
ABSL_FLAG(absl::Duration, tick, absl::Milliseconds(50),
          "How often groups are checked for a due decision");
ABSL_FLAG(double, link_bytes_per_second, 1e9,
          "Bandwidth assumed between ranks of a group, for offload costs, until the "
          "group's offloads have measured it (a prior)");
ABSL_FLAG(absl::Duration, link_stale_after, absl::Seconds(60),
          "A pair of ranks whose newest offload transfer is older than this is priced at "
          "its fastest measured transfer until offloads measure it again (a link priced out "
          "is otherwise never measured again)");
ABSL_FLAG(absl::Duration, plan_dwell, absl::Seconds(2),
          "After a group's plan changes, how long only a large improvement (see "
          "--dwell_hysteresis) changes it again");
ABSL_FLAG(double, dwell_hysteresis, 0.3,
          "Improvement a block's new plan needs during --plan_dwell, in [0, 1] (a chronic "
          "straggler's or a cordon's reshard needs the job's hysteresis only)");
ABSL_FLAG(absl::Duration, flap_hold, absl::Seconds(30),
          "A plan that undoes the change before it within this long is a flap: the "
          "group's changes are then held this long by --dwell_hysteresis, doubling with "
          "each further flap (up to 16x) and halving after each quiet hold. Balancing that "
          "calm ends that soon after it started is one too, and then a straggler must last "
          "twice as long as that blip balanced, at most the hold (or turn chronic), before an "
          "all-local group balances again; 0: off");
ABSL_FLAG(absl::Duration, marginal_straggler_for, absl::Seconds(3),
          "How long a marginal straggler (within 1 + 3 x the straggler threshold) must "
          "last before a calm group starts balancing, and a marginal skew of an expert "
          "block's loads before its experts are split; a larger one is balanced at once");
ABSL_FLAG(absl::Duration, known_kind_wait_min, absl::ZeroDuration(),
          "How long a straggle by a rank whose kind (a slower device, or throttled whole) "
          "was measured before it began must last before it is resharded at once: longer "
          "than the group's longest blip within --known_kind_blip_memory that was about as "
          "slow (a straggle that ended on its own, nothing done about it: "
          "coordinator/straggler_judge.h), at least this and at most --known_kind_wait_max; "
          "0 <= min <= max");
ABSL_FLAG(absl::Duration, known_kind_wait_max, absl::Seconds(5),
          "A straggle that ended on its own after this long is a contention that came and "
          "went, no blip: the known kind's wait (--known_kind_wait_min) stays under it");
ABSL_FLAG(absl::Duration, known_kind_blip_memory, absl::Minutes(2),
          "How long a blip counts towards the known kind's wait after it ended: the wait is "
          "the longest blip within this, so a phase of blips (a job's warm-up, a noisy "
          "neighbour) stops delaying reshards once it has passed; > 0");
ABSL_FLAG(std::string, fixed_costs, "auto",
          "Balance each rank's collective time beyond the least together with its units, "
          "scaled by its compute slowdown (coordinator/fixed_costs.h): auto: for a straggler "
          "whose collectives were measured slower than the group's calm ones (a CPU quota, a "
          "co-tenant: coordinator/straggler_kind.h); on: for every straggler; off: compute "
          "alone");
ABSL_FLAG(bool, reshard_slower_devices, true,
          "A straggler measured slow in its compute alone, its collectives as fast as calm "
          "(a slower device: coordinator/straggler_kind.h), is chronic at once: its reshard "
          "is priced without waiting the job's reshard_after (reshards stay reshard_after "
          "apart); false: it waits reshard_after as any straggler");
ABSL_FLAG(bool, reshard_still_last, true,
          "A rank throttled whole that a reshard relieved too little, still arriving last at "
          "the collectives (its collectives the group's least, the others' 1.25x that or "
          "more, its contention on: coordinator/straggler_kind.h), is moved further without "
          "waiting reshard_after since that reshard; false: every move waits reshard_after "
          "after the last");
ABSL_FLAG(bool, reshard_throttled_ranks, true,
          "A straggler measured throttled whole, its collectives slowed with its compute (a "
          "CPU quota, a co-tenant: coordinator/straggler_kind.h), is chronic at once, as "
          "--reshard_slower_devices makes a slower device (its offloads barely relieve it); "
          "false where co-tenants come and go in less than reshard_after (each would cost a "
          "move and a move back)");
ABSL_FLAG(std::string, throttled_price, "floor",
          "How a straggler measured throttled whole (a CPU quota, a co-tenant) is priced, its "
          "compute timers seeing a fraction of a quota (coordinator/fixed_costs.h): floor: its "
          "units by its timers, its collectives at what they cost it straggling on the calm "
          "split (nothing with --fixed_costs=off); step: everything it does at the slowdown "
          "its step measured, the group's step over the calm one on the same split; timers: by "
          "its timers, as any rank. On the small GPT's 2x quota, floor and step split as the "
          "best static plan does where timers ran 1.205x its step, and floor predicts the "
          "steps, adding near the balanced split the waits the rank's arrival spread costs "
          "(coordinator/arrival_spread.h; docs/benchmarks.md, 2026-12-04 (f) and (g))");
ABSL_FLAG(bool, unit_count_fit, true,
          "Price each rank's block compute as fixed seconds plus seconds per unit where a line "
          "fitted over the unit counts it ran finds a fixed part "
          "(coordinator/unit_count_fit.h); false: seconds per unit alone");
ABSL_FLAG(bool, step_feedback, false,
          "Probe the straggler the compute timers judge with a factor on its speed, kept while "
          "the measured step improves and dropped when it does not "
          "(coordinator/step_feedback.h); for stragglers slower than their timers show (CPU "
          "quotas: 5-12% shorter steps; under a slower device 6-8% longer, "
          "docs/benchmarks.md). False: the compute timers alone");
ABSL_FLAG(bool, offload_check, true,
          "Measure the straggler's offloads against the best plan without them (one probe "
          "a straggler, again every 5 minutes) and refuse them where they are no faster "
          "(coordinator/offload_check.h); false: offloads as the model prices them");
ABSL_FLAG(int32_t, max_message_bytes, 4 << 20,
          "Largest gRPC message accepted (a hello, a batch of reports, an admin call): with "
          "the shape limits, a bound on what one agent session can make the coordinator "
          "hold");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate (chain) of this server; with --tls_key, serves TLS");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA that signs client certificates; set, every client (agents, ballastctl) must "
          "present one it verifies (mTLS)");
ABSL_FLAG(std::string, admin_token_file, "",
          "File holding the bearer token admin calls must carry (trailing newline ignored)");
ABSL_FLAG(std::vector<std::string>, admin_allowed_cns, {},
          "Comma-separated client-certificate common names allowed to call the admin API "
          "without a token (needs --tls_client_ca)");
ABSL_FLAG(bool, allow_insecure_admin, false,
          "Serve the admin API without authorisation on a non-loopback --listen address");
ABSL_FLAG(std::string, agent_token_file, "",
          "File holding the bearer token agents must carry (trailing newline ignored); "
          "needed on a non-loopback --listen address without --tls_client_ca");
ABSL_FLAG(bool, allow_insecure_agents, false,
          "Serve agents without authenticating them on a non-loopback --listen address");
ABSL_FLAG(absl::Duration, agent_write_timeout, absl::Seconds(10),
          "An agent that has not read what it was sent for this long is dropped");
ABSL_FLAG(absl::Duration, forget_after, absl::Minutes(10),
          "A group with no attached worker and no report for this long is forgotten "
          "(policies stay)");
ABSL_FLAG(int32_t, max_workers_per_agent, 1024, "Most workers one agent may announce");
ABSL_FLAG(int32_t, max_groups_per_agent, 256, "Most TP groups one agent's workers may span");
ABSL_FLAG(int32_t, max_jobs_per_agent, 64, "Most jobs one agent's workers may span");
ABSL_FLAG(int32_t, max_units_per_block, 1 << 20,
          "Most units a worker may announce in one block (each is held as 4 bytes)");
ABSL_FLAG(int32_t, max_blocks_per_worker, 64, "Most blocks a worker may announce");
ABSL_FLAG(int64_t, max_shape_bytes_per_agent, int64_t{64} << 20,
          "Most bytes the block shapes of one agent's attached workers may make the "
          "coordinator hold (4 a unit)");

namespace {

constexpr char kVersion[] = "0.1.0";

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("ballast-coordinator: Ballast's cluster coordinator");
  absl::ParseCommandLine(argc, argv);
  ballast::RateLimitProtobufLogs();      // before any server or channel parses a message
  using namespace ballast::coordinator;  // NOLINT: a main file

  if (absl::GetFlag(FLAGS_tick) <= absl::ZeroDuration()) {
    std::fprintf(stderr, "--tick must be positive\n");
    return 2;
  }
  if (absl::GetFlag(FLAGS_agent_write_timeout) <= absl::ZeroDuration()) {
    std::fprintf(stderr, "--agent_write_timeout must be positive\n");
    return 2;
  }
  CoordinatorOptions options;
  options.link_bytes_per_second = absl::GetFlag(FLAGS_link_bytes_per_second);
  options.link_stale_after = absl::GetFlag(FLAGS_link_stale_after);
  options.plan_dwell = absl::GetFlag(FLAGS_plan_dwell);
  options.dwell_hysteresis = absl::GetFlag(FLAGS_dwell_hysteresis);
  options.flap_hold = absl::GetFlag(FLAGS_flap_hold);
  options.marginal_straggler_for = absl::GetFlag(FLAGS_marginal_straggler_for);
  options.known_kind_wait_min = absl::GetFlag(FLAGS_known_kind_wait_min);
  options.known_kind_wait_max = absl::GetFlag(FLAGS_known_kind_wait_max);
  options.known_kind_blip_memory = absl::GetFlag(FLAGS_known_kind_blip_memory);
  absl::StatusOr<FixedCostsMode> fixed_costs =
      ParseFixedCostsMode(absl::GetFlag(FLAGS_fixed_costs));
  if (!fixed_costs.ok()) {
    BALLAST_LOG(ERROR) << "--fixed_costs: " << fixed_costs.status().message();
    return 2;  // a usage error
  }
  options.fixed_costs = *fixed_costs;
  options.reshard_slower_devices = absl::GetFlag(FLAGS_reshard_slower_devices);
  options.reshard_throttled_ranks = absl::GetFlag(FLAGS_reshard_throttled_ranks);
  options.reshard_still_last = absl::GetFlag(FLAGS_reshard_still_last);
  absl::StatusOr<ThrottledPrice> throttled_price =
      ParseThrottledPrice(absl::GetFlag(FLAGS_throttled_price));
  if (!throttled_price.ok()) {
    BALLAST_LOG(ERROR) << "--throttled_price: " << throttled_price.status().message();
    return 2;  // a usage error
  }
  options.throttled_price = *throttled_price;
  options.unit_count_fit = absl::GetFlag(FLAGS_unit_count_fit);
  if (absl::GetFlag(FLAGS_step_feedback)) options.step_feedback = StepFeedbackOptions{};
  if (!absl::GetFlag(FLAGS_offload_check)) options.offload_check.reset();
  options.forget_after = absl::GetFlag(FLAGS_forget_after);
  options.max_workers_per_agent = absl::GetFlag(FLAGS_max_workers_per_agent);
  options.max_groups_per_agent = absl::GetFlag(FLAGS_max_groups_per_agent);
  options.max_jobs_per_agent = absl::GetFlag(FLAGS_max_jobs_per_agent);
  options.max_units_per_block = absl::GetFlag(FLAGS_max_units_per_block);
  options.max_blocks_per_worker = absl::GetFlag(FLAGS_max_blocks_per_worker);
  options.max_shape_bytes_per_agent = absl::GetFlag(FLAGS_max_shape_bytes_per_agent);
  // The store only once the flags are read: a flag rejected above leaves no database.
  const std::string store_path = absl::GetFlag(FLAGS_store);
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(store_path).parent_path(), ec);
  auto store = SqlitePolicyStore::Open(store_path);
  if (!store.ok()) {
    BALLAST_LOG(ERROR) << "cannot open store " << store_path << ": " << store.status();
    return 1;
  }
  auto speeds = SpeedModel::Create(SpeedModelOptions{}, ballast::RealClock());
  if (!speeds.ok()) {
    BALLAST_LOG(ERROR) << speeds.status();
    return 1;
  }
  auto coordinator =
      Coordinator::Create(options, ballast::RealClock(), store->get(), speeds->get());
  if (!coordinator.ok()) {
    BALLAST_LOG(ERROR) << coordinator.status();
    // A bad flag value is a usage error.
    return coordinator.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }

  AgentServiceImpl agent_service(coordinator->get(),
                                 {.write_timeout = absl::GetFlag(FLAGS_agent_write_timeout)});
  AdminServiceImpl admin_service(coordinator->get());
  ServerOptions server_options;
  server_options.address = absl::GetFlag(FLAGS_listen);
  server_options.health_address = absl::GetFlag(FLAGS_health_listen);
  server_options.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  ServerSecurityOptions& security = server_options.security;
  security.tls = {.cert = absl::GetFlag(FLAGS_tls_cert),
                  .key = absl::GetFlag(FLAGS_tls_key),
                  .ca = absl::GetFlag(FLAGS_tls_client_ca)};
  security.admin_token_file = absl::GetFlag(FLAGS_admin_token_file);
  for (const std::string& cn : absl::GetFlag(FLAGS_admin_allowed_cns)) {
    const absl::string_view trimmed = absl::StripAsciiWhitespace(cn);
    if (!trimmed.empty()) security.admin_allowed_cns.emplace_back(trimmed);
  }
  security.allow_insecure_admin = absl::GetFlag(FLAGS_allow_insecure_admin);
  security.agent_token_file = absl::GetFlag(FLAGS_agent_token_file);
  security.allow_insecure_agents = absl::GetFlag(FLAGS_allow_insecure_agents);
  absl::StatusOr<RunningServer> running =
      StartServer(server_options, &agent_service, &admin_service);
  if (!running.ok()) {
    BALLAST_LOG(ERROR) << running.status().message();
    return 1;
  }
  const int port = running->port;
  const std::shared_ptr<const AdminAuthorizer> admin_auth = running->admin_auth;
  std::unique_ptr<grpc::Server>& server = running->server;

  auto registry = std::make_shared<prometheus::Registry>();
  CoordinatorMetrics metrics(*registry, kVersion);
  auto exposer = ballast::ServeMetrics(absl::GetFlag(FLAGS_metrics), registry);
  if (!exposer.ok()) {
    BALLAST_LOG(ERROR) << exposer.status().message();
    return 1;
  }
  BALLAST_LOG(INFO) << "ballast-coordinator " << kVersion << " listening on "
                    << absl::GetFlag(FLAGS_listen) << " (port " << port << "), metrics on "
                    << absl::GetFlag(FLAGS_metrics) << ", store " << store_path << ", transport "
                    << (security.tls.cert.empty() ? "plaintext"
                        : security.tls.ca.empty() ? "TLS"
                                                  : "mTLS")
                    << ", admin auth " << (admin_auth->enabled() ? "required" : "off")
                    << ", agent auth "
                    << (!security.tls.ca.empty()         ? "mTLS"
                        : running->agent_auth->enabled() ? "token"
                                                         : "off")
                    << (running->health_server
                            ? absl::StrCat(", plaintext health on port ", running->health_port)
                            : "");

  absl::Notification& shutdown = ballast::ShutdownOnSignal();
  std::thread ticker([&] {
    absl::Time next_metrics = absl::InfinitePast();
    absl::Time next_sweep = absl::Now() + absl::Minutes(1);
    while (!shutdown.WaitForNotificationWithTimeout(absl::GetFlag(FLAGS_tick))) {
      (*coordinator)->Tick();
      const absl::Time now = absl::Now();
      if (now >= next_metrics) {
        auto status = (*coordinator)->Status("");
        if (status.ok()) {
          metrics.Update(*status, (*coordinator)->counters(), (*speeds)->counters());
        }
        metrics.UpdateAdminAuth(admin_auth->counters());
        metrics.Observe((*coordinator)->TakeObservations());
        next_metrics = now + absl::Milliseconds(500);
      }
      if (now >= next_sweep) {
        (*speeds)->Sweep();
        next_sweep = now + absl::Minutes(1);
      }
    }
  });
  shutdown.WaitForNotification();
  BALLAST_LOG(INFO) << "ballast-coordinator shutting down";
  ticker.join();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  if (running->health_server) running->health_server->Shutdown();
  return 0;
}
