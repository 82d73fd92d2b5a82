#include "agent/agent_state.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "proto/validate.h"

namespace ballast::agent {
namespace {

using ::testing::HasSubstr;

class RecordingChannel final : public WorkerChannel {
 public:
  bool Send(const v1::WorkerDirective& d) override {
    sent.push_back(d);
    return true;
  }
  std::vector<v1::WorkerDirective> sent;
};

v1::WorkerIdentity Worker(const std::string& group, int rank) {
  v1::WorkerIdentity w;
  w.set_job("vit");
  w.set_group(group);
  w.set_rank(rank);
  w.set_group_size(2);
  w.set_device(group + "/dev" + std::to_string(rank));
  v1::BlockInfo* b = w.add_blocks();
  b->set_block(0);
  b->set_num_units(2);
  b->add_owner_of_unit(0);
  b->add_owner_of_unit(1);
  return w;
}

v1::StepReport Report(int64_t step, double compute = 0.1) {
  v1::StepReport r;
  r.set_step(step);
  v1::BlockTiming* b = r.add_blocks();
  b->set_block(0);
  b->set_compute_seconds(compute);
  b->set_units_computed(1);
  return r;
}

TEST(AgentStateTest, RejectsBadIdentitiesNamingTheField) {
  AgentState state(8);
  RecordingChannel ch;
  v1::WorkerIdentity w = Worker("tp0", 0);
  w.set_rank(2);
  EXPECT_THAT(std::string(state.AddWorker(w, &ch).message()), HasSubstr("worker.rank 2"));
  w = Worker("tp0", 0);
  w.clear_device();
  EXPECT_THAT(std::string(state.AddWorker(w, &ch).message()), HasSubstr("worker.device"));
  w = Worker("tp0", 0);
  w.mutable_blocks(0)->set_owner_of_unit(1, 7);
  EXPECT_THAT(std::string(state.AddWorker(w, &ch).message()), HasSubstr("owner_of_unit"));
  EXPECT_TRUE(state.Workers().empty());
}

TEST(AgentStateTest, ATransferSampleMustComeFromAPeer) {
  AgentState state(8);
  RecordingChannel ch;
  const v1::WorkerIdentity w = Worker("tp0", 0);
  ASSERT_TRUE(state.AddWorker(w, &ch).ok());
  v1::StepReport r = Report(1);
  r.mutable_blocks(0)->mutable_received()->set_bytes(1000);
  r.mutable_blocks(0)->mutable_received()->set_seconds(0.01);
  r.mutable_blocks(0)->mutable_received()->set_from_rank(1);
  EXPECT_TRUE(state.EnqueueReport(w, r).ok());
  r.mutable_blocks(0)->mutable_received()->set_from_rank(0);  // itself
  EXPECT_EQ(state.EnqueueReport(w, r).message(),
            "report.blocks[0].received.from_rank 0 is not a peer of rank 0 in a group of 2");
  r.mutable_blocks(0)->mutable_received()->set_from_rank(2);  // not in the group
  EXPECT_FALSE(state.EnqueueReport(w, r).ok());
  r.mutable_blocks(0)->mutable_received()->set_from_rank(1);
  r.mutable_blocks(0)->mutable_received()->set_bytes(0);
  EXPECT_EQ(state.EnqueueReport(w, r).message(),
            "report.blocks[0].received.bytes 0 not in [1, 1099511627776]");
}

TEST(AgentStateTest, DuplicateRankIsRefused) {
  AgentState state(8);
  RecordingChannel a, b;
  ASSERT_TRUE(state.AddWorker(Worker("tp0", 0), &a).ok());
  EXPECT_EQ(state.AddWorker(Worker("tp0", 0), &b).code(), absl::StatusCode::kAlreadyExists);
}

TEST(AgentStateTest, ReportQueueIsBoundedAndDropsTheOldest) {
  AgentState state(3);
  const v1::WorkerIdentity w = Worker("tp0", 0);
  for (int step = 0; step < 5; ++step) ASSERT_TRUE(state.EnqueueReport(w, Report(step)).ok());
  v1::ReportBatch batch = state.TakeReports(100);
  ASSERT_EQ(batch.reports_size(), 3);
  EXPECT_EQ(batch.reports(0).step().step(), 2);
  EXPECT_EQ(batch.dropped(), 2);
  EXPECT_EQ(state.TakeReports(100).dropped(), 0);  // counted once
  EXPECT_EQ(state.stats().reports_dropped, 2);
}

TEST(AgentStateTest, BadReportsAreCountedAndNotQueued) {
  AgentState state(8);
  const v1::WorkerIdentity w = Worker("tp0", 0);
  absl::Status s = state.EnqueueReport(w, Report(1, std::nan("")));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("compute_seconds"));
  EXPECT_FALSE(state.EnqueueReport(w, Report(-1)).ok());
  EXPECT_EQ(state.TakeReports(100).reports_size(), 0);
  EXPECT_EQ(state.stats().reports_rejected, 2);
}

TEST(AgentStateTest, PlansReachTheirGroupAndLateJoiners) {
  AgentState state(8);
  RecordingChannel a0, b0, a1;
  ASSERT_TRUE(state.AddWorker(Worker("tp0", 0), &a0).ok());
  ASSERT_TRUE(state.AddWorker(Worker("tp1", 0), &b0).ok());
  v1::GroupPlan plan;
  plan.set_job("vit");
  plan.mutable_plan()->set_group("tp0");
  plan.mutable_plan()->set_version(42);
  state.DeliverPlan(plan);
  ASSERT_EQ(a0.sent.size(), 1u);
  EXPECT_EQ(a0.sent[0].plan().version(), 42);
  EXPECT_TRUE(b0.sent.empty());
  // A worker that attaches later gets the plan in force at once.
  ASSERT_TRUE(state.AddWorker(Worker("tp0", 1), &a1).ok());
  ASSERT_EQ(a1.sent.size(), 1u);
  EXPECT_EQ(a1.sent[0].plan().version(), 42);
}

TEST(AgentStateTest, WorkerEventsAreQueuedForTheCoordinator) {
  AgentState state(8);
  RecordingChannel a;
  ASSERT_TRUE(state.AddWorker(Worker("tp0", 0), &a).ok());
  state.RemoveWorker(&a);
  std::vector<v1::AgentMessage> events = state.TakeWorkerEvents();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_TRUE(events[0].has_worker_joined());
  EXPECT_TRUE(events[1].has_worker_left());
  EXPECT_TRUE(state.TakeWorkerEvents().empty());
  EXPECT_TRUE(state.Workers().empty());
}

TEST(AgentStateTest, OwnershipInAReportRefreshesTheIdentityReannouncedToTheCoordinator) {
  AgentState state(8);
  RecordingChannel a;
  ASSERT_TRUE(state.AddWorker(Worker("tp0", 0), &a).ok());
  v1::StepReport report = Report(3);
  report.mutable_blocks(0)->add_owner_of_unit(1);  // after a reshard: rank 1 owns both
  report.mutable_blocks(0)->add_owner_of_unit(1);
  ASSERT_TRUE(state.EnqueueReport(Worker("tp0", 0), report).ok());
  const std::vector<v1::WorkerIdentity> workers = state.Workers();
  ASSERT_EQ(workers.size(), 1u);
  EXPECT_THAT(workers[0].blocks(0).owner_of_unit(), ::testing::ElementsAre(1, 1));
}

// Found by fuzz/worker_message_fuzz: ownership that does not fit the worker's blocks was
// copied into the identity the agent re-announces, and a coordinator then refused the
// agent's every hello.
TEST(AgentStateTest, OwnershipThatDoesNotFitTheBlockIsRefusedAndLeavesTheIdentity) {
  AgentState state(8);
  RecordingChannel a;
  const v1::WorkerIdentity w = Worker("tp0", 0);
  ASSERT_TRUE(state.AddWorker(w, &a).ok());
  v1::StepReport short_list = Report(3);
  short_list.mutable_blocks(0)->add_owner_of_unit(1);  // one owner for two units
  v1::StepReport out_of_group = Report(4);
  out_of_group.mutable_blocks(0)->add_owner_of_unit(0);
  out_of_group.mutable_blocks(0)->add_owner_of_unit(2);  // a group of 2
  v1::StepReport unknown_block = Report(5);
  unknown_block.mutable_blocks(0)->set_block(9);
  unknown_block.mutable_blocks(0)->add_owner_of_unit(0);
  unknown_block.mutable_blocks(0)->add_owner_of_unit(1);
  for (const v1::StepReport& bad : {short_list, out_of_group, unknown_block}) {
    absl::Status s = state.EnqueueReport(w, bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("owner_of_unit"));
  }
  EXPECT_EQ(state.stats().reports_rejected, 3);
  EXPECT_EQ(state.TakeReports(100).reports_size(), 0);
  const std::vector<v1::WorkerIdentity> workers = state.Workers();
  ASSERT_EQ(workers.size(), 1u);
  EXPECT_THAT(workers[0].blocks(0).owner_of_unit(), ::testing::ElementsAre(0, 1));
  EXPECT_TRUE(ValidateIdentity(workers[0]).ok());
}

}  // namespace
}  // namespace ballast::agent
