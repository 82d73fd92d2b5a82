// The coordinator learns link speeds from the offload transfers workers report
// (link_model.h), prices offloads at them, and refuses samples that name no peer.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "coordinator/coordinator.h"
#include "proto/convert.h"
#include "testing/control_plane_messages.h"
#include "testing/coordinator_fixtures.h"
#include "testing/fake_clock.h"
#include "testing/fake_policy_store.h"

namespace ballast::coordinator {
namespace {

using testing::Hello;
using testing::kUnits;
using testing::RecordingSink;

class CoordinatorLinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    speeds_ = *SpeedModel::Create(SpeedModelOptions{}, &clock_);
    // The prior: 1 GB/s, so an offload of a 1,000-byte unit looks free at first.
    coordinator_ =
        *Coordinator::Create({.link_bytes_per_second = 1e9}, &clock_, &store_, speeds_.get());
    JobPolicy policy;
    policy.mode = BalanceMode::kMigrate;
    policy.report_period = absl::Milliseconds(100);
    ASSERT_TRUE(coordinator_->SetPolicy("vit", policy).ok());
    ASSERT_TRUE(coordinator_->AgentConnected(Hello({0, 0, 0, 0, 1, 1, 1, 1}), &sink_).ok());
  }

  // Rank `rank`'s report for `step`: 4 units at `seconds_per_unit`, and, when bytes > 0,
  // a transfer sample of `bytes` received from `from` in `seconds`.
  v1::WorkerReport Report(int rank, int64_t step, double seconds_per_unit, int64_t bytes = 0,
                          double seconds = 0, int from = -1) {
    v1::WorkerReport r = testing::StepReport({}, rank, step, 4, 4 * seconds_per_unit);
    v1::BlockTiming* b = r.mutable_step()->mutable_blocks(0);
    b->set_micro_batches(micro_batches_);
    if (bytes > 0) {
      b->mutable_received()->set_from_rank(from);
      b->mutable_received()->set_bytes(bytes);
      b->mutable_received()->set_seconds(seconds);
    }
    return r;
  }

  // One planning round of reports (rank 1 at 2x); returns the offloaded units in force.
  int Round(int64_t step, int64_t bytes = 0, double seconds = 0) {
    EXPECT_TRUE(coordinator_->Report("agent-1", Report(0, step, 1e-3, bytes, seconds, 1)).ok());
    EXPECT_TRUE(coordinator_->Report("agent-1", Report(1, step, 2e-3, bytes, seconds, 0)).ok());
    clock_.Advance(absl::Milliseconds(100));
    coordinator_->Tick();
    if (sink_.plans().empty()) return 0;
    absl::StatusOr<WorkloadPlan> plan = FromProto(sink_.plans().back());
    int offloaded = 0;
    for (const BlockPlan& bp : plan->blocks) {
      for (const Offload& o : bp.offloads) offloaded += o.units;
    }
    return offloaded;
  }

  // Migrate, deciding every 100 ms, chronic after 1 s of straggling.
  static JobPolicy ChronicAfterOneSecond() {
    JobPolicy policy;
    policy.mode = BalanceMode::kMigrate;
    policy.report_period = absl::Milliseconds(100);
    policy.reshard_after = absl::Seconds(1);
    return policy;
  }

  // What Report says of the step's micro-batches (0: nothing, as a forward-only step).
  int micro_batches_ = 0;
  testing::FakeClock clock_;
  testing::InMemoryPolicyStore store_;
  std::unique_ptr<SpeedModel> speeds_;
  std::unique_ptr<Coordinator> coordinator_;
  RecordingSink sink_;
};

TEST_F(CoordinatorLinkTest, MeasuredTransfersReplaceThePriorAndPriceOffloadsOut) {
  int64_t step = 0;
  int offloaded = 0;
  for (; step < 20 && offloaded == 0; ++step) offloaded = Round(step);
  ASSERT_GT(offloaded, 0) << "at the 1 GB/s prior, offloading from a 2x straggler pays";
  absl::StatusOr<v1::ClusterStatus> status = coordinator_->Status("vit");
  ASSERT_TRUE(status.ok());
  EXPECT_DOUBLE_EQ(status->jobs(0).groups(0).link_bytes_per_second(), 1e9);
  EXPECT_FALSE(status->jobs(0).groups(0).link_learned());

  // The offloads' transfers show a 1 kB/s link: a unit now costs each side 2 s a step,
  // and the plan goes back to all-local (after the dwell that follows a change).
  for (int i = 0; i < 40 && offloaded > 0; ++i, ++step) offloaded = Round(step, 1000, 1.0);
  EXPECT_EQ(offloaded, 0) << "offloads stayed after the link was measured slow";
  status = coordinator_->Status("vit");
  ASSERT_TRUE(status.ok());
  EXPECT_DOUBLE_EQ(status->jobs(0).groups(0).link_bytes_per_second(), 1000);
  EXPECT_TRUE(status->jobs(0).groups(0).link_learned());
  absl::StatusOr<v1::Explanation> why = coordinator_->Explain("vit", "tp0");
  ASSERT_TRUE(why.ok());
  EXPECT_THAT(why->text(), ::testing::HasSubstr(
                               "link: 0.001 MB/s, learned from 8 offload transfers between ranks "
                               "0 and 1 (the slowest pair measured; prior 1000 MB/s)"));
}

// What a CPU quota did in the interleaved benchmark: the throttled sender's transfers read
// 20x slow for a while, the link's quartile priced offloading out, and with no offload no
// transfer was measured again. Once the newest sample is older than --link_stale_after the
// link is priced at its fastest sample, the straggler is balanced again, and the new
// samples relearn the link.
TEST_F(CoordinatorLinkTest, ALinkPricedOutIsPricedAtItsFastestSampleOnceStaleAndRelearned) {
  JobPolicy policy;
  policy.mode = BalanceMode::kMigrate;
  policy.report_period = absl::Milliseconds(100);
  policy.reshard_after = absl::Hours(1);  // the straggler is balanced by offloads alone
  ASSERT_TRUE(coordinator_->SetPolicy("vit", policy).ok());
  int64_t step = 0;
  int offloaded = 0;
  for (; step < 20 && offloaded == 0; ++step) offloaded = Round(step);
  ASSERT_GT(offloaded, 0);
  // One transfer at 1 GB/s, then slow ones (1 kB/s): the quartile is slow.
  offloaded = Round(step++, 1000, 1e-6);
  for (int i = 0; i < 40 && offloaded > 0; ++i, ++step) offloaded = Round(step, 1000, 1.0);
  ASSERT_EQ(offloaded, 0) << "offloads stayed after the link was measured slow";
  // No offload, no sample: a minute later the link is what it was.
  for (int i = 0; i < 590; ++i, ++step) ASSERT_EQ(Round(step), 0) << "round " << i;
  absl::StatusOr<v1::ClusterStatus> status = coordinator_->Status("vit");
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->jobs(0).groups(0).link_basis(), "learned");
  EXPECT_DOUBLE_EQ(status->jobs(0).groups(0).link_bytes_per_second(), 1000);
  // Past it: priced at the fastest sample, 1 GB/s, and the straggler offloads again.
  for (int i = 0; i < 40 && offloaded == 0; ++i, ++step) offloaded = Round(step);
  EXPECT_GT(offloaded, 0) << "a stale link measured slow kept offloading priced out";
  status = coordinator_->Status("vit");
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->jobs(0).groups(0).link_basis(), "stale");
  EXPECT_TRUE(status->jobs(0).groups(0).link_learned());
  EXPECT_NEAR(status->jobs(0).groups(0).link_bytes_per_second(), 1e9, 1e3);
  absl::StatusOr<v1::Explanation> why = coordinator_->Explain("vit", "tp0");
  ASSERT_TRUE(why.ok());
  EXPECT_THAT(why->text(), ::testing::HasSubstr("link: 1000 MB/s, the fastest of "));
  EXPECT_THAT(why->text(), ::testing::HasSubstr(" offload transfers between ranks 0 and 1, the "
                                                "newest 1m"));
  EXPECT_THAT(why->text(), ::testing::HasSubstr("(stale after 1m: priced at what the link"));
  // The new offloads' transfers (500 MB/s) start a new window: relearning, at the stale
  // price, until 8 are in, then learned from them alone.
  Round(step++, 1000, 2e-6);
  status = coordinator_->Status("vit");
  EXPECT_EQ(status->jobs(0).groups(0).link_basis(), "relearning");
  why = coordinator_->Explain("vit", "tp0");
  EXPECT_THAT(why->text(), ::testing::HasSubstr(
                               "link: 1000 MB/s between ranks 0 and 1, the fastest transfer "
                               "seen before it went stale, until 8 new samples are in (2 so far"));
  for (int i = 0; i < 3; ++i) Round(step++, 1000, 2e-6);
  status = coordinator_->Status("vit");
  EXPECT_EQ(status->jobs(0).groups(0).link_basis(), "learned");
  EXPECT_NEAR(status->jobs(0).groups(0).link_bytes_per_second(), 500e6, 1e3);
  EXPECT_GT(Round(step++, 1000, 2e-6), 0) << "offloading pays at 500 MB/s too";
}

// On a link measured slow a chronic straggler is resharded, and the move is restated in
// every plan until a worker reports it: ranks apply the newest plan they all hold, so a
// follow-up plan pushed within the same step used to drop the reshard unseen. Reported,
// the move is what the workers run: no plan is pushed only to stop stating it.
TEST_F(CoordinatorLinkTest, AChronicStragglerIsReshardedAndTheMoveRestatedUntilConfirmed) {
  JobPolicy policy = ChronicAfterOneSecond();
  ASSERT_TRUE(coordinator_->SetPolicy("vit", policy).ok());
  int64_t step = 0;
  size_t reshard = 0;  // index of the reshard plan in the sink, + 1
  for (; step < 60 && reshard == 0; ++step) {
    Round(step, 1000, 1.0);  // a 1 kB/s link from the start: offloads never pay
    const std::vector<v1::WorkloadPlan> plans = sink_.plans();
    for (size_t i = 0; i < plans.size(); ++i) {
      if (plans[i].blocks_size() > 0 && plans[i].blocks(0).owner_of_unit_size() > 0) {
        reshard = i + 1;
      }
    }
  }
  ASSERT_GT(reshard, 0u) << "no reshard after " << step << " rounds";
  const v1::BlockPlan moved = sink_.plans()[reshard - 1].blocks(0);
  EXPECT_LT(std::count(moved.owner_of_unit().begin(), moved.owner_of_unit().end(), 1), 4);
  // Unconfirmed: every later plan still says where the units are.
  for (int i = 0; i < 20; ++i, ++step) Round(step, 1000, 1.0);
  const std::vector<v1::WorkloadPlan> plans = sink_.plans();
  for (size_t i = reshard; i < plans.size(); ++i) {
    ASSERT_GT(plans[i].blocks_size(), 0) << "plan #" << plans[i].number();
    EXPECT_EQ(plans[i].blocks(0).owner_of_unit_size(), kUnits) << "plan #" << plans[i].number();
  }
  // Status reads the plan in force as stating the reshard, not yet made.
  const auto summary = [&] {
    absl::StatusOr<v1::ClusterStatus> status = coordinator_->Status("vit");
    EXPECT_TRUE(status.ok()) << status.status();
    return status.ok() ? status->jobs(0).groups(0).plan_summary() : std::string();
  };
  EXPECT_THAT(summary(), ::testing::HasSubstr("block 0 reshard;"));
  // A worker reports the move: the plan in force is what the workers run, and a plan
  // that only stopped stating the move would be a plan change that changes nothing.
  v1::WorkerReport confirm = Report(0, step, 1e-3);
  *confirm.mutable_step()->mutable_blocks(0)->mutable_owner_of_unit() = moved.owner_of_unit();
  ASSERT_TRUE(coordinator_->Report("agent-1", confirm).ok());
  const size_t confirmed = sink_.plans().size();
  for (int i = 0; i < 30; ++i) Round(++step, 1000, 1.0);
  EXPECT_THAT(summary(), ::testing::HasSubstr("block 0 reshard (made);"));
  const std::vector<v1::WorkloadPlan> after = sink_.plans();
  for (size_t i = confirmed; i < after.size(); ++i) {
    const bool states_moved =
        after[i].blocks_size() > 0 &&
        std::equal(after[i].blocks(0).owner_of_unit().begin(),
                   after[i].blocks(0).owner_of_unit().end(), moved.owner_of_unit().begin(),
                   moved.owner_of_unit().end());
    const bool asks_more =
        after[i].blocks_size() > 0 && (after[i].blocks(0).offloads_size() > 0 ||
                                       after[i].blocks(0).pruned_units_size() > 0 || !states_moved);
    EXPECT_TRUE(asks_more) << "plan #" << after[i].number() << " changes nothing they run";
  }
  EXPECT_EQ(after.size(), confirmed) << "the straggler stays as slow: nothing to change";
}

// Status shows the pooled verdict the decisions use: transient, then chronic after
// reshard_after, and still chronic after the reshard (the straggler is as slow as before),
// while the planning count to chronic restarts at the reshard.
TEST_F(CoordinatorLinkTest, StatusShowsThePooledVerdictAndAReshardRestartsOnlyThePlanCount) {
  JobPolicy policy = ChronicAfterOneSecond();
  ASSERT_TRUE(coordinator_->SetPolicy("vit", policy).ok());
  auto state_of = [&](int rank) {
    absl::StatusOr<v1::ClusterStatus> status = coordinator_->Status("vit");
    EXPECT_TRUE(status.ok());
    return status.ok() ? status->jobs(0).groups(0).ranks(rank).state() : std::string();
  };
  int64_t step = 0;
  for (; step < 4; ++step) Round(step, 1000, 1.0);  // a 1 kB/s link: offloads never pay
  EXPECT_EQ(state_of(0), "normal");
  EXPECT_EQ(state_of(1), "transient");
  size_t plans = sink_.plans().size();
  for (; step < 60 && sink_.plans().size() == plans; ++step) Round(step, 1000, 1.0);
  ASSERT_GT(sink_.plans().size(), plans) << "no reshard";
  ASSERT_GT(sink_.plans().back().blocks(0).owner_of_unit_size(), 0);
  EXPECT_EQ(state_of(1), "chronic") << "the reshard does not make the straggler faster";
  Round(step++, 1000, 1.0);
  absl::StatusOr<v1::Explanation> why = coordinator_->Explain("vit", "tp0");
  ASSERT_TRUE(why.ok());
  EXPECT_THAT(why->text(), ::testing::HasSubstr("since the last reshard (reshard_after 1s)"));
  EXPECT_THAT(why->text(), ::testing::Not(::testing::HasSubstr(": chronic")));
  // Mode off pools nothing: status falls back to the speed model's per-block state.
  policy.mode = BalanceMode::kOff;
  ASSERT_TRUE(coordinator_->SetPolicy("vit", policy).ok());
  for (int i = 0; i < 5; ++i) Round(step++, 1000, 1.0);
  EXPECT_NE(state_of(1), "normal");
}

// An offloaded unit's weights go out once a step and its gradients come back once per
// micro-batch, so the planner prices (1 + micro-batches) x its 1,000 bytes at the link's
// 1 GB/s prior. A report that names no micro-batches (a forward-only step) keeps the
// count last heard; one out of range is refused by name.
TEST_F(CoordinatorLinkTest, OffloadsArePricedWithAGradientReturnPerMicroBatch) {
  auto transfer_line = [&] {
    absl::StatusOr<v1::Explanation> why = coordinator_->Explain("vit", "tp0");
    EXPECT_TRUE(why.ok()) << why.status();
    return why.ok() ? why->text() : "";
  };
  int64_t step = 0;
  Round(step++);
  EXPECT_THAT(transfer_line(), ::testing::HasSubstr("transfer 2e-06 s/unit"));
  micro_batches_ = 3;
  Round(step++);
  EXPECT_THAT(transfer_line(), ::testing::HasSubstr("transfer 4e-06 s/unit"));
  micro_batches_ = 0;
  Round(step++);
  EXPECT_THAT(transfer_line(), ::testing::HasSubstr("transfer 4e-06 s/unit"));
  micro_batches_ = 1;
  Round(step++);
  EXPECT_THAT(transfer_line(), ::testing::HasSubstr("transfer 2e-06 s/unit"));

  for (int bad : {-1, (1 << 16) + 1}) {
    micro_batches_ = bad;
    const absl::Status s = coordinator_->Report("agent-1", Report(0, step, 1e-3));
    EXPECT_EQ(s.message(),
              absl::StrCat("report.blocks[0].micro_batches ", bad, " not in [0, 65536]"));
  }
}

TEST_F(CoordinatorLinkTest, ASampleFromNoPeerIsRefusedByName) {
  absl::Status s = coordinator_->Report("agent-1", Report(0, 0, 1e-3, 1000, 1.0, 0));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "report.blocks[0].received.from_rank 0 is not a peer of rank 0 in a "
            "group of 2");
  s = coordinator_->Report("agent-1", Report(0, 0, 1e-3, 1000, 1.0, 2));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  s = coordinator_->Report("agent-1", Report(0, 0, 1e-3, 1000, -1.0, 1));
  EXPECT_EQ(s.message(), "report.blocks[0].received.seconds -1 not in (0, 3600]");
  s = coordinator_->Report("agent-1", Report(0, 0, 1e-3, int64_t{1} << 40, 1e-9, 1));
  EXPECT_THAT(s.message(), ::testing::HasSubstr("bytes/s, not in [1000, 1e+13]"));
  // Nothing was learned from the refused samples: one short of learning, the next good
  // one must not complete the window.
  for (int step = 0; step + 1 < static_cast<int>(LinkModel::kMinSamples); ++step) {
    ASSERT_TRUE(coordinator_->Report("agent-1", Report(0, step, 1e-3, 1000, 1.0, 1)).ok());
  }
  absl::StatusOr<v1::ClusterStatus> status = coordinator_->Status("vit");
  ASSERT_TRUE(status.ok());
  EXPECT_FALSE(status->jobs(0).groups(0).link_learned());
  // A report resent (the same step again) adds nothing either.
  const int64_t last = LinkModel::kMinSamples - 2;
  ASSERT_TRUE(coordinator_->Report("agent-1", Report(0, last, 1e-3, 1000, 1.0, 1)).ok());
  status = coordinator_->Status("vit");
  ASSERT_TRUE(status.ok());
  EXPECT_FALSE(status->jobs(0).groups(0).link_learned());
  ASSERT_TRUE(coordinator_->Report("agent-1", Report(0, last + 1, 1e-3, 1000, 1.0, 1)).ok());
  status = coordinator_->Status("vit");
  ASSERT_TRUE(status.ok());
  EXPECT_TRUE(status->jobs(0).groups(0).link_learned());
}

}  // namespace
}  // namespace ballast::coordinator
