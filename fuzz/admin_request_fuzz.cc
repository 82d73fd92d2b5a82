// Admin calls (ballast.v1.Admin requests with their `authorization` metadata) into the real
// AdminServiceImpl handlers (coordinator/admin_service.cc) over an in-process Coordinator
// that already runs a job, in sequence, with time passing in between. No server: each call
// gets its own grpc::ServerContext carrying the metadata.
#include <grpcpp/server_context.h>
#include <grpcpp/test/server_context_test_spouse.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/admin_auth.h"
#include "coordinator/admin_service.h"
#include "fuzz/fuzz_common.h"
#include "fuzz_input.pb.h"
#include "testing/control_plane_messages.h"

namespace ballast::fuzz {
namespace {

constexpr int kMaxCalls = 32;
constexpr char kToken[] = "fuzz-token";
constexpr char kAllowedCn[] = "ops";

// Job "vit", group "tp0": two ranks on one agent, rank 1 twice as slow, in migrate mode,
// planned every 100 ms, so the admin calls meet a group with a plan and an explanation.
void StartJob(FuzzCoordinator& fc, CheckingSink* sink) {
  coordinator::Coordinator& c = *fc.coordinator;
  const testing::GroupSpec job = {.agent_id = "agent-1",
                                  .node = "node-1",
                                  .owner_of_unit = {0, 0, 0, 0, 1, 1, 1, 1},
                                  .unit_bytes = 4096,
                                  .device_prefix = "node-1/gpu"};
  coordinator::JobPolicy policy;
  policy.mode = coordinator::BalanceMode::kMigrate;
  policy.report_period = absl::Milliseconds(100);
  FUZZ_CHECK(c.SetPolicy("vit", policy).ok(), "SetPolicy");
  FUZZ_CHECK(c.AgentConnected(testing::GroupHello(job), sink).ok(), "AgentConnected");
  for (int64_t step = 0; step < 8; ++step) {
    for (int rank : {0, 1}) {
      const v1::WorkerReport r = testing::StepReport(job, rank, step, 4, rank == 0 ? 4e-3 : 8e-3);
      FUZZ_CHECK(c.Report("agent-1", r).ok(), "Report");
    }
    fc.AdvanceAndTick(100);
  }
}

// One call through the service's handler, as gRPC would make it.
grpc::Status Call(coordinator::AdminServiceImpl& service, const AdminCall& call) {
  grpc::ServerContext context;
  grpc::testing::ServerContextTestSpouse spouse(&context);
  if (call.has_authorization()) spouse.AddClientMetadata("authorization", call.authorization());
  switch (call.request_case()) {
    case AdminCall::kGetStatus: {
      v1::ClusterStatus resp;
      return service.GetStatus(&context, &call.get_status(), &resp);
    }
    case AdminCall::kGetPolicy: {
      v1::Policy resp;
      return service.GetPolicy(&context, &call.get_policy(), &resp);
    }
    case AdminCall::kSetPolicy: {
      v1::Policy resp;
      return service.SetPolicy(&context, &call.set_policy(), &resp);
    }
    case AdminCall::kSetPaused: {
      v1::SetPausedResponse resp;
      return service.SetPaused(&context, &call.set_paused(), &resp);
    }
    case AdminCall::kSetCordon: {
      v1::SetCordonResponse resp;
      return service.SetCordon(&context, &call.set_cordon(), &resp);
    }
    case AdminCall::kSetHold: {
      v1::SetHoldResponse resp;
      return service.SetHold(&context, &call.set_hold(), &resp);
    }
    case AdminCall::kExplain: {
      v1::Explanation resp;
      return service.Explain(&context, &call.explain(), &resp);
    }
    default:
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no request");
  }
}

}  // namespace
}  // namespace ballast::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ballast;
  using namespace ballast::fuzz;
  AdminSession input;
  if (!input.ParseFromArray(data, static_cast<int>(size))) return 0;
  FuzzCoordinator fc;
  CheckingSink sink;
  StartJob(fc, &sink);
  auto authorizer = std::make_shared<const coordinator::AdminAuthorizer>(
      coordinator::AdminAuthOptions{.token = kToken, .allowed_cns = {kAllowedCn}});
  coordinator::AdminServiceImpl service(fc.coordinator.get());
  service.set_authorizer(authorizer);
  int calls = 0;
  for (const AdminCall& call : input.calls()) {
    if (++calls > kMaxCalls) break;
    const grpc::Status status = Call(service, call);
    // Without a valid token no call may succeed (the context carries no certificate).
    std::optional<absl::string_view> authorization;
    if (call.has_authorization()) authorization = call.authorization();
    const absl::Status allowed = authorizer->Check(authorization, {}, "fuzz", "fuzz");
    FUZZ_CHECK(allowed.ok() || !status.ok(), "a call succeeded without credentials");
    // A verified certificate with an allowed CN is enough on its own; other CNs add nothing.
    const std::vector<std::string> cns(call.verified_cns().begin(), call.verified_cns().end());
    const bool cn_allowed = std::find(cns.begin(), cns.end(), kAllowedCn) != cns.end();
    const absl::Status with_cns = authorizer->Check(authorization, cns, "fuzz", "fuzz");
    FUZZ_CHECK(with_cns.ok() == (cn_allowed || allowed.ok()), "CN authorisation inconsistent");
    fc.AdvanceAndTick(call.advance_ms());
  }
  CheckAdminViews(*fc.coordinator);
  return 0;
}
