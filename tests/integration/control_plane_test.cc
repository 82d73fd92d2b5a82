// The control plane end to end on loopback: a real coordinator gRPC server (SQLite store),
// two real agents on Unix sockets, and four workers, each a real TpGroup (real Gloo ranks,
// as threads) with the real AgentClient. Only compute is simulated: each step a worker
// reports compute seconds = its seconds per unit x the units it computes under the plan
// in force, so the test controls who straggles.
#include "testing/control_plane.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "ballast/agent_client.h"
#include "ballast/ballast.h"
#include "common/status_macros.h"
#include "ctl/admin_client.h"
#include "ctl/commands.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "testing/rank_threads.h"

namespace ballast {
namespace {

using ::ballast::testing::InProcessAgent;
using ::ballast::testing::InProcessCoordinator;
using ::ballast::testing::RankContext;
using ::ballast::testing::WaitFor;

constexpr int kRanks = 4;
constexpr char kJob[] = "sim";
constexpr char kGroup[] = "test/tp";  // RunRanks's group
constexpr double kFast = 1e-3;        // seconds per unit
constexpr double kSlow = 2e-3;
const absl::Duration kReportPeriod = absl::Milliseconds(500);
const absl::Duration kStepPeriod = absl::Milliseconds(20);

std::string TempDir() {
  static std::atomic<int> n{0};
  std::string dir = absl::StrCat(::testing::TempDir(), "/ballast-cp-", ::getpid(), "-", n++);
  std::filesystem::create_directories(dir);
  return dir;
}

// What the test observes of each worker, written by the worker threads.
struct WorkerView {
  absl::Mutex mu;
  int64_t applied_version ABSL_GUARDED_BY(mu) = 0;
  WorkloadPlan applied ABSL_GUARDED_BY(mu);
  int64_t plans_received ABSL_GUARDED_BY(mu) = 0;
  int64_t steps ABSL_GUARDED_BY(mu) = 0;
  bool attached ABSL_GUARDED_BY(mu) = false;
};

class ControlPlaneTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TempDir();
    coordinator_ = std::make_unique<InProcessCoordinator>(
        testing::InProcessCoordinatorOptions{.store_path = dir_ + "/coordinator.db"});
    ASSERT_TRUE(coordinator_->Start().ok());
    for (int a = 0; a < 2; ++a) {
      agents_.push_back(std::make_unique<InProcessAgent>(absl::StrCat("agent-", a),
                                                         absl::StrCat(dir_, "/agent-", a, ".sock"),
                                                         coordinator_->address()));
      ASSERT_TRUE(agents_.back()->Start().ok());
    }
    admin_ = ctl::NewGrpcAdminClient(coordinator_->address(), absl::Seconds(5));
    // The job's policy, set before any worker appears, as an operator would.
    v1::SetPolicyRequest set;
    set.set_preconfigure(true);
    set.set_job(kJob);
    v1::Policy& p = *set.mutable_policy();
    p.set_mode("auto");
    p.set_imputation("mean");
    p.set_priority("change");
    p.set_max_pruned_fraction_rank(0.5);
    p.set_max_pruned_fraction_group(0.25);
    p.set_accuracy_weight_seconds(1.0);
    p.set_straggler_threshold(0.2);
    p.set_hysteresis(0.05);
    p.set_reshard_after_ms(600000);
    p.set_report_period_ms(absl::ToInt64Milliseconds(kReportPeriod));
    absl::StatusOr<v1::Policy> stored = admin_->SetPolicy(set);
    ASSERT_TRUE(stored.ok()) << stored.status();
    for (int r = 0; r < kRanks; ++r) seconds_per_unit_[r] = kFast;
    workers_ = std::thread([this] { RunWorkers(); });
  }

  void TearDown() override {
    stop_ = true;
    if (workers_.joinable()) workers_.join();
    EXPECT_TRUE(workers_status_.ok()) << workers_status_;
    agents_.clear();
    coordinator_.reset();
    std::filesystem::remove_all(dir_);
  }

  void RunWorkers() {
    workers_status_ = testing::RunRanks(kRanks, [this](RankContext& ctx) -> absl::Status {
      MlpConfig config{.id = BlockId(0), .hidden = 8, .intermediate = 64, .unit_size = 8};
      BALLAST_ASSIGN_OR_RETURN(auto mlp, ParallelMlp::Create(ctx.group.get(), config));
      AgentClientOptions options;
      options.socket_path = agents_[ctx.rank / 2]->socket_path();  // ranks 0,1 | 2,3
      options.job = kJob;
      options.device = absl::StrCat("node-", ctx.rank / 2, "/dev", ctx.rank % 2);
      options.node = absl::StrCat("node-", ctx.rank / 2);
      options.initial_backoff = absl::Milliseconds(10);
      options.max_backoff = absl::Milliseconds(200);
      BALLAST_ASSIGN_OR_RETURN(auto client, AgentClient::Start(options, ctx.group.get()));
      WorkerView& view = views_[ctx.rank];
      // Every rank leaves at the same step: the ranks are in lockstep through BeginStep's
      // collective, so a stop flag read on its own would strand the others mid-step.
      std::vector<int64_t> stop(2, 0);
      while (true) {
        BALLAST_RETURN_IF_ERROR(ctx.group->BeginStep());
        int32_t units = 0;
        for (UnitFate f : mlp->LocalFates()) units += f == UnitFate::kLocal;
        for (const BlockPlan& bp : ctx.group->applied_plan().blocks) {
          for (const Offload& o : bp.offloads) units += o.helper.value() == ctx.rank ? o.units : 0;
        }
        BALLAST_RETURN_IF_ERROR(ctx.group->EndStep());
        StepTimings timings = ctx.group->last_step_timings();
        timings.blocks[0].units_computed = units;
        timings.blocks[0].compute_seconds = seconds_per_unit_[ctx.rank].load() * units;
        client->Report(timings);
        {
          absl::MutexLock lock(&view.mu);
          view.applied_version = ctx.group->applied_version().value();
          view.applied = ctx.group->applied_plan();
          view.plans_received = client->stats().plans_received;
          view.attached = client->stats().connected;
          ++view.steps;
        }
        absl::SleepFor(kStepPeriod);     // the simulated step's compute
        stop[0] = stop_.load() ? 0 : 1;  // min over ranks: 0 once any rank saw the flag
        BALLAST_RETURN_IF_ERROR(ctx.backend->comm().AllReduceMin(stop.data(), 1));
        if (stop[0] == 0) break;
      }
      return absl::OkStatus();
    });
  }

  // True when every worker holds (has applied) a plan in which rank 3 sheds work.
  bool AllRelieveRank3() {
    for (WorkerView& v : views_) {
      absl::MutexLock lock(&v.mu);
      bool relieved = false;
      for (const BlockPlan& bp : v.applied.blocks) {
        if (!bp.pruned_units.empty() && bp.pruned_units[3] > 0) relieved = true;
        for (const Offload& o : bp.offloads) relieved |= o.owner.value() == 3;
        if (!bp.owner_of_unit.empty()) {
          relieved |= std::count(bp.owner_of_unit.begin(), bp.owner_of_unit.end(), RankId(3)) < 2;
        }
      }
      if (!relieved) return false;
    }
    return true;
  }

  bool AllReceivedAPlan(int64_t at_least) {
    for (WorkerView& v : views_) {
      absl::MutexLock lock(&v.mu);
      if (v.plans_received < at_least) return false;
    }
    return true;
  }

  bool AllLocalEverywhere() {
    for (WorkerView& v : views_) {
      absl::MutexLock lock(&v.mu);
      if (v.applied_version == 0 || !v.applied.blocks.empty()) return false;
    }
    return true;
  }

  int64_t Version(int rank) {
    absl::MutexLock lock(&views_[rank].mu);
    return views_[rank].applied_version;
  }

  int64_t Steps(int rank) {
    absl::MutexLock lock(&views_[rank].mu);
    return views_[rank].steps;
  }

  std::string dir_;
  std::unique_ptr<InProcessCoordinator> coordinator_;
  std::vector<std::unique_ptr<InProcessAgent>> agents_;
  std::unique_ptr<ctl::AdminClient> admin_;
  std::atomic<double> seconds_per_unit_[kRanks];
  std::atomic<bool> stop_{false};
  WorkerView views_[kRanks];
  std::thread workers_;
  absl::Status workers_status_;
};

TEST_F(ControlPlaneTest, StragglerIsRelievedAndRecoveryReturnsToAllLocal) {
  // Everyone registers and reports; equal speeds need no plan.
  ASSERT_TRUE(WaitFor([&] { return coordinator_->coordinator()->attached_workers() == kRanks; },
                      absl::Seconds(10)));
  ASSERT_TRUE(WaitFor([&] { return Steps(0) > 20; }, absl::Seconds(10)));
  EXPECT_EQ(Version(0), 0) << "a plan was pushed while all ranks ran at the same speed";

  // Rank 3 slows down 2x; a relieving plan must reach all four workers within two report
  // periods (the acceptance bound; one period of detection, one of decision and delivery).
  const int64_t received_before = [&] {
    absl::MutexLock lock(&views_[0].mu);
    return views_[0].plans_received;
  }();
  const absl::Time slowed_at = absl::Now();
  seconds_per_unit_[3] = kSlow;
  ASSERT_TRUE(WaitFor([&] { return AllReceivedAPlan(received_before + 1); }, 4 * kReportPeriod));
  const absl::Duration delivered_after = absl::Now() - slowed_at;
  EXPECT_LE(delivered_after, 2 * kReportPeriod) << "plan took " << delivered_after;
  ASSERT_TRUE(WaitFor([&] { return AllRelieveRank3(); }, absl::Seconds(5)));
  for (int r = 1; r < kRanks; ++r) EXPECT_EQ(Version(r), Version(0));

  absl::StatusOr<v1::Explanation> why = admin_->Explain([] {
    v1::ExplainRequest request;
    request.set_job(kJob);
    request.set_group(kGroup);
    return request;
  }());
  ASSERT_TRUE(why.ok()) << why.status();
  EXPECT_GT(why->plan_version(), 0);
  EXPECT_THAT(why->text(), ::testing::HasSubstr("block 0"));

  // It recovers: the plan returns to all-local on every worker.
  seconds_per_unit_[3] = kFast;
  ASSERT_TRUE(WaitFor([&] { return AllLocalEverywhere(); }, absl::Seconds(10)));
}

// `ballastctl hold` through the real admin API: the workers run the held plan though no
// rank straggles (the planner alone would push nothing), it survives a coordinator
// restart, and after `ballastctl release` the planner takes the group back.
TEST_F(ControlPlaneTest, AnOperatorHoldsTheGroupAtAStaticPlanUntilReleased) {
  ASSERT_TRUE(WaitFor([&] { return coordinator_->coordinator()->attached_workers() == kRanks; },
                      absl::Seconds(10)));
  std::ostringstream out, err;
  ASSERT_EQ(ctl::RunCommand({"hold", kJob, kGroup, "3", "reshard=0.5"}, {}, *admin_, out, err), 0)
      << err.str();
  // Rank 3 owns 2 of the 8 units: one is resharded to rank 0. (It keeps one to compute, so
  // it keeps a speed estimate: a rank that computes nothing has none after a restart.)
  auto runs_the_hold = [](const WorkloadPlan& plan) {
    if (plan.blocks.size() != 1) return false;
    const BlockPlan& bp = plan.blocks[0];
    return std::count(bp.owner_of_unit.begin(), bp.owner_of_unit.end(), RankId(3)) == 1 &&
           std::count(bp.owner_of_unit.begin(), bp.owner_of_unit.end(), RankId(0)) == 3 &&
           bp.offloads.empty();
  };
  auto every_worker = [&](bool holding) {
    for (WorkerView& v : views_) {
      absl::MutexLock lock(&v.mu);
      if (runs_the_hold(v.applied) != holding) return false;
    }
    return true;
  };
  ASSERT_TRUE(WaitFor([&] { return every_worker(true); }, absl::Seconds(10)));
  ASSERT_EQ(ctl::RunCommand({"status", kJob}, {}, *admin_, out, err), 0) << err.str();
  EXPECT_THAT(out.str(), ::testing::HasSubstr("HELD at rank 3: offload 0%, reshard 50%"));
  // Held through several decisions: the plan stays, and is not pushed again.
  const int64_t version = Version(0);
  const int64_t decisions = coordinator_->coordinator()->counters().decisions;
  ASSERT_TRUE(
      WaitFor([&] { return coordinator_->coordinator()->counters().decisions > decisions + 2; },
              absl::Seconds(10)));
  EXPECT_EQ(Version(0), version);
  EXPECT_TRUE(every_worker(true));

  // A hold is an operator's setting: a restarted coordinator keeps it.
  coordinator_->Stop();
  ASSERT_TRUE(coordinator_->Start().ok());
  ASSERT_TRUE(WaitFor([&] { return coordinator_->coordinator()->attached_workers() == kRanks; },
                      absl::Seconds(10)));
  out.str("");
  ASSERT_EQ(ctl::RunCommand({"status", kJob}, {}, *admin_, out, err), 0) << err.str();
  EXPECT_THAT(out.str(), ::testing::HasSubstr("HELD at rank 3"));
  const int64_t restarted = coordinator_->coordinator()->counters().decisions;
  ASSERT_TRUE(
      WaitFor([&] { return coordinator_->coordinator()->counters().decisions > restarted + 2; },
              absl::Seconds(10)));
  EXPECT_TRUE(every_worker(true));

  // Released, the planner takes the group back: with equal speeds it balances the split
  // the hold left uneven (rank 0 owns 3 units, rank 3 one).
  ASSERT_EQ(ctl::RunCommand({"release", kJob, kGroup}, {}, *admin_, out, err), 0) << err.str();
  ASSERT_TRUE(WaitFor([&] { return every_worker(false); }, absl::Seconds(10)));
  EXPECT_GT(Version(0), version);
}

TEST_F(ControlPlaneTest, CoordinatorRestartLosesNothing) {
  ASSERT_TRUE(WaitFor([&] { return coordinator_->coordinator()->attached_workers() == kRanks; },
                      absl::Seconds(10)));
  seconds_per_unit_[3] = kSlow;
  ASSERT_TRUE(WaitFor([&] { return AllRelieveRank3(); }, absl::Seconds(10)));
  const int64_t version = Version(0);
  const int64_t connects = agents_[0]->session().connects();

  // Kill the coordinator mid-stream. Workers keep training on their last plan.
  coordinator_->Stop();
  const int64_t steps = Steps(0);
  ASSERT_TRUE(WaitFor([&] { return Steps(0) > steps + 10; }, absl::Seconds(10)));
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(Version(r), version) << "rank " << r;

  // Restart on the same port and store: agents reconnect, the policy set before the kill
  // is still in force, and balancing resumes.
  ASSERT_TRUE(coordinator_->Start().ok());
  ASSERT_TRUE(WaitFor(
      [&] {
        return agents_[0]->session().connects() > connects && agents_[0]->session().connected() &&
               agents_[1]->session().connected();
      },
      absl::Seconds(10)));
  v1::GetPolicyRequest get;
  get.set_job(kJob);
  absl::StatusOr<v1::Policy> policy = admin_->GetPolicy(get);
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_EQ(policy->report_period_ms(), absl::ToInt64Milliseconds(kReportPeriod));
  EXPECT_EQ(policy->straggler_threshold(), 0.2);
  ASSERT_TRUE(WaitFor([&] { return coordinator_->coordinator()->attached_workers() == kRanks; },
                      absl::Seconds(10)));
  // The straggler persists, so the restarted coordinator relieves it again, with a plan
  // version newer than the one the workers hold.
  ASSERT_TRUE(
      WaitFor([&] { return Version(0) > version && AllRelieveRank3(); }, absl::Seconds(10)));
}

// An admin call made while the coordinator is not listening (a restart, or a connection
// attempt that failed) is made again while its deadline allows: answered once the
// coordinator is back 300 ms later, where a single attempt fails UNAVAILABLE at once. One
// that stays down still fails UNAVAILABLE, well inside the deadline.
TEST_F(ControlPlaneTest, AnAdminCallOutlastsACoordinatorBackWithinItsDeadline) {
  coordinator_->Stop();
  absl::Status restarted;
  std::thread restart([&] {
    absl::SleepFor(absl::Milliseconds(300));
    restarted = coordinator_->Start();
  });
  v1::GetPolicyRequest get;
  get.set_job(kJob);
  absl::StatusOr<v1::Policy> policy = admin_->GetPolicy(get);
  restart.join();
  ASSERT_TRUE(restarted.ok()) << restarted;
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_EQ(policy->report_period_ms(), absl::ToInt64Milliseconds(kReportPeriod));

  coordinator_->Stop();
  const absl::Time start = absl::Now();
  policy = admin_->GetPolicy(get);
  EXPECT_EQ(policy.status().code(), absl::StatusCode::kUnavailable) << policy.status();
  EXPECT_THAT(policy.status().message(), ::testing::HasSubstr("not reachable"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(4));  // the deadline is 5 s
  ASSERT_TRUE(coordinator_->Start().ok());
}

TEST_F(ControlPlaneTest, WorkersKeepTrainingWhileTheirAgentIsAwayAndReattach) {
  ASSERT_TRUE(WaitFor([&] { return coordinator_->coordinator()->attached_workers() == kRanks; },
                      absl::Seconds(10)));
  // The agent serves grpc.health.v1 on its socket, like every Ballast server.
  {
    auto health = grpc::health::v1::Health::NewStub(grpc::CreateChannel(
        "unix:" + agents_[0]->socket_path(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    grpc::health::v1::HealthCheckResponse response;
    ASSERT_TRUE(health->Check(&context, {}, &response).ok());
    EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  }
  seconds_per_unit_[3] = kSlow;
  ASSERT_TRUE(WaitFor([&] { return AllRelieveRank3(); }, absl::Seconds(10)));
  const int64_t version = Version(2);

  // Ranks 2 and 3 lose their agent. They keep training, on the plan they agreed on.
  agents_[1]->Stop();
  const int64_t steps = Steps(2);
  ASSERT_TRUE(WaitFor([&] { return Steps(2) > steps + 10; }, absl::Seconds(10)));
  EXPECT_EQ(Version(2), version);
  EXPECT_EQ(Version(3), version);

  // The agent comes back on the same socket: the workers reattach by themselves, and
  // plans flow again (rank 3 recovers, so every rank returns to all-local).
  ASSERT_TRUE(agents_[1]->Start().ok());
  ASSERT_TRUE(WaitFor(
      [&] {
        absl::MutexLock l2(&views_[2].mu);
        absl::MutexLock l3(&views_[3].mu);
        return views_[2].attached && views_[3].attached;
      },
      absl::Seconds(10)));
  ASSERT_TRUE(WaitFor([&] { return coordinator_->coordinator()->attached_workers() == kRanks; },
                      absl::Seconds(10)));
  seconds_per_unit_[3] = kFast;
  ASSERT_TRUE(WaitFor([&] { return AllLocalEverywhere(); }, absl::Seconds(10)));
}

}  // namespace
}  // namespace ballast
