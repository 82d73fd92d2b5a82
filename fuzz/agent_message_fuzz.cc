// Agents' messages (ballast.v1.AgentMessage) into an in-process Coordinator, making the
// calls coordinator/agent_service.cc makes for each, on sessions that open, send and end,
// with time passing and the decision loop ticking in between.
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "coordinator/policy_proto.h"
#include "fuzz/fuzz_common.h"
#include "fuzz_input.pb.h"

namespace ballast::fuzz {
namespace {

constexpr size_t kSessions = 3;
constexpr int kMaxSteps = 64;  // bounds one input's work, as the gRPC message limit does

struct Session {
  std::optional<std::string> agent_id;  // set once its hello is accepted
  CheckingSink sink;
};

// One message on an open session: AgentServiceImpl::Session's loop body.
void Deliver(coordinator::Coordinator& c, Session& s, const v1::AgentMessage& message) {
  switch (message.kind_case()) {
    case v1::AgentMessage::kWorkerJoined:
      (void)c.WorkerJoined(*s.agent_id, message.worker_joined());
      break;
    case v1::AgentMessage::kWorkerLeft:
      (void)c.WorkerLeft(*s.agent_id, message.worker_left());
      break;
    case v1::AgentMessage::kReports:
      c.AgentDroppedReports(message.reports().dropped());
      for (const v1::WorkerReport& report : message.reports().reports()) {
        (void)c.Report(*s.agent_id, report);
      }
      break;
    default:  // a second hello or an empty message: refused, the session goes on
      break;
  }
}

}  // namespace
}  // namespace ballast::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ballast;
  using namespace ballast::fuzz;
  ballast::fuzz::AgentSession input;
  if (!input.ParseFromArray(data, static_cast<int>(size))) return 0;
  FuzzCoordinator fc;
  coordinator::Coordinator& c = *fc.coordinator;
  if (input.has_policy()) {
    absl::StatusOr<coordinator::JobPolicy> policy = coordinator::PolicyFromProto(input.policy());
    if (policy.ok()) {
      for (const AgentStep& step : input.steps()) {
        for (const v1::WorkerIdentity& w : step.message().hello().workers()) {
          (void)c.SetPolicy(w.job(), *policy);
        }
        if (step.message().has_worker_joined()) {
          (void)c.SetPolicy(step.message().worker_joined().job(), *policy);
        }
      }
    }
  }
  std::array<Session, kSessions> sessions;
  int steps = 0;
  for (const AgentStep& step : input.steps()) {
    if (++steps > kMaxSteps) break;
    Session& s = sessions[step.agent() % kSessions];
    if (!s.agent_id.has_value()) {
      // A new stream: its first message must be hello, or the stream is refused.
      if (step.message().has_hello()) {
        const std::string id = step.message().hello().agent_id();
        if (c.AgentConnected(step.message().hello(), &s.sink).ok()) {
          s.agent_id = id;
        } else {
          c.AgentDisconnected(id, &s.sink);  // a hello refused half-way
        }
      }
    } else {
      Deliver(c, s, step.message());
    }
    if (step.disconnect() && s.agent_id.has_value()) {
      c.AgentDisconnected(*s.agent_id, &s.sink);
      s.agent_id.reset();
    }
    fc.AdvanceAndTick(step.advance_ms());
  }
  CheckAdminViews(c);
  (void)c.TakeObservations();
  return 0;
}
