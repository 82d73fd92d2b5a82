// The coordinator's gRPC edge under bad input, on a real loopback server: malformed,
// NaN, negative or absurd timings, unknown job or rank ids, invalid policies, oversized
// messages. Each gets INVALID_ARGUMENT or NOT_FOUND naming the field (or, for an
// oversized message, RESOURCE_EXHAUSTED), is counted, and changes nothing else.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "ballast/v1/admin.grpc.pb.h"
#include "ballast/v1/agent.grpc.pb.h"
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
    bad.mutable_reports()->mutable_reports(0)->mutable_step()->mutable_blocks(0)->add_owner_of_unit(r);
  }
  v1::Rejection rejection = SendExpectingRejection(bad);
  EXPECT_EQ(rejection.code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(rejection.message(), HasSubstr("owner_of_unit has 3 entries, block has 4"));
  v1::AgentMessage out_of_range = Reports("vit", 0, 0, 0.1, 2);
  for (int r : {0, 0, 1, 2}) {
    out_of_range.mutable_reports()->mutable_reports(0)->mutable_step()->mutable_blocks(0)
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

}  // namespace
}  // namespace ballast
