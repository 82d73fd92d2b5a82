#include "ctl/commands.h"

#include <gmock/gmock.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <sstream>

#include "testing/fake_admin_client.h"

namespace ballast::ctl {
namespace {

using ::testing::HasSubstr;

class CommandsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    v1::Policy p;
    p.set_mode("auto");
    p.set_imputation("mean");
    p.set_priority("change");
    p.set_max_pruned_fraction_rank(0.5);
    p.set_hysteresis(0.05);
    p.set_report_period_ms(1000);
    client_.policies["vit"] = p;
    v1::JobStatus* job = client_.status.add_jobs();
    job->set_job("vit");
    *job->mutable_policy() = p;
    v1::GroupStatus* g = job->add_groups();
    g->set_group("tp0");
    g->set_size(2);
    g->set_plan_summary("v7: all local");
    v1::RankStatus* r = g->add_ranks();
    r->set_rank(1);
    r->set_device("node-1/gpu3");
    r->set_state("chronic");
    r->set_seconds_per_unit(0.0125);
    client_.status.set_agents(1);
    client_.status.set_workers(2);
  }

  int Run(std::vector<std::string> args, bool json = false) {
    out_.str("");
    err_.str("");
    return RunCommand(args, {.json = json, .preconfigure = preconfigure}, client_, out_, err_);
  }

  testing::FakeAdminClient client_;
  std::ostringstream out_, err_;
  bool preconfigure = false;
};

TEST_F(CommandsTest, HoldAndReleaseSendWhatTheySay) {
  EXPECT_EQ(Run({"hold", "vit", "tp0", "1", "offload=0.25", "reshard=0.5"}), 0) << err_.str();
  EXPECT_EQ(out_.str(), "held job vit group tp0 at rank 1: offload 25%, reshard 50%\n");
  EXPECT_EQ(Run({"hold", "vit", "tp0", "0"}), 0) << err_.str();
  EXPECT_EQ(Run({"release", "vit", "tp0"}), 0) << err_.str();
  EXPECT_EQ(out_.str(), "released job vit group tp0\n");
  ASSERT_EQ(client_.holds.size(), 3u);
  EXPECT_EQ(client_.holds[0].job(), "vit");
  EXPECT_EQ(client_.holds[0].group(), "tp0");
  EXPECT_EQ(client_.holds[0].hold().rank(), 1);
  EXPECT_EQ(client_.holds[0].hold().offload_fraction(), 0.25);
  EXPECT_EQ(client_.holds[0].hold().reshard_fraction(), 0.5);
  EXPECT_FALSE(client_.holds[0].release());
  EXPECT_EQ(client_.holds[1].hold().offload_fraction(), 0);
  EXPECT_TRUE(client_.holds[2].release());

  struct Bad {
    std::vector<std::string> args;
    const char* message;
  };
  for (const Bad& bad : std::vector<Bad>{
           {{"hold", "vit", "tp0"}, "hold needs JOB GROUP RANK"},
           {{"hold", "vit", "tp0", "one"}, "RANK 'one' is not an integer"},
           {{"hold", "vit", "tp0", "1", "offload=lots"}, "offload 'lots' is not a number"},
           {{"hold", "vit", "tp0", "1", "prune=0.1"}, "'prune=0.1' is not offload=F or reshard=F"},
           {{"hold", "vit", "tp0", "1", "offload=0.1", "offload=0.2"}, "each at most once"},
           {{"release", "vit"}, "release needs JOB GROUP"},
       }) {
    EXPECT_EQ(Run(bad.args), 2) << bad.message;
    EXPECT_THAT(err_.str(), HasSubstr(bad.message));
  }
  EXPECT_EQ(client_.holds.size(), 3u) << "a usage error sent a request";

  client_.fail_next = absl::NotFoundError("job vit group tp0 is not held: nothing to release");
  EXPECT_EQ(Run({"release", "vit", "tp0"}), 1);
  EXPECT_THAT(err_.str(), HasSubstr("NOT_FOUND: job vit group tp0 is not held"));
}

TEST_F(CommandsTest, StatusShowsAHold) {
  v1::Hold& hold = *client_.status.mutable_jobs(0)->mutable_groups(0)->mutable_hold();
  hold.set_rank(1);
  hold.set_offload_fraction(0.3);
  EXPECT_EQ(Run({"status"}), 0);
  EXPECT_THAT(out_.str(),
              HasSubstr("HELD at rank 1: offload 30%, reshard 0% (ballastctl release vit tp0)"));
}

TEST_F(CommandsTest, UnknownJobsAreConfiguredOnlyWhenAskedToPreconfigure) {
  EXPECT_EQ(Run({"policy", "set", "vti", "mode=migrate"}), 1);  // a typo of vit
  EXPECT_THAT(err_.str(), HasSubstr("NOT_FOUND: job 'vti' unknown"));
  EXPECT_TRUE(client_.policy_sets.empty());
  preconfigure = true;
  EXPECT_EQ(Run({"pause", "next-job"}), 0);
  ASSERT_EQ(client_.paused.size(), 1u);
  EXPECT_TRUE(client_.paused[0].preconfigure());  // the coordinator decides on unknown jobs
}

TEST_F(CommandsTest, StatusPrintsATable) {
  EXPECT_EQ(Run({"status"}), 0);
  EXPECT_THAT(out_.str(), HasSubstr("job vit  mode auto"));
  EXPECT_THAT(out_.str(), HasSubstr("node-1/gpu3"));
  EXPECT_THAT(out_.str(), HasSubstr("chronic"));
}

TEST_F(CommandsTest, StatusSaysHowTheLinkSpeedWasArrivedAt) {
  v1::GroupStatus* g = client_.status.mutable_jobs(0)->mutable_groups(0);
  g->set_link_bytes_per_second(1e9);
  EXPECT_EQ(Run({"status"}), 0);
  EXPECT_THAT(out_.str(), HasSubstr("link 1000 MB/s (prior)"));
  g->set_link_learned(true);  // a coordinator from before link_basis
  EXPECT_EQ(Run({"status"}), 0);
  EXPECT_THAT(out_.str(), HasSubstr("link 1000 MB/s (learned)"));
  g->set_link_basis("stale");
  g->set_link_bytes_per_second(24.5e6);
  EXPECT_EQ(Run({"status"}), 0);
  EXPECT_THAT(out_.str(), HasSubstr("link 24.5 MB/s (stale)"));
}

TEST_F(CommandsTest, JsonIsParseable) {
  EXPECT_EQ(Run({"status"}, /*json=*/true), 0);
  v1::ClusterStatus parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out_.str(), &parsed).ok());
  EXPECT_EQ(parsed.jobs(0).groups(0).ranks(0).device(), "node-1/gpu3");
}

TEST_F(CommandsTest, PolicySetChangesOnlyTheNamedFields) {
  EXPECT_EQ(
      Run({"policy", "set", "vit", "mode=migrate", "hysteresis=0.2", "expert_capacity_factor=1.5"}),
      0)
      << err_.str();
  ASSERT_EQ(client_.policy_sets.size(), 1u);
  const v1::Policy& sent = client_.policy_sets[0].policy();
  EXPECT_EQ(sent.mode(), "migrate");
  EXPECT_EQ(sent.hysteresis(), 0.2);
  EXPECT_EQ(sent.expert_capacity_factor(), 1.5);
  EXPECT_EQ(sent.imputation(), "mean");  // untouched
  EXPECT_EQ(sent.report_period_ms(), 1000);
  EXPECT_THAT(out_.str(), HasSubstr("migrate"));
}

TEST_F(CommandsTest, PolicySetRejectsBadAssignmentsNamingThem) {
  EXPECT_EQ(Run({"policy", "set", "vit", "speed=11"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("'speed=11'"));
  EXPECT_EQ(Run({"policy", "set", "vit", "hysteresis=lots"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("hysteresis"));
  EXPECT_EQ(Run({"policy", "set", "vit"}), 2);
  EXPECT_EQ(Run({"policy", "set", "vit", "mode=auto", "mode=off"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("key mode given twice"));
  EXPECT_TRUE(client_.policy_sets.empty());
}

TEST_F(CommandsTest, PolicySetForAJobNotStartedYetStartsFromDefaults) {
  preconfigure = true;
  EXPECT_EQ(Run({"policy", "set", "newjob", "mode=observe"}), 0) << err_.str();
  ASSERT_EQ(client_.policy_sets.size(), 1u);
  EXPECT_TRUE(client_.policy_sets[0].preconfigure());
  EXPECT_EQ(client_.policy_sets[0].policy().mode(), "observe");
  EXPECT_EQ(client_.policy_sets[0].policy().imputation(), "mean");  // the default
  EXPECT_GT(client_.policy_sets[0].policy().report_period_ms(), 0);
}

TEST_F(CommandsTest, ServerErrorsAreReportedWithTheirCode) {
  client_.fail_next = absl::InvalidArgumentError("max_pruned_fraction_rank 2 out of range [0, 1]");
  EXPECT_EQ(Run({"policy", "get", "vit"}), 1);
  EXPECT_THAT(err_.str(), HasSubstr("INVALID_ARGUMENT: max_pruned_fraction_rank 2"));
  EXPECT_EQ(Run({"policy", "get", "nosuchjob"}), 1);
  EXPECT_THAT(err_.str(), HasSubstr("NOT_FOUND"));
}

TEST_F(CommandsTest, PauseResumeCordonExplain) {
  EXPECT_EQ(Run({"pause"}), 0);
  EXPECT_EQ(Run({"resume", "vit"}), 0);
  ASSERT_EQ(client_.paused.size(), 2u);
  EXPECT_TRUE(client_.paused[0].paused());
  EXPECT_EQ(client_.paused[0].job(), "");
  EXPECT_FALSE(client_.paused[1].paused());
  EXPECT_EQ(client_.paused[1].job(), "vit");
  EXPECT_EQ(Run({"cordon", "node-1/gpu3", "ECC", "errors"}), 0);
  EXPECT_EQ(Run({"uncordon", "node-1/gpu3"}), 0);
  ASSERT_EQ(client_.cordons.size(), 2u);
  EXPECT_EQ(client_.cordons[0].reason(), "ECC errors");
  EXPECT_FALSE(client_.cordons[1].cordoned());
  client_.explanation.set_text("block 0: rank 1 2.0x slower; offload 1->0 x3");
  client_.explanation.set_plan_number(3);
  client_.explanation.set_plan_version(1764000000123456);
  EXPECT_EQ(Run({"explain", "vit", "tp0"}), 0);
  EXPECT_THAT(out_.str(), HasSubstr("offload 1->0 x3"));
  EXPECT_THAT(out_.str(), HasSubstr("plan #3 (version 1764000000123456)"));
}

TEST_F(CommandsTest, UsageErrors) {
  EXPECT_EQ(Run({}), 2);
  EXPECT_EQ(Run({"frobnicate"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("unknown command 'frobnicate'"));
  EXPECT_EQ(Run({"explain", "vit"}), 2);
  EXPECT_EQ(Run({"uncordon"}), 2);
  EXPECT_EQ(Run({"status", "a", "b"}), 2);
}

}  // namespace
}  // namespace ballast::ctl
