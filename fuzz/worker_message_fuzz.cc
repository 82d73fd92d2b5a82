// Workers' messages (ballast.v1.WorkerMessage) into an agent's AgentState, making the calls
// agent/worker_service.cc makes for each stream, with plans relayed from the coordinator
// and reports drained as agent/coordinator_session.cc drains them. What the agent then
// tells a coordinator (its hello after a reconnect, the report batches) goes to a real
// in-process Coordinator.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "agent/agent_state.h"
#include "fuzz/fuzz_common.h"
#include "fuzz_input.pb.h"
#include "proto/validate.h"

namespace ballast::fuzz {
namespace {

constexpr size_t kStreams = 4;
constexpr int kMaxSteps = 64;
constexpr int32_t kReportCapacity = 8;  // small, so inputs reach the drop path

class Stream final : public agent::WorkerChannel {
 public:
  bool Send(const v1::WorkerDirective& directive) override {
    FUZZ_CHECK(attached, "a directive sent to a detached worker");
    FUZZ_CHECK(directive.has_plan(), "a directive without a plan");
    ++plans;
    return true;
  }
  bool attached = false;
  v1::WorkerIdentity identity;
  int64_t plans = 0;
};

// What the agent keeps must stay what it accepted: every identity it would re-announce
// in a hello must pass the coordinator's edge validation, or one worker's bad report
// would get the whole agent refused after a reconnect.
void CheckWorkers(const agent::AgentState& state) {
  for (const v1::WorkerIdentity& w : state.Workers()) {
    absl::Status valid = ValidateIdentity(w);
    FUZZ_CHECK(valid.ok(), "agent holds an identity it would not accept: " + valid.ToString());
  }
}

}  // namespace
}  // namespace ballast::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ballast;
  using namespace ballast::fuzz;
  WorkerSession input;
  if (!input.ParseFromArray(data, static_cast<int>(size))) return 0;
  QuietLogs();
  agent::AgentState state(kReportCapacity);
  std::array<Stream, kStreams> streams;
  FuzzCoordinator fc;
  CheckingSink sink;
  FUZZ_CHECK(fc.coordinator
                 ->AgentConnected(
                     [] {
                       v1::AgentHello hello;
                       hello.set_agent_id("agent-0");
                       return hello;
                     }(),
                     &sink)
                 .ok(),
             "empty hello refused");
  int steps = 0;
  for (const WorkerStep& step : input.steps()) {
    if (++steps > kMaxSteps) break;
    Stream& s = streams[step.worker() % kStreams];
    if (!s.attached) {
      // WorkerService::Attach: the first message must be hello; a refused one ends the
      // stream.
      if (step.message().has_hello()) {
        s.attached = true;  // before AddWorker: it may send the group's plan at once
        if (state.AddWorker(step.message().hello(), &s).ok()) {
          s.identity = step.message().hello();
        } else {
          s.attached = false;
        }
      }
    } else if (step.message().has_report()) {
      (void)state.EnqueueReport(s.identity, step.message().report());
    }
    if (step.detach() && s.attached) {
      state.RemoveWorker(&s);
      s.attached = false;
    }
    if (step.has_plan()) state.DeliverPlan(step.plan());
    if (step.take_reports() > 0) {
      // CoordinatorSession: worker events, then a batch of reports.
      for (const v1::AgentMessage& event : state.TakeWorkerEvents()) {
        if (event.has_worker_joined()) {
          (void)fc.coordinator->WorkerJoined("agent-0", event.worker_joined());
        } else if (event.has_worker_left()) {
          (void)fc.coordinator->WorkerLeft("agent-0", event.worker_left());
        }
      }
      v1::ReportBatch batch = state.TakeReports(static_cast<int32_t>(step.take_reports() % 64));
      FUZZ_CHECK(batch.dropped() >= 0, "negative drop count");
      fc.coordinator->AgentDroppedReports(batch.dropped());
      for (const v1::WorkerReport& report : batch.reports()) {
        (void)fc.coordinator->Report("agent-0", report);
      }
      fc.AdvanceAndTick(100);
    }
    CheckWorkers(state);
  }
  // A coordinator restart: the agent's hello lists every worker it holds
  // (CoordinatorSession::Connect), and a coordinator must take it.
  v1::AgentHello hello;
  hello.set_agent_id("agent-0");
  state.ClearWorkerEvents();
  for (const v1::WorkerIdentity& w : state.Workers()) *hello.add_workers() = w;
  FuzzCoordinator restarted;
  CheckingSink restarted_sink;
  (void)restarted.coordinator->AgentConnected(hello, &restarted_sink);
  const agent::AgentStats stats = state.stats();
  FUZZ_CHECK(stats.workers == static_cast<int64_t>(state.Workers().size()), "worker count");
  return 0;
}
