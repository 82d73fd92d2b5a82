// Command lines: NUL-separated arguments, as argv holds them. Leading `--name=value`
// arguments are the flags of ballastctl and ballast-coordinator, parsed as
// absl::ParseCommandLine parses each one (absl::ParseFlag, which cannot exit the
// process) and then checked as the binaries' main() check them: Coordinator::Create
// validates the coordinator's numbers, ValidateServerSecurity (with our own address
// parsing, IsLoopbackAddress) the listen address against the security flags. The rest is
// ballastctl's command (ctl::RunCommand) against a fake admin client.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/marshalling.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "coordinator/server.h"
#include "ctl/commands.h"
#include "fuzz/fuzz_common.h"
#include "testing/fake_admin_client.h"

namespace ballast::fuzz {
namespace {

constexpr size_t kMaxArgs = 64;

// Everything a command line may set, with the binaries' defaults.
struct CommandLine {
  ctl::CommandFlags ctl;
  absl::Duration timeout = absl::Seconds(5);
  coordinator::CoordinatorOptions coordinator;
  std::string listen = "127.0.0.1:7070";
  coordinator::ServerSecurityOptions security;
  std::vector<std::string> allowed_cns;
};

// One `--name[=value]`; false for an unknown flag or a value that does not parse, where
// the binaries stop with a usage error.
bool ParseOne(absl::string_view arg, CommandLine& cl) {
  arg.remove_prefix(2);
  std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(arg, absl::MaxSplits('=', 1));
  const bool has_value = absl::StrContains(arg, '=');
  auto set_bool = [&](absl::string_view name, bool* field) {
    if (kv.first == name) {
      std::string error;
      return has_value ? absl::ParseFlag(kv.second, field, &error) : (*field = true);
    }
    if (absl::string_view negated = kv.first;
        !has_value && absl::ConsumePrefix(&negated, "no") && negated == name) {
      *field = false;
      return true;
    }
    return false;
  };
  std::string error;
  auto parse = [&](auto* field) { return has_value && absl::ParseFlag(kv.second, field, &error); };
  if (set_bool("json", &cl.ctl.json) || set_bool("preconfigure", &cl.ctl.preconfigure) ||
      set_bool("allow_insecure_admin", &cl.security.allow_insecure_admin) ||
      set_bool("allow_insecure_agents", &cl.security.allow_insecure_agents)) {
    return true;
  }
  const absl::string_view name = kv.first;
  if (name == "timeout") return parse(&cl.timeout);
  if (name == "listen") return parse(&cl.listen);
  if (name == "link_bytes_per_second") return parse(&cl.coordinator.link_bytes_per_second);
  if (name == "plan_dwell") return parse(&cl.coordinator.plan_dwell);
  if (name == "dwell_hysteresis") return parse(&cl.coordinator.dwell_hysteresis);
  if (name == "marginal_straggler_for") return parse(&cl.coordinator.marginal_straggler_for);
  if (name == "forget_after") return parse(&cl.coordinator.forget_after);
  if (name == "max_workers_per_agent") return parse(&cl.coordinator.max_workers_per_agent);
  if (name == "max_groups_per_agent") return parse(&cl.coordinator.max_groups_per_agent);
  if (name == "max_jobs_per_agent") return parse(&cl.coordinator.max_jobs_per_agent);
  if (name == "admin_allowed_cns") return parse(&cl.allowed_cns);
  if (name == "tls_cert") return parse(&cl.security.tls.cert);
  if (name == "tls_client_ca") return parse(&cl.security.tls.ca);
  if (name == "admin_token_file") return parse(&cl.security.admin_token_file);
  if (name == "agent_token_file") return parse(&cl.security.agent_token_file);
  return false;
}

// A cluster for the commands to print: one job, one group, one rank.
void Fill(testing::FakeAdminClient& client) {
  v1::JobStatus* job = client.status.add_jobs();
  job->set_job("vit");
  v1::GroupStatus* group = job->add_groups();
  group->set_group("tp0");
  group->set_size(2);
  group->set_plan_summary("v1: all local");
  v1::RankStatus* rank = group->add_ranks();
  rank->set_device("node-1/gpu0");
  rank->set_state("normal");
  client.policies["vit"].set_mode("auto");
  client.explanation.set_job("vit");
  client.explanation.set_group("tp0");
  client.explanation.set_text("no decision yet");
}

}  // namespace
}  // namespace ballast::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ballast;
  using namespace ballast::fuzz;
  QuietLogs();
  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> args;
  for (absl::string_view a : absl::StrSplit(input, '\0')) {
    if (args.size() == kMaxArgs) break;
    args.emplace_back(a);
  }
  CommandLine cl;
  size_t first = 0;
  for (; first < args.size() && absl::StartsWith(args[first], "--"); ++first) {
    if (args[first] == "--") {  // the end of the flags, as for absl
      ++first;
      break;
    }
    if (!ParseOne(args[first], cl)) return 0;  // a usage error: the binary exits
  }
  // ballast-coordinator: its numbers, then its listen address and security flags.
  FuzzCoordinator fc;
  absl::StatusOr<std::unique_ptr<coordinator::Coordinator>> created =
      coordinator::Coordinator::Create(cl.coordinator, &fc.clock, &fc.store, fc.speeds.get());
  FUZZ_CHECK(created.ok() || created.status().code() == absl::StatusCode::kInvalidArgument,
             created.status().ToString());
  for (const std::string& cn : cl.allowed_cns) {
    const absl::string_view trimmed = absl::StripAsciiWhitespace(cn);
    if (!trimmed.empty()) cl.security.admin_allowed_cns.emplace_back(trimmed);
  }
  const absl::Status security = coordinator::ValidateServerSecurity(cl.listen, cl.security);
  const bool loopback = coordinator::IsLoopbackAddress(cl.listen);
  const bool open_admin =
      cl.security.admin_token_file.empty() && cl.security.admin_allowed_cns.empty();
  FUZZ_CHECK(!security.ok() || loopback || !open_admin || cl.security.allow_insecure_admin,
             "an open admin API accepted on non-loopback " + cl.listen);
  // ballastctl: a non-positive timeout is a usage error before any command runs.
  if (cl.timeout <= absl::ZeroDuration()) return 0;
  testing::FakeAdminClient client;
  Fill(client);
  std::ostringstream out, err;
  const int code = ctl::RunCommand({args.begin() + first, args.end()}, cl.ctl, client, out, err);
  FUZZ_CHECK(code >= 0 && code <= 2, "exit code " + std::to_string(code));
  FUZZ_CHECK(code != 2 || !err.str().empty(), "a usage error without a message");
  return 0;
}
