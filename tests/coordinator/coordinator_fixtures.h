// What the coordinator's tests share: an agent sink that records plans, and an agent's
// hello for job "vit", group "tp0" of two ranks with one block of kUnits units.
#ifndef BALLAST_TESTS_COORDINATOR_COORDINATOR_FIXTURES_H_
#define BALLAST_TESTS_COORDINATOR_COORDINATOR_FIXTURES_H_

#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "ballast/v1/agent.pb.h"
#include "coordinator/coordinator.h"

namespace ballast::coordinator {

constexpr int kUnits = 8;

class RecordingSink final : public AgentSink {
 public:
  void Send(const v1::CoordinatorMessage& message) override {
    absl::MutexLock lock(&mu_);
    if (message.has_plan()) plans_.push_back(message.plan().plan());
  }
  std::vector<v1::WorkloadPlan> plans() {
    absl::MutexLock lock(&mu_);
    return plans_;
  }

 private:
  absl::Mutex mu_;
  std::vector<v1::WorkloadPlan> plans_;
};

inline v1::AgentHello Hello(const std::vector<int>& owners) {
  v1::AgentHello hello;
  hello.set_agent_id("agent-1");
  for (int rank : {0, 1}) {
    v1::WorkerIdentity* w = hello.add_workers();
    w->set_job("vit");
    w->set_group("tp0");
    w->set_rank(rank);
    w->set_group_size(2);
    w->set_device("dev" + std::to_string(rank));
    v1::BlockInfo* b = w->add_blocks();
    b->set_block(0);
    b->set_num_units(kUnits);
    for (int o : owners) b->add_owner_of_unit(o);
    b->set_unit_bytes(1000);
  }
  return hello;
}

}  // namespace ballast::coordinator

#endif  // BALLAST_TESTS_COORDINATOR_COORDINATOR_FIXTURES_H_
