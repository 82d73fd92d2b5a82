// A grpc.health.v1 client for tests/deploy/image_test.sh: it asks what the kubelet's
// native gRPC probe asks (Health/Check, plaintext, empty service name), from outside the
// container, since the image ships no probe of its own (the manifests need none).
//
//   grpc_health_probe ADDRESS [--timeout_ms=N]
//
// Prints the status (SERVING, NOT_SERVING, ...) or the RPC error on one line; exits 0 only
// on SERVING, 1 otherwise, 2 on bad usage.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string_view>

#include "grpc/health/v1/health.grpc.pb.h"

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::cerr << "usage: grpc_health_probe ADDRESS [--timeout_ms=N]\n";
    return 2;
  }
  int timeout_ms = 2000;  // the manifests' timeoutSeconds
  if (argc == 3) {
    constexpr std::string_view kFlag = "--timeout_ms=";
    const std::string_view arg = argv[2];
    if (arg.substr(0, kFlag.size()) != kFlag) {
      std::cerr << "grpc_health_probe: unknown argument '" << arg << "'\n";
      return 2;
    }
    timeout_ms = std::atoi(argv[2] + kFlag.size());
    if (timeout_ms <= 0) {
      std::cerr << "grpc_health_probe: --timeout_ms must be a positive number\n";
      return 2;
    }
  }
  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(argv[1], grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status =
      stub->Check(&context, grpc::health::v1::HealthCheckRequest(), &response);
  if (!status.ok()) {
    std::cout << "error " << status.error_code() << ": " << status.error_message() << "\n";
    return 1;
  }
  std::cout << grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status()) << "\n";
  return response.status() == grpc::health::v1::HealthCheckResponse::SERVING ? 0 : 1;
}
