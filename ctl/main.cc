// ballastctl: the operators' command line for the coordinator's admin API.
//
//   ballastctl --coordinator=coord:7070 status
//   ballastctl policy set vit mode=migrate
//   ballastctl --json explain vit tp0
//   ballastctl --coordinator=coord:7070 --tls_ca=ca.crt --token_file=~/.ballast/token status
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "common/tls.h"
#include "ctl/commands.h"

ABSL_FLAG(std::string, coordinator, "127.0.0.1:7070", "Coordinator address (host:port)");
ABSL_FLAG(bool, json, false, "Print JSON instead of tables");
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
      "ballastctl [--coordinator=HOST:PORT] [--json] [--tls_ca=CA] [--tls_cert=CRT "
      "--tls_key=KEY] [--token_file=FILE] status|policy|pause|resume|cordon|uncordon|"
      "explain ...");
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
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
  return ballast::ctl::RunCommand(args, absl::GetFlag(FLAGS_json), *client, std::cout, std::cerr);
}
