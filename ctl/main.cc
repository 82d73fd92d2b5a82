// ballastctl: the operators' command line for the coordinator's admin API.
//
//   ballastctl --coordinator=coord:7070 status
//   ballastctl policy set vit mode=migrate
//   ballastctl --json explain vit tp0
//   ballastctl --coordinator=coord:7070 --tls_ca=ca.crt --token_file=~/.ballast/token status
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "common/tls.h"
#include "ctl/commands.h"

ABSL_FLAG(std::string, coordinator, "127.0.0.1:7070", "Coordinator address (host:port)");
ABSL_FLAG(bool, json, false, "Print JSON instead of tables");
ABSL_FLAG(bool, preconfigure, false,
          "Let policy set, pause and resume name a job the coordinator does not know yet");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(5), "Deadline of each call");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA that signs the coordinator's certificate; set (or with --tls_cert), "
          "connects over TLS");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM client certificate, for a coordinator that requires mTLS; needs --tls_key");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, token_file, "",
          "File holding the admin bearer token (the coordinator's --admin_token_file)");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "ballastctl [--coordinator=HOST:PORT] [--json] [--preconfigure] [--tls_ca=CA] "
      "[--tls_cert=CRT "
      "--tls_key=KEY] [--token_file=FILE] status|policy|pause|resume|cordon|uncordon|"
      "explain|hold|release ...");
  // absl::ParseCommandLine reports a bad flag or value (--timeout=-1) and calls exit(1);
  // ballastctl's usage errors exit 2 (docs/operations.md), so an exit while parsing
  // becomes 2 (after flushing what was printed). --help and its kin exit as abseil says.
  static bool parsing = true;
  for (int i = 1; i < argc; ++i) {
    if (absl::StartsWith(argv[i], "--help") || absl::StartsWith(argv[i], "-help")) {
      parsing = false;
    }
  }
  std::atexit([] {
    if (!parsing) return;
    std::fflush(nullptr);
    std::_Exit(2);
  });
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  parsing = false;
  std::vector<std::string> args(positional.begin() + 1, positional.end());
  if (absl::GetFlag(FLAGS_timeout) <= absl::ZeroDuration()) {
    std::cerr << "ballastctl: --timeout must be positive\n";
    return 2;
  }
  ballast::ctl::AdminClientOptions options{.address = absl::GetFlag(FLAGS_coordinator),
                                           .deadline = absl::GetFlag(FLAGS_timeout)};
  // Unusable credential files are usage errors (2), like any other bad flag value.
  auto credentials = ballast::ChannelCredentialsFromFiles({.cert = absl::GetFlag(FLAGS_tls_cert),
                                                           .key = absl::GetFlag(FLAGS_tls_key),
                                                           .ca = absl::GetFlag(FLAGS_tls_ca)});
  if (!credentials.ok()) {
    std::cerr << "ballastctl: " << credentials.status().message() << "\n";
    return 2;
  }
  options.credentials = *std::move(credentials);
  if (!absl::GetFlag(FLAGS_token_file).empty()) {
    absl::StatusOr<std::string> token =
        ballast::ReadBearerTokenFile(absl::GetFlag(FLAGS_token_file));
    if (!token.ok()) {
      std::cerr << "ballastctl: --token_file: " << token.status().message() << "\n";
      return 2;
    }
    options.token = *std::move(token);
  }
  auto client = ballast::ctl::NewGrpcAdminClient(options);
  return ballast::ctl::RunCommand(
      args, {.json = absl::GetFlag(FLAGS_json), .preconfigure = absl::GetFlag(FLAGS_preconfigure)},
      *client, std::cout, std::cerr);
}
