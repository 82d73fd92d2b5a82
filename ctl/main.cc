// ballastctl: the operators' command line for the coordinator's admin API.
//
//   ballastctl --coordinator=coord:7070 status
//   ballastctl policy set vit mode=migrate
//   ballastctl --json explain vit tp0
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "ctl/commands.h"

ABSL_FLAG(std::string, coordinator, "127.0.0.1:7070", "Coordinator address (host:port)");
ABSL_FLAG(bool, json, false, "Print JSON instead of tables");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(5), "Deadline of each call");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "ballastctl [--coordinator=HOST:PORT] [--json] status|policy|pause|resume|cordon|"
      "uncordon|explain ...");
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  std::vector<std::string> args(positional.begin() + 1, positional.end());
  if (absl::GetFlag(FLAGS_timeout) <= absl::ZeroDuration()) {
    std::cerr << "ballastctl: --timeout must be positive\n";
    return 2;
  }
  auto client =
      ballast::ctl::NewGrpcAdminClient(absl::GetFlag(FLAGS_coordinator), absl::GetFlag(FLAGS_timeout));
  return ballast::ctl::RunCommand(args, absl::GetFlag(FLAGS_json), *client, std::cout, std::cerr);
}
