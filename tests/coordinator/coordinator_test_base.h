// The fixture of the coordinator's facade tests (coordinator_test.cc,
// coordinator_lifecycle_test.cc): one coordinator on a fake clock over an in-memory store,
// restartable as after a crash, with job "vit" group "tp0" (coordinator_fixtures.h).
#ifndef BALLAST_TESTS_COORDINATOR_COORDINATOR_TEST_BASE_H_
#define BALLAST_TESTS_COORDINATOR_COORDINATOR_TEST_BASE_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "coordinator/coordinator.h"
#include "testing/fake_clock.h"
#include "testing/fake_policy_store.h"
#include "tests/coordinator/coordinator_fixtures.h"

namespace ballast::coordinator {

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
      v1::WorkerReport r;
      r.set_job("vit");
      r.set_group("tp0");
      r.set_rank(rank);
      r.mutable_step()->set_step(step);
      r.mutable_step()->set_plan_version(plan_version);
      r.mutable_step()->set_plan_number(plan_number);
      v1::BlockTiming* b = r.mutable_step()->add_blocks();
      b->set_block(0);
      b->set_units_computed(units[rank]);
      b->set_compute_seconds(spu[rank] * units[rank]);
      for (int o : owners_to_report) b->add_owner_of_unit(o);
      ASSERT_TRUE(coordinator_->Report("agent-1", r).ok());
    }
  }

  // A coordinator with `options` and a fast link; job "vit" in migrate mode, planned every
  // 100 ms; the agent connected with the units split evenly, its plans going to `sink`.
  void StartMigrateJob(const CoordinatorOptions& options, RecordingSink* sink) {
    Restart();
    coordinator_ = *Coordinator::Create(options, &clock_, &store_, speeds_.get());
    JobPolicy policy;
    policy.mode = BalanceMode::kMigrate;
    policy.report_period = absl::Milliseconds(100);
    ASSERT_TRUE(coordinator_->SetPolicy("vit", policy).ok());
    ASSERT_TRUE(coordinator_->AgentConnected(Hello({0, 0, 0, 0, 1, 1, 1, 1}), sink).ok());
  }

  // Job "vit" in migrate mode (reshard_after 2 s, planned every 100 ms) on the slow link,
  // the units split evenly, rank 1 reporting 2x slower until the planner reshards: offloading
  // cannot pay on this link, so nothing happens while the straggler is transient. Returns
  // the next step; the reshard is sink->plans()[0].
  int64_t ReshardAChronicStraggler(RecordingSink* sink) {
    JobPolicy policy;
    policy.mode = BalanceMode::kMigrate;
    policy.reshard_after = absl::Seconds(2);
    policy.report_period = absl::Milliseconds(100);
    EXPECT_TRUE(coordinator_->SetPolicy("vit", policy).ok());
    EXPECT_TRUE(coordinator_->AgentConnected(Hello({0, 0, 0, 0, 1, 1, 1, 1}), sink).ok());
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
