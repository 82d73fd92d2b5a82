// The coordinator's gRPC edge under bad input, on a real loopback server: malformed,
// NaN, negative or absurd timings, unknown job or rank ids, invalid policies, oversized
// messages. Each gets INVALID_ARGUMENT or NOT_FOUND naming the field (or, for an
// oversized message, RESOURCE_EXHAUSTED), is counted, and changes nothing else.
#include <gmock/gmock.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "ballast/v1/admin.grpc.pb.h"
#include "ballast/v1/agent.grpc.pb.h"
#include "coordinator/policy.h"
#include "coordinator/policy_proto.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "testing/control_plane.h"

namespace ballast {
namespace {

using ::ballast::testing::InProcessCoordinator;
using ::ballast::testing::WaitFor;
using ::testing::HasSubstr;

v1::WorkerIdentity Worker(int rank) {
  v1::WorkerIdentity w;
  w.set_job("vit");
  w.set_group("tp0");
  w.set_rank(rank);
  w.set_group_size(2);
  w.set_device("node/dev" + std::to_string(rank));
  w.set_node("node");
  v1::BlockInfo* b = w.add_blocks();
  b->set_block(0);
  b->set_num_units(4);
  for (int r : {0, 0, 1, 1}) b->add_owner_of_unit(r);
  b->set_unit_bytes(1024);
  return w;
}

v1::AgentMessage Reports(const std::string& job, int rank, int block, double compute,
                         int64_t step = 1) {
  v1::AgentMessage m;
  v1::WorkerReport* r = m.mutable_reports()->add_reports();
  r->set_job(job);
  r->set_group("tp0");
  r->set_rank(rank);
  r->mutable_step()->set_step(step);
  v1::BlockTiming* b = r->mutable_step()->add_blocks();
  b->set_block(block);
  b->set_compute_seconds(compute);
  b->set_units_computed(2);
  return m;
}

class CoordinatorServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(::testing::TempDir(), "/ballast-cs-", ::getpid());
    std::filesystem::create_directories(dir_);
    coordinator_ = std::make_unique<InProcessCoordinator>(testing::InProcessCoordinatorOptions{
        .store_path = dir_ + "/c.db", .max_message_bytes = 64 << 10});
    ASSERT_TRUE(coordinator_->Start().ok());
    channel_ = grpc::CreateChannel(coordinator_->address(), grpc::InsecureChannelCredentials());
    admin_ = v1::Admin::NewStub(channel_);
    agent_ = v1::AgentService::NewStub(channel_);
    stream_ = agent_->Session(&stream_context_);
    v1::AgentMessage hello;
    hello.mutable_hello()->set_agent_id("agent-1");
    *hello.mutable_hello()->add_workers() = Worker(0);
    *hello.mutable_hello()->add_workers() = Worker(1);
    ASSERT_TRUE(stream_->Write(hello));
    ASSERT_TRUE(WaitFor([&] { return coordinator_->coordinator()->attached_workers() == 2; },
                        absl::Seconds(5)));
  }

  void TearDown() override {
    stream_context_.TryCancel();
    stream_->Finish();
    coordinator_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Sends one message and returns the coordinator's Rejection of it.
  v1::Rejection SendExpectingRejection(const v1::AgentMessage& message) {
    EXPECT_TRUE(stream_->Write(message));
    v1::CoordinatorMessage reply;
    while (stream_->Read(&reply)) {
      if (reply.has_rejected()) return reply.rejected();
    }
    ADD_FAILURE() << "stream ended without a rejection";
    return {};
  }

  std::string dir_;
  std::unique_ptr<InProcessCoordinator> coordinator_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Admin::Stub> admin_;
  std::unique_ptr<v1::AgentService::Stub> agent_;
  grpc::ClientContext stream_context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::AgentMessage, v1::CoordinatorMessage>> stream_;
};

// The agent's reconnect loop resets its backoff only on an answer (common/backoff.h), so an
// accepted hello is answered at once, and a refused one never is.
TEST_F(CoordinatorServiceTest, AnAcceptedHelloIsAnsweredWithAWelcomeAndARefusedOneIsNot) {
  v1::CoordinatorMessage first;
  ASSERT_TRUE(stream_->Read(&first));
  EXPECT_TRUE(first.has_welcome()) << first.DebugString();

  grpc::ClientContext context;
  auto refused = agent_->Session(&context);
  v1::AgentMessage hello;
  hello.mutable_hello()->set_agent_id("agent-2");
  v1::WorkerIdentity* worker = hello.mutable_hello()->add_workers();
  *worker = Worker(0);
  worker->set_group_size(3);  // the group has 2 ranks
  ASSERT_TRUE(refused->Write(hello));
  v1::CoordinatorMessage reply;
  bool welcomed = false;
  while (refused->Read(&reply)) welcomed |= reply.has_welcome();
  EXPECT_FALSE(welcomed);
  EXPECT_FALSE(refused->Finish().ok());
}

TEST_F(CoordinatorServiceTest, BadReportsAreRejectedNamingTheFieldAndCounted) {
  struct Case {
    v1::AgentMessage message;
    absl::StatusCode code;
    std::string field;
  };
  const std::vector<Case> cases = {
      {Reports("vit", 0, 0, std::nan("")), absl::StatusCode::kInvalidArgument, "compute_seconds"},
      {Reports("vit", 0, 0, -1.0), absl::StatusCode::kInvalidArgument, "compute_seconds"},
      {Reports("vit", 0, 0, 1e12), absl::StatusCode::kInvalidArgument, "compute_seconds"},
      {Reports("vit", 0, 0, 0.1, -5), absl::StatusCode::kInvalidArgument, "report.step"},
      {Reports("nosuchjob", 0, 0, 0.1), absl::StatusCode::kNotFound, "unknown job 'nosuchjob'"},
      {Reports("vit", 7, 0, 0.1), absl::StatusCode::kNotFound, "unknown rank 7"},
      {Reports("vit", 0, 9, 0.1), absl::StatusCode::kNotFound, "unknown block 9"},
  };
  for (const Case& c : cases) {
    const v1::Rejection rejection = SendExpectingRejection(c.message);
    EXPECT_EQ(rejection.code(), static_cast<int>(c.code)) << c.field;
    EXPECT_THAT(rejection.message(), HasSubstr(c.field));
  }
  // An empty message and a second hello are refused too; the stream stays up.
  EXPECT_THAT(SendExpectingRejection(v1::AgentMessage()).message(), HasSubstr("empty"));
  v1::AgentMessage hello;
  hello.mutable_hello()->set_agent_id("agent-1");
  EXPECT_THAT(SendExpectingRejection(hello).message(), HasSubstr("hello sent twice"));
  v1::AgentMessage bad_worker;
  *bad_worker.mutable_worker_joined() = Worker(0);
  bad_worker.mutable_worker_joined()->set_rank(5);
  EXPECT_THAT(SendExpectingRejection(bad_worker).message(), HasSubstr("worker.rank 5"));

  const coordinator::CoordinatorCounters counters = coordinator_->coordinator()->counters();
  EXPECT_EQ(counters.reports_rejected, static_cast<int64_t>(cases.size()));
  EXPECT_EQ(counters.reports_accepted, 0);
  // Nothing else changed: still two workers, no plan.
  EXPECT_EQ(coordinator_->coordinator()->attached_workers(), 2);
  absl::StatusOr<v1::Explanation> e = coordinator_->coordinator()->Explain("vit", "tp0");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->plan_version(), 0);
  // A good report after all that is accepted.
  ASSERT_TRUE(stream_->Write(Reports("vit", 0, 0, 0.1)));
  EXPECT_TRUE(WaitFor([&] { return coordinator_->coordinator()->counters().reports_accepted == 1; },
                      absl::Seconds(5)));
}

TEST_F(CoordinatorServiceTest, ReportedOwnershipIsCheckedAgainstTheBlock) {
  v1::AgentMessage bad = Reports("vit", 0, 0, 0.1);
  for (int r : {0, 1, 1}) {
    bad.mutable_reports()->mutable_reports(0)->mutable_step()->mutable_blocks(0)->add_owner_of_unit(
        r);
  }
  v1::Rejection rejection = SendExpectingRejection(bad);
  EXPECT_EQ(rejection.code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(rejection.message(), HasSubstr("owner_of_unit has 3 entries, block has 4"));
  v1::AgentMessage out_of_range = Reports("vit", 0, 0, 0.1, 2);
  for (int r : {0, 0, 1, 2}) {
    out_of_range.mutable_reports()
        ->mutable_reports(0)
        ->mutable_step()
        ->mutable_blocks(0)
        ->add_owner_of_unit(r);
  }
  EXPECT_THAT(SendExpectingRejection(out_of_range).message(), HasSubstr("has rank 2"));
  EXPECT_EQ(coordinator_->coordinator()->counters().reports_accepted, 0);
}

TEST_F(CoordinatorServiceTest, ServesGrpcHealth) {
  auto health = grpc::health::v1::Health::NewStub(channel_);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = health->Check(&context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
}

TEST_F(CoordinatorServiceTest, SessionMustStartWithHello) {
  grpc::ClientContext context;
  auto stream = agent_->Session(&context);
  ASSERT_TRUE(stream->Write(Reports("vit", 0, 0, 0.1)));
  stream->WritesDone();
  const grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("hello"));
}

TEST_F(CoordinatorServiceTest, OversizedMessageIsRefused) {
  grpc::ClientContext context;
  auto stream = agent_->Session(&context);
  v1::AgentMessage hello;
  hello.mutable_hello()->set_agent_id(std::string(128 << 10, 'x'));  // over the 64 KiB limit
  stream->Write(hello);
  const grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(coordinator_->coordinator()->connected_agents(), 1);  // only the fixture's
}

// A hello within the message size whose shapes pass the coordinator's limits is refused
// whole, naming the limit, and the coordinator holds nothing of it.
TEST_F(CoordinatorServiceTest, AHelloOverTheShapeLimitsIsRefusedNamingTheLimit) {
  testing::InProcessCoordinatorOptions options{.store_path = dir_ + "/limits.db"};
  options.coordinator.max_units_per_block = 100;
  InProcessCoordinator limited(options);
  ASSERT_TRUE(limited.Start().ok());
  auto agent = v1::AgentService::NewStub(
      grpc::CreateChannel(limited.address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto stream = agent->Session(&context);
  v1::AgentMessage hello;
  hello.mutable_hello()->set_agent_id("hostile");
  v1::WorkerIdentity* w = hello.mutable_hello()->add_workers();
  *w = Worker(0);
  w->mutable_blocks(0)->set_num_units(101);
  w->mutable_blocks(0)->mutable_owner_of_unit()->Resize(101, 0);
  ASSERT_TRUE(stream->Write(hello));
  stream->WritesDone();
  const grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("more than max_units_per_block 100"));
  EXPECT_EQ(limited.coordinator()->connected_agents(), 0);
  EXPECT_EQ(limited.coordinator()->attached_workers(), 0);
}

TEST_F(CoordinatorServiceTest, AdminRejectsBadRequestsNamingTheField) {
  grpc::ClientContext c1;
  v1::SetPolicyRequest set;
  set.set_job("vit");
  v1::Policy* p = set.mutable_policy();
  p->set_mode("auto");
  p->set_imputation("mean");
  p->set_priority("change");
  p->set_max_pruned_fraction_rank(1.5);
  p->set_report_period_ms(1000);
  v1::Policy out;
  grpc::Status status = admin_->SetPolicy(&c1, set, &out);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("max_pruned_fraction_rank 1.5"));

  grpc::ClientContext c2;
  p->set_max_pruned_fraction_rank(0.5);
  p->set_mode("fastest");
  status = admin_->SetPolicy(&c2, set, &out);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("mode 'fastest'"));

  // Nothing was stored: the job still has the default policy.
  grpc::ClientContext c3;
  v1::GetPolicyRequest get;
  get.set_job("vit");
  ASSERT_TRUE(admin_->GetPolicy(&c3, get, &out).ok());
  EXPECT_EQ(out.mode(), "auto");
  EXPECT_EQ(out.max_pruned_fraction_rank(), coordinator::JobPolicy{}.max_pruned_fraction_rank);

  grpc::ClientContext c4;
  v1::ExplainRequest explain;
  explain.set_job("vit");
  explain.set_group("nosuchgroup");
  v1::Explanation e;
  status = admin_->Explain(&c4, explain, &e);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(status.error_message(), HasSubstr("'nosuchgroup'"));

  grpc::ClientContext c5;
  get.set_job("nosuchjob");
  status = admin_->GetPolicy(&c5, get, &out);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);

  grpc::ClientContext c6;
  v1::SetCordonRequest cordon;
  v1::SetCordonResponse cordon_out;
  status = admin_->SetCordon(&c6, cordon, &cordon_out);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("device"));
}

// A hold needs no speeds: its plan reaches the agent before any report, status shows it,
// and a hold the group cannot take is refused naming what is wrong.
TEST_F(CoordinatorServiceTest, AHeldGroupGetsItsPlanUntilReleased) {
  auto hold_request = [](const std::string& group, int rank, double offload) {
    v1::SetHoldRequest r;
    r.set_job("vit");
    r.set_group(group);
    r.mutable_hold()->set_rank(rank);
    r.mutable_hold()->set_offload_fraction(offload);
    return r;
  };
  struct Bad {
    v1::SetHoldRequest request;
    grpc::StatusCode code;
    const char* message;
  };
  v1::SetHoldRequest release;
  release.set_job("vit");
  release.set_group("tp0");
  release.set_release(true);
  v1::SetHoldRequest bad_job = hold_request("tp0", 0, 0.5);
  bad_job.set_job("");
  for (const Bad& bad : std::vector<Bad>{
           {hold_request("tp0", 2, 0.5), grpc::StatusCode::INVALID_ARGUMENT,
            "rank 2 out of range [0, 2)"},
           {hold_request("tp0", 1, 1.5), grpc::StatusCode::INVALID_ARGUMENT,
            "offload_fraction 1.5 out of range [0, 1]"},
           {hold_request("tp9", 1, 0.5), grpc::StatusCode::NOT_FOUND,
            "job vit has no group tp9: nothing to hold"},
           {release, grpc::StatusCode::NOT_FOUND, "is not held"},
           {bad_job, grpc::StatusCode::INVALID_ARGUMENT, "job"},
       }) {
    grpc::ClientContext context;
    v1::SetHoldResponse out;
    grpc::Status status = admin_->SetHold(&context, bad.request, &out);
    EXPECT_EQ(status.error_code(), bad.code) << bad.message;
    EXPECT_THAT(status.error_message(), HasSubstr(bad.message));
  }

  {
    grpc::ClientContext context;
    v1::SetHoldResponse out;
    grpc::Status status = admin_->SetHold(&context, hold_request("tp0", 1, 0.5), &out);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  // Rank 1 owns 2 of the 4 units: one of them is offloaded to rank 0.
  v1::CoordinatorMessage message;
  bool got = false;
  while (!got && stream_->Read(&message)) {
    got = message.has_plan() && message.plan().plan().blocks_size() == 1;
  }
  ASSERT_TRUE(got) << "the stream ended without the held plan";
  const v1::BlockPlan& block = message.plan().plan().blocks(0);
  ASSERT_EQ(block.offloads_size(), 1);
  EXPECT_EQ(block.offloads(0).owner(), 1);
  EXPECT_EQ(block.offloads(0).helper(), 0);
  EXPECT_EQ(block.offloads(0).units(), 1);

  absl::StatusOr<v1::ClusterStatus> status = coordinator_->coordinator()->Status("vit");
  ASSERT_TRUE(status.ok());
  const v1::GroupStatus& group = status->jobs(0).groups(0);
  ASSERT_TRUE(group.has_hold());
  EXPECT_EQ(group.hold().rank(), 1);
  EXPECT_EQ(group.hold().offload_fraction(), 0.5);
  absl::StatusOr<v1::Explanation> why = coordinator_->coordinator()->Explain("vit", "tp0");
  ASSERT_TRUE(why.ok());
  EXPECT_THAT(why->text(),
              HasSubstr("held by an operator (ballastctl hold) at rank 1: offload 50%"));

  grpc::ClientContext context;
  v1::SetHoldResponse out;
  ASSERT_TRUE(admin_->SetHold(&context, release, &out).ok());
  status = coordinator_->coordinator()->Status("vit");
  ASSERT_TRUE(status.ok());
  EXPECT_FALSE(status->jobs(0).groups(0).has_hold());
}

TEST_F(CoordinatorServiceTest, UnknownJobsAreConfiguredOnlyWhenAskedToPreconfigure) {
  grpc::ClientContext c1;
  v1::SetPausedRequest pause;
  pause.set_job("vti");  // a typo of vit
  pause.set_paused(true);
  v1::SetPausedResponse paused;
  grpc::Status status = admin_->SetPaused(&c1, pause, &paused);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(status.error_message(), HasSubstr("job 'vti' is not known"));
  grpc::ClientContext c2;
  v1::SetPolicyRequest set;
  set.set_job("vti");
  *set.mutable_policy() = coordinator::PolicyToProto(coordinator::JobPolicy{});
  v1::Policy out;
  EXPECT_EQ(admin_->SetPolicy(&c2, set, &out).error_code(), grpc::StatusCode::NOT_FOUND);
  grpc::ClientContext c3;
  v1::GetPolicyRequest get;
  get.set_job("vti");
  EXPECT_EQ(admin_->GetPolicy(&c3, get, &out).error_code(), grpc::StatusCode::NOT_FOUND);

  // Asked to, and for a job with workers, it is done.
  grpc::ClientContext c4, c5;
  set.set_preconfigure(true);
  EXPECT_TRUE(admin_->SetPolicy(&c4, set, &out).ok());
  pause.set_job("vit");
  EXPECT_TRUE(admin_->SetPaused(&c5, pause, &paused).ok());

  grpc::ClientContext c6;
  v1::SetCordonRequest uncordon;
  uncordon.set_device("node/dev0");
  v1::SetCordonResponse cordon_out;
  status = admin_->SetCordon(&c6, uncordon, &cordon_out);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(status.error_message(), HasSubstr("device 'node/dev0' is not cordoned"));
}

TEST_F(CoordinatorServiceTest, AnUnparsableRequestIsInvalidArgumentNamingTheMethod) {
  grpc::GenericStub generic(channel_);
  grpc::CompletionQueue cq;
  grpc::ClientContext context;
  const char garbage[] = "\xff\xff\xff\xff";
  grpc::Slice slice(garbage, sizeof(garbage) - 1);
  grpc::ByteBuffer request(&slice, 1);
  auto call = generic.PrepareUnaryCall(&context, "/ballast.v1.Admin/GetStatus", request, &cq);
  call->StartCall();
  grpc::ByteBuffer response;
  grpc::Status status;
  call->Finish(&response, &status, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  ASSERT_TRUE(cq.Next(&tag, &ok));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(),
              HasSubstr("does not parse as the request message of /ballast.v1.Admin/GetStatus"));
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

// An agent that stops reading its stream (hung, or a hostile client) stalls nobody: its
// plans and rejections queue on its own session while the tick thread goes on planning
// and pushing the other agents' plans; after write_timeout it is dropped.
TEST(SlowAgentTest, AnAgentThatNeverReadsDelaysNoOtherAgentAndIsDropped) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/ballast-slow-", ::getpid());
  std::filesystem::create_directories(dir);
  // Long enough for the stuck session's backlog, its plan and the healthy agent's plan under
  // a sanitizer on a loaded machine, all before the stuck one is dropped.
  constexpr absl::Duration kWriteTimeout = absl::Seconds(10);
  InProcessCoordinator server(testing::InProcessCoordinatorOptions{
      .store_path = dir + "/c.db", .agent_service = {.write_timeout = kWriteTimeout}});
  ASSERT_TRUE(server.Start().ok());
  coordinator::Coordinator& coordinator = *server.coordinator();
  coordinator::JobPolicy migrate;
  migrate.mode = coordinator::BalanceMode::kMigrate;
  migrate.report_period = absl::Milliseconds(100);
  ASSERT_TRUE(coordinator.SetPolicy("stuck", migrate).ok());
  ASSERT_TRUE(coordinator.SetPolicy("healthy", migrate).ok());
  auto hello = [](const std::string& job) {
    v1::AgentMessage m;
    m.mutable_hello()->set_agent_id(job + "-agent");
    for (int rank : {0, 1}) {
      v1::WorkerIdentity w = Worker(rank);
      w.set_job(job);
      w.set_device(job + "/dev" + std::to_string(rank));
      *m.mutable_hello()->add_workers() = w;
    }
    return m;
  };
  // One step of both ranks, rank 1 three times slower: a straggler the planner offloads.
  auto straggling_step = [](const std::string& job, int64_t step) {
    v1::AgentMessage m = Reports(job, 0, 0, 0.002, step);
    *m.mutable_reports()->add_reports() = Reports(job, 1, 0, 0.006, step).reports().reports(0);
    return m;
  };

  // The stuck agent's channel announces a small window and never grows it, so the
  // coordinator's writes to it block once a few hundred KB are unread.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 16 << 10);
  auto stuck_stub = v1::AgentService::NewStub(
      grpc::CreateCustomChannel(server.address(), grpc::InsecureChannelCredentials(), args));
  grpc::ClientContext stuck_context;
  auto stuck = stuck_stub->Session(&stuck_context);
  ASSERT_TRUE(stuck->Write(hello("stuck")));
  // Reports for a job that does not exist: each earns a Rejection it never reads.
  v1::AgentMessage flood;
  for (int i = 0; i < 1000; ++i) {
    *flood.mutable_reports()->add_reports() = Reports("nosuchjob", 0, 0, 0.1).reports().reports(0);
  }
  const absl::Time flood_deadline = absl::Now() + absl::Seconds(30);
  while (server.agent_service().BlockedSessions(absl::Milliseconds(200)) == 0) {
    ASSERT_LT(absl::Now(), flood_deadline) << "the stuck agent's writes never blocked";
    ASSERT_TRUE(stuck->Write(flood));
  }
  // Its group gets a plan while it is stuck: the push queues behind the blocked write.
  for (int64_t step = 1; coordinator.Explain("stuck", "tp0")->plan_version() == 0; ++step) {
    ASSERT_LT(absl::Now(), flood_deadline) << "the stuck agent's group got no plan";
    ASSERT_TRUE(stuck->Write(straggling_step("stuck", step)));
    absl::SleepFor(absl::Milliseconds(20));
  }

  // A healthy agent meanwhile: its reports are taken and its plan arrives.
  auto healthy_stub = v1::AgentService::NewStub(
      grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext healthy_context;
  auto healthy = healthy_stub->Session(&healthy_context);
  ASSERT_TRUE(healthy->Write(hello("healthy")));
  absl::Notification got_plan;
  std::thread reader([&] {
    v1::CoordinatorMessage message;
    while (healthy->Read(&message)) {
      if (message.has_plan() && !got_plan.HasBeenNotified()) got_plan.Notify();
    }
  });
  const absl::Time began = absl::Now();
  for (int64_t step = 1; !got_plan.HasBeenNotified() && absl::Now() - began < kWriteTimeout;
       ++step) {
    ASSERT_TRUE(healthy->Write(straggling_step("healthy", step)));
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_TRUE(got_plan.HasBeenNotified()) << "the healthy agent got no plan while one was stuck";
  const absl::Duration plan_after = absl::Now() - began;
  // ... and it arrived while the stuck agent was still blocked, not after it was dropped.
  EXPECT_EQ(server.agent_service().BlockedSessions(absl::Milliseconds(200)), 1);
  EXPECT_EQ(server.agent_service().counters().sessions_cancelled_slow, 0);
  EXPECT_LT(plan_after, absl::Seconds(3));

  // The stuck agent is dropped within the bound; the healthy one stays.
  EXPECT_TRUE(
      WaitFor([&] { return server.agent_service().counters().sessions_cancelled_slow == 1; },
              kWriteTimeout + absl::Seconds(5)));
  v1::CoordinatorMessage unread;
  while (stuck->Read(&unread)) {
  }
  const grpc::Status stuck_status = stuck->Finish();
  EXPECT_EQ(stuck_status.error_code(), grpc::StatusCode::CANCELLED);
  // The client sees the cancellation before the server's session handler has returned and
  // detached the agent (a few ms later under load), so wait for the detach rather than
  // read the count at once.
  EXPECT_TRUE(WaitFor(
      [&] { return coordinator.connected_agents() == 1 && coordinator.attached_workers() == 2; },
      absl::Seconds(5)))
      << "connected agents: " << coordinator.connected_agents()
      << ", attached workers: " << coordinator.attached_workers();
  EXPECT_GT(server.agent_service().counters().rejections_dropped, 0);

  healthy_context.TryCancel();
  reader.join();
  healthy->Finish();
  server.Stop();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ballast
