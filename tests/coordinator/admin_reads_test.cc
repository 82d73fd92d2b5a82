// AdminReads and JobSettings through the facade's parts: which jobs are known, by what,
// and what an explanation says before any decision.
#include "coordinator/admin_reads.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "testing/coordinator_fixtures.h"

namespace ballast::coordinator {
namespace {

using testing::Hello;

class AdminReadsTest : public testing::CoordinatorPartsTest {
 protected:
  void SetUp() override {
    CoordinatorPartsTest::SetUp();
    reads_ = std::make_unique<AdminReads>(2e9, &clock_, registry_.get(), judge_.get(),
                                          settings_.get(), loop_.get(), speeds_.get());
  }

  std::unique_ptr<AdminReads> reads_;
};

TEST_F(AdminReadsTest, AJobIsKnownByItsGroupsItsPolicyOrItsPause) {
  EXPECT_EQ(reads_->Status("vit").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(reads_->GetPolicy("vit").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(reads_->CheckJobKnown("vit").code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(settings_->SetPaused("paused-job", true).ok());
  EXPECT_TRUE(reads_->CheckJobKnown("paused-job").ok());
  ASSERT_TRUE(settings_->SetPolicy("configured", JobPolicy{}).ok());
  absl::StatusOr<v1::ClusterStatus> status = reads_->Status("configured");
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->jobs_size(), 0);
  ASSERT_TRUE(registry_->AgentConnected(Hello({0, 0, 0, 0, 1, 1, 1, 1}), &sink_).ok());
  EXPECT_EQ(reads_->GetPolicy("vit")->mode, JobPolicy{}.mode);
  status = reads_->Status("");
  ASSERT_TRUE(status.ok());
  ASSERT_EQ(status->jobs_size(), 1);
  EXPECT_EQ(status->workers(), 2);
  EXPECT_EQ(status->agents(), 1);
  const v1::GroupStatus& g = status->jobs(0).groups(0);
  EXPECT_EQ(g.link_bytes_per_second(), 2e9);  // the prior: nothing measured
  EXPECT_FALSE(g.link_learned());
  EXPECT_EQ(g.predicted_step_seconds(), 0);  // nothing planned yet
  ASSERT_EQ(g.ranks_size(), 2);
  EXPECT_EQ(g.ranks(1).device(), "dev1");
}

TEST_F(AdminReadsTest, ACordonedDeviceShowsAndUncordoningAnotherIsNotFound) {
  ASSERT_TRUE(registry_->AgentConnected(Hello({0, 0, 0, 0, 1, 1, 1, 1}), &sink_).ok());
  EXPECT_EQ(settings_->SetCordon("dev0", false, "").code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(settings_->SetCordon("dev0", true, "ECC errors").ok());
  absl::StatusOr<v1::ClusterStatus> status = reads_->Status("vit");
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->jobs(0).groups(0).ranks(0).state(), "cordoned");
  EXPECT_THAT(status->cordoned_devices(), ::testing::ElementsAre("dev0"));
  // Durable: settings loaded again from the store have it.
  std::unique_ptr<JobSettings> reloaded = *JobSettings::Load(&store_, &clock_);
  EXPECT_TRUE(reloaded->Cordoned("dev0"));
}

TEST_F(AdminReadsTest, AnExplanationBeforeAnyDecisionSaysSo) {
  EXPECT_EQ(reads_->Explain("vit", "tp0").status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(registry_->AgentConnected(Hello({0, 0, 0, 0, 1, 1, 1, 1}), &sink_).ok());
  absl::StatusOr<v1::Explanation> why = reads_->Explain("vit", "tp0");
  ASSERT_TRUE(why.ok());
  EXPECT_EQ(why->text(), "no decision yet");
  EXPECT_EQ(why->plan_version(), 0);
}

}  // namespace
}  // namespace ballast::coordinator
