// The coordinator under concurrent callers, as a gRPC server drives it: agent sessions
// reporting from several threads while their group is forgotten and registered again,
// the tick loop planning, admin reads. Meant for the sanitizer builds (build-asan): a
// group erased under a report used to throw out of a gRPC handler (std::out_of_range from
// groups_.at()) or, without the throw, read freed memory.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "coordinator/coordinator.h"
#include "testing/control_plane_messages.h"
#include "testing/coordinator_fixtures.h"
#include "testing/fake_clock.h"
#include "testing/fake_policy_store.h"
#include "testing/timeouts.h"

namespace ballast::coordinator {
namespace {

using testing::Hello;
using testing::kUnits;
using testing::RecordingSink;

// Rank `rank` of vit/tp0 reports `step`: half the units at `seconds_per_unit`, 1 ms in
// collectives.
v1::WorkerReport RankReport(int rank, int64_t step, double seconds_per_unit) {
  v1::WorkerReport r =
      testing::StepReport({}, rank, step, kUnits / 2, seconds_per_unit * kUnits / 2);
  r.mutable_step()->mutable_blocks(0)->set_comm_seconds(1e-3);
  return r;
}

TEST(CoordinatorConcurrencyTest, AGroupForgottenAndRegisteredAgainWhileReportsAreInFlight) {
  testing::FakeClock clock;
  testing::InMemoryPolicyStore store;
  auto speeds = *SpeedModel::Create(SpeedModelOptions{}, &clock);
  // Forgotten as soon as its agent is away and one tick's time passes without a report.
  std::unique_ptr<Coordinator> coordinator =
      *Coordinator::Create({.forget_after = absl::Milliseconds(1)}, &clock, &store, speeds.get());
  JobPolicy policy;
  policy.mode = BalanceMode::kMigrate;
  policy.report_period = absl::Milliseconds(10);  // planned every tick
  ASSERT_TRUE(coordinator->SetPolicy("vit", policy).ok());

  std::atomic<bool> stop{false};
  std::atomic<int64_t> not_found{0};
  std::vector<std::thread> threads;
  // Reporters: both ranks, rank 1 twice as slow, so that the loop plans and publishes.
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int64_t step = 0; !stop.load(); ++step) {
        const int rank = t % 2;
        absl::Status s =
            coordinator->Report("agent-1", RankReport(rank, step, rank == 0 ? 1e-3 : 2e-3));
        if (s.code() == absl::StatusCode::kNotFound) not_found.fetch_add(1);
        if (step % 8 == 0) std::this_thread::yield();
      }
    });
  }
  // The agent's sessions: connected (the group registered again), then away.
  threads.emplace_back([&] {
    while (!stop.load()) {
      RecordingSink sink;
      EXPECT_TRUE(coordinator->AgentConnected(Hello({0, 0, 0, 0, 1, 1, 1, 1}), &sink).ok());
      std::this_thread::yield();
      coordinator->AgentDisconnected("agent-1", &sink);
    }
  });
  // Admin reads.
  threads.emplace_back([&] {
    while (!stop.load()) {
      (void)coordinator->Status("");
      (void)coordinator->Explain("vit", "tp0");
      (void)coordinator->counters();
      std::this_thread::yield();
    }
  });

  // The tick loop, on this thread: time passes, idle groups are forgotten, due ones
  // planned. Until enough of each happened; how many ticks that takes depends on how the
  // threads are scheduled (33 forgotten in 200,000 ticks on a loaded CI machine, 50 in
  // far fewer unloaded), so the bound is a generous wall-clock one, not a tick count.
  const absl::Time give_up = absl::Now() + testing::ScaledTimeout(absl::Seconds(60));
  int64_t ticks = 0;
  for (; absl::Now() < give_up; ++ticks) {
    clock.Advance(absl::Milliseconds(20));
    coordinator->Tick();
    if (ticks % 64 == 0) {
      const CoordinatorCounters c = coordinator->counters();
      if (c.groups_forgotten >= 50 && c.reports_accepted >= 1000 && c.decisions >= 100) break;
    }
  }
  stop.store(true);
  for (std::thread& t : threads) t.join();

  const CoordinatorCounters c = coordinator->counters();
  EXPECT_GE(c.groups_forgotten, 50) << "after " << ticks << " ticks";
  EXPECT_GE(c.reports_accepted, 1000);
  EXPECT_GE(c.decisions, 100);
  // Reports for the group while it was forgotten were refused as unknown, not crashed on.
  EXPECT_GT(not_found.load(), 0);
  // And the coordinator still serves: the job comes back whole.
  RecordingSink sink;
  ASSERT_TRUE(coordinator->AgentConnected(Hello({0, 0, 0, 0, 1, 1, 1, 1}), &sink).ok());
  EXPECT_TRUE(coordinator->Report("agent-1", RankReport(0, 1'000'000, 1e-3)).ok());
  absl::StatusOr<v1::ClusterStatus> status = coordinator->Status("vit");
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->workers(), 2);
}

}  // namespace
}  // namespace ballast::coordinator
