// The fixture of the coordinator's facade tests (coordinator_test.cc,
// coordinator_lifecycle_test.cc, coordinator_step_test.cc, coordinator_throttled_test.cc):
// one coordinator on a fake clock over an in-memory store, restartable as after a crash,
// with job "vit" group "tp0" (testing/coordinator_fixtures.h).
#ifndef BALLAST_TESTS_COORDINATOR_COORDINATOR_TEST_BASE_H_
#define BALLAST_TESTS_COORDINATOR_COORDINATOR_TEST_BASE_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "coordinator/coordinator.h"
#include "proto/convert.h"
#include "testing/control_plane_messages.h"
#include "testing/coordinator_fixtures.h"
#include "testing/fake_clock.h"
#include "testing/fake_policy_store.h"

namespace ballast::coordinator {

// Units offloaded from rank 1 to rank 0 by a pushed plan (0 for all-local).
inline int OffloadedUnits(const v1::WorkloadPlan& proto) {
  absl::StatusOr<WorkloadPlan> plan = FromProto(proto);
  EXPECT_TRUE(plan.ok()) << plan.status();
  int units = 0;
  if (!plan.ok()) return units;
  for (const BlockPlan& bp : plan->blocks) {
    for (const Offload& o : bp.offloads) units += o.units;
  }
  return units;
}

class CoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override { Restart(); }

  // A fresh coordinator over the same durable store, as after a crash.
  void Restart() {
    coordinator_.reset();
    speeds_ = *SpeedModel::Create(SpeedModelOptions{}, &clock_);
    // A slow link: offloading a unit costs 2 s a step, so only a reshard can help.
    coordinator_ =
        *Coordinator::Create({.link_bytes_per_second = 1e3}, &clock_, &store_, speeds_.get());
  }

  // One report per rank: rank r computes `units[r]` units at `seconds_per_unit[r]`.
  void Report(int64_t step, const std::vector<int>& units, const std::vector<double>& spu,
              const std::vector<int>& owners_to_report = {}, int64_t plan_version = 0,
              int64_t plan_number = 0) {
    for (int rank : {0, 1}) {
      v1::WorkerReport r =
          testing::StepReport({}, rank, step, units[rank], spu[rank] * units[rank]);
      r.mutable_step()->set_plan_version(plan_version);
      r.mutable_step()->set_plan_number(plan_number);
      for (int o : owners_to_report) r.mutable_step()->mutable_blocks(0)->add_owner_of_unit(o);
      ASSERT_TRUE(coordinator_->Report("agent-1", r).ok());
    }
  }

  // A coordinator with `options` and a fast link; job "vit" in migrate mode, planned every
  // 100 ms; the agent connected with the units split evenly, its plans going to `sink`.
  void StartMigrateJob(const CoordinatorOptions& options, testing::RecordingSink* sink) {
    Restart();
    coordinator_ = *Coordinator::Create(options, &clock_, &store_, speeds_.get());
    JobPolicy policy;
    policy.mode = BalanceMode::kMigrate;
    policy.report_period = absl::Milliseconds(100);
    ASSERT_TRUE(coordinator_->SetPolicy("vit", policy).ok());
    ASSERT_TRUE(coordinator_->AgentConnected(testing::Hello({0, 0, 0, 0, 1, 1, 1, 1}), sink).ok());
  }

  // Job "vit" in migrate mode (reshard_after 2 s, planned every 100 ms) on the slow link,
  // the units split evenly, rank 1 reporting 2x slower until the planner reshards: offloading
  // cannot pay on this link, so nothing happens while the straggler is transient. Returns
  // the next step; the reshard is sink->plans()[0].
  int64_t ReshardAChronicStraggler(testing::RecordingSink* sink) {
    JobPolicy policy;
    policy.mode = BalanceMode::kMigrate;
    policy.reshard_after = absl::Seconds(2);
    policy.report_period = absl::Milliseconds(100);
    EXPECT_TRUE(coordinator_->SetPolicy("vit", policy).ok());
    EXPECT_TRUE(coordinator_->AgentConnected(testing::Hello({0, 0, 0, 0, 1, 1, 1, 1}), sink).ok());
    int64_t step = 0;
    for (; step < 60 && sink->plans().empty(); ++step) {
      Report(step, {4, 4}, {1e-3, 2e-3});
      clock_.Advance(absl::Milliseconds(100));
      coordinator_->Tick();
    }
    return step;
  }

  testing::FakeClock clock_;
  testing::InMemoryPolicyStore store_;
  std::unique_ptr<SpeedModel> speeds_;
  std::unique_ptr<Coordinator> coordinator_;
};

}  // namespace ballast::coordinator

#endif  // BALLAST_TESTS_COORDINATOR_COORDINATOR_TEST_BASE_H_
