// A two-rank job simulated step by step through a real DecisionLoop (registry, judge,
// settings and speed model on a fake clock): the workers run the newest plan pushed, and
// the caller says what each step costs under it. For the loops that judge plans by the
// step they get (step_feedback_test.cc, offload_check_test.cc).
//
//   SimulatedJobResult r = RunSimulatedJob(options, policy, [](const SimulatedStepIn& in) {
//     return SimulatedStepCost{.compute = {in.units[0] * 1e-3, in.units[1] * 2e-3},
//                              .wall = std::max(in.units[0] * 1e-3, in.units[1] * 2e-3)};
//   });
#ifndef BALLAST_TESTS_TESTING_SIMULATED_JOB_H_
#define BALLAST_TESTS_TESTING_SIMULATED_JOB_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/decision_loop.h"
#include "testing/control_plane_messages.h"
#include "testing/fake_clock.h"
#include "testing/fake_policy_store.h"

namespace ballast::testing {

// What the workers run at one step: units computed per rank (owned, less offloaded out,
// plus computed for others) and units offloaded in all.
struct SimulatedStepIn {
  int64_t step = 0;
  std::array<int32_t, 2> units = {0, 0};
  int32_t offloaded = 0;
};
// What that step cost: each rank's block compute as its timers report it, and the step.
struct SimulatedStepCost {
  std::array<double, 2> compute = {0, 0};
  double wall = 0;
};
// Done before each step (a cordon set, say).
using SimulatedStepHook =
    std::function<void(int64_t step, coordinator::JobSettings&, coordinator::DecisionLoop&)>;

struct SimulatedJobResult {
  int32_t straggler_units = 16;  // what rank 1 computes at the end
  double step = 0;               // the step then
  size_t plans = 0;
  std::vector<int64_t> changed_at;  // the steps after which a plan was pushed
  std::vector<std::string> why;     // the last decision's lines
};

// 600 steps of job "vit" (32 units, 16 a rank; `policy` its policy), 50 ms of the clock a
// step, a planning round after each.
inline SimulatedJobResult RunSimulatedJob(
    const coordinator::DecisionLoopOptions& options, const coordinator::JobPolicy& policy,
    const std::function<SimulatedStepCost(const SimulatedStepIn&)>& cost,
    const SimulatedStepHook& before_step = {}) {
  class Sink final : public coordinator::AgentSink {
   public:
    void Send(const v1::CoordinatorMessage& m) override {
      if (m.has_plan()) plans.push_back(m.plan().plan());
    }
    std::vector<v1::WorkloadPlan> plans;
  };
  FakeClock clock;
  InMemoryPolicyStore store;
  std::unique_ptr<coordinator::SpeedModel> speeds =
      *coordinator::SpeedModel::Create(coordinator::SpeedModelOptions{}, &clock);
  std::unique_ptr<coordinator::JobSettings> settings =
      *coordinator::JobSettings::Load(&store, &clock);
  coordinator::GroupRegistry registry(coordinator::RegistryOptions{}, &clock, speeds.get());
  coordinator::StragglerJudge judge(&clock, absl::Seconds(3));
  coordinator::DecisionLoop loop(options, &clock, &registry, &judge, settings.get(), speeds.get());
  EXPECT_TRUE(settings->SetPolicy("vit", policy).ok());
  GroupSpec spec;
  spec.owner_of_unit.assign(32, 0);
  std::fill(spec.owner_of_unit.begin() + 16, spec.owner_of_unit.end(), 1);
  Sink sink;
  EXPECT_TRUE(registry.AgentConnected(GroupHello(spec), &sink).ok());
  SimulatedJobResult out;
  std::vector<int32_t> owners = spec.owner_of_unit;
  for (int64_t step = 0; step < 600; ++step) {
    if (before_step) before_step(step, *settings, loop);
    // The workers run the newest plan pushed, on the ownership its moves left.
    SimulatedStepIn in{.step = step};
    int64_t version = 0;
    if (!sink.plans.empty()) {
      const v1::WorkloadPlan& plan = sink.plans.back();
      version = plan.version();
      for (const v1::BlockPlan& b : plan.blocks()) {
        if (b.owner_of_unit_size() > 0)
          owners.assign(b.owner_of_unit().begin(), b.owner_of_unit().end());
      }
    }
    for (int32_t o : owners) ++in.units[o];
    if (!sink.plans.empty()) {
      for (const v1::BlockPlan& b : sink.plans.back().blocks()) {
        for (const v1::Offload& o : b.offloads()) {
          in.units[o.owner()] -= o.units();
          in.units[o.helper()] += o.units();
          in.offloaded += o.units();
        }
      }
    }
    const SimulatedStepCost c = cost(in);
    for (int32_t rank : {0, 1}) {
      v1::WorkerReport r = StepReport(spec, rank, step, in.units[rank], c.compute[rank]);
      v1::BlockTiming* block = r.mutable_step()->mutable_blocks(0);
      block->set_comm_seconds(c.wall - c.compute[rank]);
      for (int32_t o : owners) block->add_owner_of_unit(o);
      r.mutable_step()->set_plan_version(version);
      EXPECT_TRUE(registry.Report("agent-1", r).ok());
    }
    out.straggler_units = in.units[1];
    out.step = c.wall;
    clock.Advance(absl::Milliseconds(50));
    const size_t before = sink.plans.size();
    loop.Tick();
    if (sink.plans.size() > before) out.changed_at.push_back(step);
  }
  out.plans = sink.plans.size();
  const std::vector<coordinator::GroupRef> groups = registry.Groups();
  if (!groups.empty()) out.why = loop.Record(groups[0]).reasons.before;
  return out;
}

}  // namespace ballast::testing

#endif  // BALLAST_TESTS_TESTING_SIMULATED_JOB_H_
