// What the coordinator's tests share: an agent sink that records plans, an agent's hello
// for job "vit", group "tp0" of two ranks with one block of kUnits units, and the
// coordinator's parts (registry, judge, settings, decision loop) built by hand on a fake
// clock over an in-memory store, for the tests of one part at a time.
//
//   class DecisionLoopTest : public testing::CoordinatorPartsTest {};
//   TEST_F(DecisionLoopTest, Plans) {
//     ASSERT_TRUE(registry_->AgentConnected(Hello({0, 0, 0, 0, 1, 1, 1, 1}), &sink_).ok());
//     loop_->Tick();
//   }
#ifndef BALLAST_TESTS_TESTING_COORDINATOR_FIXTURES_H_
#define BALLAST_TESTS_TESTING_COORDINATOR_FIXTURES_H_

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "ballast/v1/agent.pb.h"
#include "coordinator/decision_loop.h"
#include "coordinator/group_registry.h"
#include "coordinator/job_settings.h"
#include "coordinator/speed_model.h"
#include "coordinator/straggler_judge.h"
#include "testing/control_plane_messages.h"
#include "testing/fake_clock.h"
#include "testing/fake_policy_store.h"

namespace ballast::testing {

constexpr int kUnits = 8;

class RecordingSink final : public coordinator::AgentSink {
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

// Agent "agent-1"'s hello: ranks 0 and 1 of vit/tp0 on "dev0" and "dev1", block 0's units
// owned as `owners` says.
inline v1::AgentHello Hello(const std::vector<int>& owners) {
  return GroupHello({.owner_of_unit = std::vector<int32_t>(owners.begin(), owners.end())});
}

// The coordinator's parts wired as the facade wires them, with default options but the
// registry's, and a sink for agent "agent-1".
class CoordinatorPartsTest : public ::testing::Test {
 protected:
  explicit CoordinatorPartsTest(coordinator::RegistryOptions registry_options = {})
      : registry_options_(registry_options) {}

  void SetUp() override {
    speeds_ = *coordinator::SpeedModel::Create(coordinator::SpeedModelOptions{}, &clock_);
    settings_ = *coordinator::JobSettings::Load(&store_, &clock_);
    registry_ =
        std::make_unique<coordinator::GroupRegistry>(registry_options_, &clock_, speeds_.get());
    judge_ = std::make_unique<coordinator::StragglerJudge>(&clock_, absl::Seconds(3));
    loop_ = std::make_unique<coordinator::DecisionLoop>(coordinator::DecisionLoopOptions{}, &clock_,
                                                        registry_.get(), judge_.get(),
                                                        settings_.get(), speeds_.get());
  }

  const coordinator::RegistryOptions registry_options_;
  FakeClock clock_;
  InMemoryPolicyStore store_;
  std::unique_ptr<coordinator::SpeedModel> speeds_;
  std::unique_ptr<coordinator::JobSettings> settings_;
  std::unique_ptr<coordinator::GroupRegistry> registry_;
  std::unique_ptr<coordinator::StragglerJudge> judge_;
  std::unique_ptr<coordinator::DecisionLoop> loop_;
  RecordingSink sink_;
};

}  // namespace ballast::testing

#endif  // BALLAST_TESTS_TESTING_COORDINATOR_FIXTURES_H_
