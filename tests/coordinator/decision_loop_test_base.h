// The fixture of DecisionLoop's tests (decision_loop_test.cc,
// decision_loop_experts_test.cc): a real registry, judge and settings on a fake clock
// (testing/coordinator_fixtures.h), job "vit" in migrate mode planned every 100 ms, with
// helpers that report steps, dense or of a mixture-of-experts block.
#ifndef BALLAST_TESTS_COORDINATOR_DECISION_LOOP_TEST_BASE_H_
#define BALLAST_TESTS_COORDINATOR_DECISION_LOOP_TEST_BASE_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "coordinator/decision_loop.h"
#include "proto/convert.h"
#include "testing/coordinator_fixtures.h"

namespace ballast::coordinator {

class DecisionLoopTest : public testing::CoordinatorPartsTest {
 protected:
  DecisionLoopTest() : CoordinatorPartsTest({.forget_after = absl::Seconds(5)}) {}
  void SetUp() override {
    CoordinatorPartsTest::SetUp();
    JobPolicy policy;
    policy.mode = BalanceMode::kMigrate;
    policy.report_period = absl::Milliseconds(100);
    ASSERT_TRUE(settings_->SetPolicy("vit", policy).ok());
  }
  // Both ranks report step `step`: rank 1 at `slow` seconds per unit.
  void Reports(int64_t step, double slow) {
    for (int rank : {0, 1}) {
      const v1::WorkerReport r =
          testing::StepReport({}, rank, step, 4, 4 * (rank == 0 ? 1e-3 : slow));
      ASSERT_TRUE(registry_->Report("agent-1", r).ok());
    }
  }
  DecisionRecord Record() { return loop_->Record(registry_->Groups().at(0)); }
  // Rank `rank` of a mixture-of-experts block (8 experts, owned per `owners`) reports
  // step `step`: two Forwards routing `tokens` each, every token at 1 us on either rank;
  // `confirm`: with the ownership, as workers that have applied a reshard report it.
  void ReportExperts(const testing::GroupSpec& spec, int rank, int64_t step,
                     const std::vector<int32_t>& tokens, const std::vector<int32_t>& owners,
                     bool confirm) {
    int64_t computed = 0;
    for (int e = 0; e < 8; ++e) computed += owners[e] == rank ? 2 * tokens[e] : 0;
    v1::WorkerReport r = testing::StepReport(spec, rank, step, 4, computed * 1e-6);
    v1::BlockTiming* b = r.mutable_step()->mutable_blocks(0);
    for (int forward = 0; forward < 2; ++forward) {
      for (int32_t n : tokens) b->add_unit_tokens(n);
    }
    b->set_tokens_computed(computed);
    b->set_micro_batches(2);
    if (confirm) {
      for (int32_t o : owners) b->add_owner_of_unit(o);
    }
    ASSERT_TRUE(registry_->Report("agent-1", r).ok());
  }
  // Both ranks (rank 0 owning experts 0-3) report steps until a plan is pushed (at most
  // 10).
  void ReportExpertSteps(const testing::GroupSpec& spec, const std::vector<int32_t>& tokens) {
    for (int64_t step = 0; step < 10 && sink_.plans().empty(); ++step) {
      for (int rank : {0, 1}) ReportExperts(spec, rank, step, tokens, kEven, false);
      clock_.Advance(absl::Milliseconds(100));
      loop_->Tick();
    }
  }
  // Job "vit" in mode auto, reshard_after 2 s; its agent connects with 2 ranks of 4 units.
  void StartAutoWithShortReshardAfter() {
    JobPolicy policy;
    policy.mode = BalanceMode::kAuto;
    policy.report_period = absl::Milliseconds(100);
    policy.reshard_after = absl::Seconds(2);
    ASSERT_TRUE(settings_->SetPolicy("vit", policy).ok());
    ASSERT_TRUE(registry_->AgentConnected(testing::Hello({0, 0, 0, 0, 1, 1, 1, 1}), &sink_).ok());
  }
  // The marginal skew's wait, under the job's capacity cap `cap` (0: none).
  void MarginalSkewIsWaitedOut(double cap);
  inline static const std::vector<int32_t> kEven = {0, 0, 0, 0, 1, 1, 1, 1};

  // Two workers that run the newest plan pushed, as workers that applied it do.
  struct PlanFollowers {
    std::vector<int32_t> owners = kEven;  // the ownership they run (and report)
    int64_t step = 0;                     // the next step
    int32_t offloaded = 0;                // units offloaded in the last step
    int32_t units(int32_t rank) const {
      return static_cast<int32_t>(std::count(owners.begin(), owners.end(), rank));
    }
  };
  // One step of `workers` under the newest plan (its ownership where it states one, its
  // offloads; no plan or no blocks: all local on the split they run): rank r computes its
  // units at spu[r], spends `collectives` seconds in its own collectives and waits for the
  // later rank, every unit offloaded adding `per_offload` seconds to the step. Then a
  // planning round.
  void RunNewestPlan(PlanFollowers& workers, const std::vector<double>& spu, double collectives = 0,
                     double per_offload = 0) {
    int64_t version = 0;
    std::vector<int32_t> computed = {0, 0};
    workers.offloaded = 0;
    if (!sink_.plans().empty()) {
      absl::StatusOr<WorkloadPlan> plan = FromProto(sink_.plans().back());
      ASSERT_TRUE(plan.ok()) << plan.status();
      for (const BlockPlan& b : plan->blocks) {
        if (!b.owner_of_unit.empty()) {
          workers.owners.clear();
          for (RankId o : b.owner_of_unit) workers.owners.push_back(o.value());
        }
        for (const Offload& o : b.offloads) {
          computed[o.owner.value()] -= o.units;
          computed[o.helper.value()] += o.units;
          workers.offloaded += o.units;
        }
      }
      version = plan->version.value();
    }
    for (int32_t rank : {0, 1}) computed[rank] += workers.units(rank);
    const double step_seconds = std::max(computed[0] * spu[0], computed[1] * spu[1]) + collectives +
                                per_offload * workers.offloaded;
    for (int32_t rank : {0, 1}) {
      const double seconds = computed[rank] * spu[rank];
      v1::WorkerReport r = testing::StepReport({}, rank, workers.step, computed[rank], seconds);
      v1::BlockTiming* block = r.mutable_step()->mutable_blocks(0);
      for (int32_t o : workers.owners) block->add_owner_of_unit(o);
      block->set_comm_seconds(step_seconds - seconds);
      r.mutable_step()->set_plan_version(version);
      const absl::Status reported = registry_->Report("agent-1", r);
      ASSERT_TRUE(reported.ok()) << reported;
    }
    ++workers.step;
    clock_.Advance(absl::Milliseconds(100));
    loop_->Tick();
  }
};

}  // namespace ballast::coordinator

#endif  // BALLAST_TESTS_COORDINATOR_DECISION_LOOP_TEST_BASE_H_
