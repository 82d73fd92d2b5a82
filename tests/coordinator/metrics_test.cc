// Metrics are served over real HTTP with the names, labels and values the conventions
// call for (../shared/conventions.md), for the coordinator and the agent.
#include "coordinator/metrics.h"

#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <prometheus/exposer.h>

#include "absl/strings/str_cat.h"

#include "agent/metrics.h"
#include "testing/http_get.h"

namespace ballast {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class MetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    registry_ = std::make_shared<prometheus::Registry>();
    exposer_ = std::make_unique<prometheus::Exposer>("127.0.0.1:0");
    exposer_->RegisterCollectable(registry_);
    ASSERT_FALSE(exposer_->GetListeningPorts().empty());
    port_ = exposer_->GetListeningPorts()[0];
  }
  std::string Scrape() {
    absl::StatusOr<std::string> body = testing::HttpGet(port_, "/metrics");
    EXPECT_TRUE(body.ok()) << body.status();
    return body.ok() ? *body : "";
  }
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;
};

TEST_F(MetricsTest, CoordinatorExportsGroupRankAndControlPlaneMetrics) {
  coordinator::CoordinatorMetrics metrics(*registry_, "9.9.9");
  v1::ClusterStatus status;
  status.set_agents(2);
  status.set_workers(4);
  v1::JobStatus* job = status.add_jobs();
  job->set_job("vit");
  job->set_paused(true);
  job->mutable_policy()->set_max_pruned_fraction_rank(0.5);
  job->mutable_policy()->set_max_pruned_fraction_group(0.25);
  v1::GroupStatus* g = job->add_groups();
  g->set_group("tp0");
  g->set_pruned_fraction(0.125);
  g->set_offloaded_fraction(0.25);
  g->set_predicted_step_seconds(0.5);
  g->set_measured_step_seconds(0.6);
  v1::RankStatus* r = g->add_ranks();
  r->set_rank(3);
  r->set_device("n1/gpu3");
  r->set_seconds_per_unit(0.002);
  r->set_state("chronic");
  r->set_compute_seconds(0.04);
  r->set_collective_seconds(0.01);
  coordinator::CoordinatorCounters counters{.reports_accepted = 10, .reports_rejected = 2,
                                            .plan_changes = 3, .groups_forgotten = 4,
                                            .agents_forgotten = 1};
  metrics.Update(status, counters, coordinator::SpeedModelCounters{.outliers = 5});
  counters.reports_accepted = 15;  // counters only grow by the difference
  metrics.Update(status, counters, coordinator::SpeedModelCounters{.outliers = 5});

  const std::string body = Scrape();
  EXPECT_THAT(body, HasSubstr("ballast_build_info{component=\"coordinator\",version=\"9.9.9\"} 1"));
  EXPECT_THAT(body, HasSubstr("ballast_job_paused{job=\"vit\"} 1"));
  EXPECT_THAT(body, HasSubstr("ballast_job_policy_max_pruned_ratio{job=\"vit\",scope=\"rank\"} 0.5"));
  EXPECT_THAT(body,
              HasSubstr("ballast_job_policy_max_pruned_ratio{job=\"vit\",scope=\"group\"} 0.25"));
  EXPECT_THAT(body, HasSubstr("ballast_coordinator_reports_total{result=\"accepted\"} 15"));
  EXPECT_THAT(body, HasSubstr("ballast_coordinator_reports_total{result=\"rejected\"} 2"));
  EXPECT_THAT(body, HasSubstr("ballast_coordinator_plan_changes_total 3"));
  EXPECT_THAT(body, HasSubstr("ballast_coordinator_timing_outliers_total 5"));
  EXPECT_THAT(body, HasSubstr("ballast_coordinator_forgotten_total{what=\"group\"} 4"));
  EXPECT_THAT(body, HasSubstr("ballast_coordinator_forgotten_total{what=\"agent\"} 1"));
  EXPECT_THAT(body, HasSubstr("ballast_coordinator_agents_connected 2"));
  // The heap in use is this process's: some bytes, far below a terabyte. Under ASan its
  // own allocator replaces glibc's, and mallinfo2 has nothing to say.
  const std::string heap_key = "\nballast_coordinator_heap_in_use_bytes ";
  const size_t heap_at = body.find(heap_key);
  ASSERT_NE(heap_at, std::string::npos);
  const double heap = std::stod(body.substr(heap_at + heap_key.size()));
#if defined(__SANITIZE_ADDRESS__)
  EXPECT_GE(heap, 0);
#else
  EXPECT_GT(heap, 1e5);
#endif
  EXPECT_LT(heap, 1e12);
  EXPECT_THAT(body, HasSubstr("ballast_group_pruned_ratio{group=\"tp0\",job=\"vit\"} 0.125"));
  EXPECT_THAT(body, HasSubstr("ballast_group_offloaded_ratio{group=\"tp0\",job=\"vit\"} 0.25"));
  EXPECT_THAT(body, HasSubstr("ballast_group_measured_step_seconds{group=\"tp0\",job=\"vit\"} 0.6"));
  EXPECT_THAT(body, HasSubstr("ballast_rank_seconds_per_unit{device=\"n1/gpu3\",group=\"tp0\","
                              "job=\"vit\",rank=\"3\"} 0.002"));
  EXPECT_THAT(body, HasSubstr("ballast_rank_straggler_state{device=\"n1/gpu3\",group=\"tp0\","
                              "job=\"vit\",rank=\"3\"} 2"));
  EXPECT_THAT(body, HasSubstr("ballast_rank_compute_seconds{device=\"n1/gpu3\",group=\"tp0\","
                              "job=\"vit\",rank=\"3\"} 0.04"));
  EXPECT_THAT(body, HasSubstr("ballast_rank_collective_seconds{device=\"n1/gpu3\",group=\"tp0\","
                              "job=\"vit\",rank=\"3\"} 0.01"));
}

TEST_F(MetricsTest, SeriesOfForgottenJobsGroupsAndRanksAreRemoved) {
  coordinator::CoordinatorMetrics metrics(*registry_, "9.9.9");
  v1::ClusterStatus status;
  for (const char* name : {"kept", "gone"}) {
    v1::JobStatus* job = status.add_jobs();
    job->set_job(name);
    v1::GroupStatus* g = job->add_groups();
    g->set_group("tp0");
    v1::RankStatus* r = g->add_ranks();
    r->set_rank(0);
    r->set_device(absl::StrCat(name, "/gpu0"));
  }
  metrics.Update(status, {}, {});
  std::string body = Scrape();
  ASSERT_THAT(body, HasSubstr("job=\"gone\""));
  status.mutable_jobs()->RemoveLast();  // the coordinator forgot job "gone"
  metrics.Update(status, {}, {});
  body = Scrape();
  EXPECT_THAT(body, Not(HasSubstr("gone")));
  EXPECT_THAT(body, HasSubstr("ballast_job_paused{job=\"kept\"} 0"));
  EXPECT_THAT(body, HasSubstr("ballast_group_pruned_ratio{group=\"tp0\",job=\"kept\"} 0"));
  EXPECT_THAT(body, HasSubstr("ballast_rank_seconds_per_unit{device=\"kept/gpu0\""));
}

TEST_F(MetricsTest, CoordinatorExportsPlanLatencyAndDecisionTimeHistograms) {
  coordinator::CoordinatorMetrics metrics(*registry_, "9.9.9");
  metrics.Observe({.plan_latency_seconds = {0.3, 0.7, 12}, .decision_seconds = {2e-5}});
  metrics.Observe({.plan_latency_seconds = {0.4}});
  const std::string body = Scrape();
  EXPECT_THAT(body, HasSubstr("ballast_coordinator_plan_latency_seconds_count 4"));
  EXPECT_THAT(body, HasSubstr("ballast_coordinator_plan_latency_seconds_bucket{le=\"0.5\"} 2"));
  EXPECT_THAT(body, HasSubstr("ballast_coordinator_plan_latency_seconds_bucket{le=\"10\"} 3"));
  EXPECT_THAT(body, HasSubstr("ballast_coordinator_decision_seconds_count 1"));
}

TEST_F(MetricsTest, CoordinatorCountsDeniedAdminCallsByReason) {
  coordinator::CoordinatorMetrics metrics(*registry_, "9.9.9");
  metrics.UpdateAdminAuth({.no_credentials = 2, .bad_token = 1});
  metrics.UpdateAdminAuth({.no_credentials = 3, .bad_token = 1, .cn_not_allowed = 4});
  const std::string body = Scrape();
  EXPECT_THAT(
      body,
      HasSubstr("ballast_coordinator_admin_requests_denied_total{reason=\"no_credentials\"} 3"));
  EXPECT_THAT(body,
              HasSubstr("ballast_coordinator_admin_requests_denied_total{reason=\"bad_token\"} 1"));
  EXPECT_THAT(body,
              HasSubstr("ballast_coordinator_admin_requests_denied_total{reason=\"malformed\"} 0"));
  EXPECT_THAT(
      body,
      HasSubstr("ballast_coordinator_admin_requests_denied_total{reason=\"cn_not_allowed\"} 4"));
}

TEST_F(MetricsTest, AgentExportsSessionAndReportCounters) {
  agent::AgentMetrics metrics(*registry_, "node-1", "9.9.9");
  agent::AgentStats stats{.workers = 3, .reports_queued = 100, .reports_dropped = 7,
                          .reports_rejected = 1, .plans_relayed = 4};
  metrics.Update(stats, /*coordinator_connected=*/true, /*connects=*/2);
  const std::string body = Scrape();
  EXPECT_THAT(body, HasSubstr("ballast_agent_workers_attached{node=\"node-1\"} 3"));
  EXPECT_THAT(body, HasSubstr("ballast_agent_coordinator_connected{node=\"node-1\"} 1"));
  EXPECT_THAT(body, HasSubstr("ballast_agent_coordinator_connects_total{node=\"node-1\"} 2"));
  EXPECT_THAT(body, HasSubstr("ballast_agent_reports_total{node=\"node-1\",result=\"dropped\"} 7"));
  EXPECT_THAT(body, HasSubstr("ballast_agent_plans_relayed_total{node=\"node-1\"} 4"));
  EXPECT_THAT(body, HasSubstr("ballast_build_info{component=\"agent\",version=\"9.9.9\"} 1"));
}

}  // namespace
}  // namespace ballast
