// PlanFlaps: a plan that restores the one before the plan in force, or moves work back
// the way the last change moved it, soon after, is a flap, and so is the end of balancing
// soon after it started; the group's changes are then held flap_hold, and a straggler
// waited out that long before balancing starts, doubling per flap up to 16x, halving
// after each hold that passes twice over without a change; a plan that stood is no flap;
// flap_hold 0 turns it off.
#include "coordinator/planner/plan_flaps.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

namespace ballast::coordinator {
namespace {

using ::testing::HasSubstr;

// A plan offloading `n` units of block 0 from rank 1 (0: all-local).
std::vector<BlockPlan> Offload(int32_t n) {
  if (n == 0) return {};
  return {BlockPlan{.block = BlockId(0), .offloads = {{RankId(1), RankId(0), n}}}};
}

absl::Duration S(double seconds) { return absl::Seconds(seconds); }

TEST(PlanFlapsTest, AChangeUndoneSoonIsAFlapAndHoldsTheGroupsChanges) {
  const DwellOptions base;  // 2 s dwell, hysteresis 0.3, flap hold 30 s
  PlanFlaps flaps;
  EXPECT_EQ(flaps.Dwell(base, S(0)).plan_dwell, S(2));
  EXPECT_FALSE(flaps.Pushed(Offload(3), false, false, base, S(0), false));
  EXPECT_FALSE(flaps.Pushed(Offload(2), false, false, base, S(20), false));
  // Back to 3 units 2 s later: the change was noise.
  EXPECT_TRUE(flaps.Pushed(Offload(3), false, false, base, S(22), false));
  EXPECT_EQ(flaps.level(), 1);
  DwellOptions dwell = flaps.Dwell(base, S(23));
  EXPECT_EQ(dwell.plan_dwell, S(30));
  EXPECT_EQ(dwell.dwell_hysteresis, 0.3);
  EXPECT_THAT(flaps.Describe(base),
              HasSubstr("1 flap counted, so a change of a plan that balances is held 30s"));
  // Undoing the undo is a flap too.
  EXPECT_TRUE(flaps.Pushed(Offload(2), false, false, base, S(24), false));
  EXPECT_EQ(flaps.Dwell(base, S(25)).plan_dwell, S(60));
  // A change that stood longer than the hold plus flap_hold is no flap; an undo counts
  // within the hold plus flap_hold (the undo of a held change comes as its hold ends).
  EXPECT_FALSE(flaps.Pushed(Offload(3), false, false, base, S(24 + 91), false));
  EXPECT_FALSE(flaps.Pushed(Offload(4), false, false, base, S(116), false));
  EXPECT_TRUE(flaps.Pushed(Offload(3), false, false, base, S(116 + 60 + 29), false));
  EXPECT_EQ(flaps.Dwell(base, S(206)).plan_dwell, S(120));
  // Up to 16x.
  absl::Duration t = S(206);
  for (int i = 0; i < 6; ++i) {
    flaps.Pushed(Offload(2), false, false, base, t += S(1), false);
    flaps.Pushed(Offload(3), false, false, base, t += S(1), false);
  }
  EXPECT_EQ(flaps.level(), PlanFlaps::kMaxDoublings + 1);
  EXPECT_EQ(flaps.Dwell(base, t).plan_dwell, S(480));
  // Quiet for twice the hold halves it, and so on down to none.
  EXPECT_EQ(flaps.Dwell(base, t + S(959)).plan_dwell, S(480));
  EXPECT_EQ(flaps.Dwell(base, t + S(960)).plan_dwell, S(240));
  EXPECT_EQ(flaps.Dwell(base, t + S(960 + 480 + 240 + 120 + 60)).plan_dwell, S(2));
  EXPECT_EQ(flaps.level(), 0);
  EXPECT_EQ(flaps.Describe(base), "");
}

TEST(PlanFlapsTest, APlanThatStoodOrANewOneIsNoFlap) {
  const DwellOptions base;
  PlanFlaps flaps;
  flaps.Pushed(Offload(3), false, false, base, S(0), false);
  flaps.Pushed(Offload(2), false, false, base, S(10), false);
  // Restored after 40 s: the change stood.
  EXPECT_FALSE(flaps.Pushed(Offload(3), false, false, base, S(50), false));
  // A third plan, not the one before.
  EXPECT_FALSE(flaps.Pushed(Offload(5), false, false, base, S(51), false));
  // All-local and back soon is a flap like any other: a calm blip inside a straggler that
  // had lasted, counted at the restart.
  EXPECT_FALSE(flaps.Pushed(Offload(0), false, false, base, S(52), /*calm=*/true));
  EXPECT_TRUE(flaps.Pushed(Offload(5), false, false, base, S(53), false));
}

// A plan that moves some rank's work back the way the last change moved it undoes that
// change in part: a flap too. After a 2x quota straggler's reshard, auto offloaded 3 of
// its units, then had it compute one of its peer's 7 s later (relieved, it was throttled
// less and looked fast), then offloaded one again 3 s after that.
TEST(PlanFlapsTest, APartialUndoIsAFlap) {
  const DwellOptions base;
  const std::vector<BlockPlan> back = {
      BlockPlan{.block = BlockId(0), .offloads = {{RankId(0), RankId(1), 1}}}};
  PlanFlaps flaps;
  flaps.Pushed(Offload(0), false, false, base, S(0), false);
  EXPECT_FALSE(flaps.Pushed(Offload(3), false, false, base, S(10), false));
  EXPECT_TRUE(flaps.Pushed(back, false, false, base, S(17), false));
  EXPECT_TRUE(flaps.Pushed(Offload(1), false, false, base, S(20), false));
  EXPECT_EQ(flaps.level(), 2);

  // Further the same way is no undo; part of the way back is.
  PlanFlaps more;
  more.Pushed(Offload(1), false, false, base, S(0), false);
  EXPECT_FALSE(more.Pushed(Offload(3), false, false, base, S(5), false));
  EXPECT_FALSE(more.Pushed(Offload(5), false, false, base, S(10), false));
  EXPECT_TRUE(more.Pushed(Offload(4), false, false, base, S(15), false));
  // Another block's change, this one's plan kept, undoes nothing.
  std::vector<BlockPlan> two = Offload(4);
  two.push_back(BlockPlan{.block = BlockId(1), .offloads = {{RankId(1), RankId(0), 2}}});
  EXPECT_FALSE(more.Pushed(two, false, false, base, S(20), false));
}

// Only the relieved ranks' work counts: helpers share out a growing offload differently
// from plan to plan (rank 0 helps with 1, 2, then 1 unit while rank 1 offloads 3, 4, 5).
// On 2 ranks a straggler that moves to the other rank reads as an undo and counts.
TEST(PlanFlapsTest, HelpersReshufflingIsNoFlap) {
  const DwellOptions base;
  const auto spread = [](int32_t to0, int32_t to2, int32_t to3) {
    return std::vector<BlockPlan>{BlockPlan{.block = BlockId(0),
                                            .offloads = {{RankId(1), RankId(0), to0},
                                                         {RankId(1), RankId(2), to2},
                                                         {RankId(1), RankId(3), to3}}}};
  };
  PlanFlaps flaps;
  flaps.Pushed(spread(1, 1, 1), false, false, base, S(0), false);
  EXPECT_FALSE(flaps.Pushed(spread(2, 1, 1), false, false, base, S(5), false));
  EXPECT_FALSE(flaps.Pushed(spread(1, 2, 2), false, false, base, S(10), false));
  EXPECT_EQ(flaps.level(), 0);

  PlanFlaps moved;
  moved.Pushed(Offload(0), false, false, base, S(0), false);
  moved.Pushed(Offload(3), false, false, base, S(5), false);
  EXPECT_TRUE(
      moved.Pushed({BlockPlan{.block = BlockId(0), .offloads = {{RankId(0), RankId(1), 2}}}}, false,
                   false, base, S(10), false));
}

// While the plan in force is all-local, no change is held (a new straggler gains far more
// than the dwell's hysteresis); the flaps wait out the straggler instead (StartWait). A
// plan that moves units starts the history afresh (the plans before it ran on another
// ownership).
TEST(PlanFlapsTest, NoHoldWhileAllLocalAndAReshardStartsAfresh) {
  const DwellOptions base;
  PlanFlaps flaps;
  flaps.Seed(Offload(0));
  flaps.Pushed(Offload(3), false, false, base, S(0), false);
  // Calm 1 s after balancing started: a blip, counted at its end...
  EXPECT_TRUE(flaps.Pushed(Offload(0), false, false, base, S(1), /*calm=*/true));
  // ... and not again when balancing starts once more.
  EXPECT_FALSE(flaps.Pushed(Offload(3), false, false, base, S(2), false));
  EXPECT_EQ(flaps.Dwell(base, S(3)).plan_dwell, S(30));
  EXPECT_EQ(flaps.StartWait(base), absl::ZeroDuration()) << "balancing in force";
  EXPECT_TRUE(flaps.Pushed(Offload(0), false, false, base, S(40), /*calm=*/true));
  EXPECT_EQ(flaps.level(), 2);
  EXPECT_EQ(flaps.Dwell(base, S(41)).plan_dwell, S(2)) << "all-local in force: no hold";
  // The longer blip balanced 38 s; twice that is past the hold.
  EXPECT_EQ(flaps.StartWait(base), S(60)) << "all-local in force: a straggler waits the hold";
  // Nor under a plan that only caps experts' capacity.
  flaps.Pushed({BlockPlan{.block = BlockId(0), .capacity_factor = 1.25}}, false, false, base, S(42),
               false);
  EXPECT_EQ(flaps.Dwell(base, S(43)).plan_dwell, S(2)) << "a cap balances nothing";
  EXPECT_EQ(flaps.StartWait(base), S(60));
  // all-local -> a reshard -> all-local on the new split: no undo.
  PlanFlaps resharded;
  resharded.Pushed(Offload(0), false, false, base, S(0), false);
  resharded.Pushed(Offload(4), /*moves_units=*/true, false, base, S(1), false);
  EXPECT_FALSE(resharded.Pushed(Offload(0), false, false, base, S(2), false));
  EXPECT_EQ(resharded.level(), 0);
}

// A reshard's plan stays in force stating its move until the group's next change
// (group_planner.h, WithoutMadeMove): offloads on the new split undone soon after are a
// flap, as they were when a plan that only dropped the statement came between, and a plan
// in force that only states a move is the all-local plan there.
TEST(PlanFlapsTest, APlanStatingItsMoveIsTheSameAsOneThatDoesNot) {
  const DwellOptions base;
  const std::vector<RankId> moved = {RankId(0), RankId(0), RankId(0), RankId(1)};
  const std::vector<BlockPlan> reshard = {BlockPlan{.block = BlockId(0), .owner_of_unit = moved}};
  std::vector<BlockPlan> offloading = Offload(1);
  offloading[0].owner_of_unit = moved;  // restated: no worker had reported the move yet
  PlanFlaps flaps;
  flaps.Seed(Offload(0));
  flaps.Pushed(reshard, /*moves_units=*/true, false, base, S(0), false);
  EXPECT_FALSE(flaps.Pushed(offloading, false, false, base, S(1), false));
  EXPECT_TRUE(flaps.Pushed(Offload(0), false, false, base, S(2), false)) << "the offload undone";
  EXPECT_EQ(flaps.level(), 1);
  // Seeded with the reshard's plan in force: offloads, then all-local again, undo them.
  PlanFlaps seeded;
  seeded.Seed(reshard);
  EXPECT_FALSE(seeded.Pushed(Offload(3), false, false, base, S(0), false));
  EXPECT_TRUE(seeded.Pushed(Offload(0), false, false, base, S(1), false));
}

// Balancing that calm ends within flap_hold of its start (the VM's blips: 1-15 s spells of
// a calm rank 1.2-1.7x slower) is a flap, whatever plans came between; balancing that
// lasted, or that ended without calm, is none. While the group flaps, and for 10 minutes
// after the last blip, a straggler waits the blips out before balancing starts.
TEST(PlanFlapsTest, BalancingEndedSoonAfterItStartedIsAFlapAndDelaysTheNextStart) {
  const DwellOptions base;  // flap hold 30 s
  PlanFlaps flaps;
  EXPECT_EQ(flaps.StartWait(base), absl::ZeroDuration()) << "no flap yet";
  flaps.Seed(Offload(0));
  flaps.Seed(Offload(5));  // only the first counts
  EXPECT_FALSE(flaps.Pushed(Offload(2), false, false, base, S(10), false));
  EXPECT_FALSE(flaps.Pushed(Offload(3), false, false, base, S(12), false));
  EXPECT_TRUE(flaps.Pushed(Offload(0), false, false, base, S(15), /*calm=*/true));
  EXPECT_EQ(flaps.level(), 1);
  EXPECT_EQ(flaps.Dwell(base, S(16)).plan_dwell, S(2));
  EXPECT_EQ(flaps.StartWait(base), S(10)) << "twice the blip's 5 s, within the 30 s hold";
  EXPECT_THAT(flaps.Describe(base),
              HasSubstr("(balancing ended by calm soon after it started: blips of up to 5s) a "
                        "straggler must last 10s or turn chronic before balancing starts"));
  EXPECT_THAT(PlanFlaps().Describe(base), ::testing::IsEmpty());
  // Twice the hold without a change: no hold, but the blip is remembered for 10 minutes.
  EXPECT_EQ(flaps.Dwell(base, S(75)).plan_dwell, S(2));
  EXPECT_EQ(flaps.level(), 0);
  EXPECT_EQ(flaps.StartWait(base), S(10));
  EXPECT_EQ(flaps.Describe(base),
            "balancing ended by calm soon after it started: blips of up to 5s within the last "
            "10m: a straggler must last 10s or turn chronic before balancing starts");
  EXPECT_EQ(flaps.Dwell(base, S(614)).plan_dwell, S(2));
  EXPECT_EQ(flaps.StartWait(base), S(10));
  flaps.Dwell(base, S(615));
  EXPECT_EQ(flaps.StartWait(base), absl::ZeroDuration());
  EXPECT_THAT(flaps.Describe(base), ::testing::IsEmpty());
  // A straggler that lasted: balancing for 40 s is no blip.
  EXPECT_FALSE(flaps.Pushed(Offload(3), false, false, base, S(80), false));
  EXPECT_FALSE(flaps.Pushed(Offload(0), false, false, base, S(120), /*calm=*/true));
  EXPECT_EQ(flaps.level(), 0);
  // (Balancing again within flap_hold of that end would be a flap: a calm blip inside a
  // straggler, counted at the restart: APlanThatStoodOrANewOneIsNoFlap.) A reshard in
  // between: the balancing before it is history.
  EXPECT_FALSE(flaps.Pushed(Offload(3), false, false, base, S(160), false));
  EXPECT_FALSE(flaps.Pushed(Offload(4), /*moves_units=*/true, false, base, S(162), false));
  EXPECT_FALSE(flaps.Pushed(Offload(0), false, false, base, S(163), /*calm=*/true));
  // A probe's plan ended is no flap either: it was chosen to be measured.
  EXPECT_FALSE(flaps.Pushed(Offload(3), false, false, base, S(200), false));
  EXPECT_FALSE(flaps.Pushed(Offload(0), false, /*deliberate=*/true, base, S(201), true));
  EXPECT_EQ(flaps.level(), 0);

  // Nor is balancing that ends without calm (offloads stopped paying on a link measured
  // slow: the straggler is still there). Plans restored soon are flaps as ever, holding
  // changes of a plan that balances, but no straggler is waited out for them.
  PlanFlaps paying;
  EXPECT_FALSE(paying.Pushed(Offload(3), false, false, base, S(0), false));
  EXPECT_FALSE(paying.Pushed(Offload(0), false, false, base, S(1), /*calm=*/false));
  EXPECT_TRUE(paying.Pushed(Offload(3), false, false, base, S(2), false));
  EXPECT_TRUE(paying.Pushed(Offload(0), false, false, base, S(3), /*calm=*/false));
  EXPECT_EQ(paying.level(), 2);
  EXPECT_EQ(paying.StartWait(base), absl::ZeroDuration());
  EXPECT_THAT(paying.Describe(base), ::testing::Not(HasSubstr("straggler must last")));
  // A blip among them: waited out, until the flaps decay.
  EXPECT_TRUE(paying.Pushed(Offload(3), false, false, base, S(4), false));
  EXPECT_TRUE(paying.Pushed(Offload(0), false, false, base, S(5), /*calm=*/true));
  EXPECT_EQ(paying.level(), 4);
  EXPECT_EQ(paying.StartWait(base), S(2)) << "twice the 1 s blip, within the 240 s hold";
  EXPECT_EQ(paying.Dwell(base, S(5 + 480 + 240 + 120)).plan_dwell, S(2));
  EXPECT_EQ(paying.StartWait(base), S(2));
  EXPECT_EQ(paying.Dwell(base, S(5 + 480 + 240 + 120 + 60)).plan_dwell, S(2));
  EXPECT_EQ(paying.level(), 0);
  EXPECT_EQ(paying.StartWait(base), absl::ZeroDuration()) << "and 10 minutes since the blip";
}

// A straggler must outlast the blips seen: twice the longest blip counted, at most the
// hold, and the longest is forgotten with the blips (the flaps decayed to none and 10
// minutes passed since the last). A blip 5 minutes after the flaps decayed is waited out
// (at most flap_hold then), so a calm group's blips a minute or more apart cost one plan
// and its end, not one each.
TEST(PlanFlapsTest, AStragglerWaitsTwiceTheLongestBlipAtMostTheHold) {
  const DwellOptions base;  // flap hold 30 s
  PlanFlaps flaps;
  flaps.Seed(Offload(0));
  auto blip = [&](double at, double lasting) {
    flaps.Pushed(Offload(3), false, false, base, S(at), false);
    return flaps.Pushed(Offload(0), false, false, base, S(at + lasting), /*calm=*/true);
  };
  ASSERT_TRUE(blip(0, 0.25));
  EXPECT_EQ(flaps.StartWait(base), S(0.5));
  ASSERT_TRUE(blip(10, 3));
  EXPECT_EQ(flaps.StartWait(base), S(6));
  ASSERT_TRUE(blip(20, 1)) << "a shorter blip keeps the longest";
  EXPECT_EQ(flaps.level(), 3);
  EXPECT_EQ(flaps.StartWait(base), S(6));
  ASSERT_TRUE(blip(30, 25));
  EXPECT_EQ(flaps.StartWait(base), S(50)) << "within the hold, 240 s by now";
  // The flaps decay (each hold twice over without a change); once none is left, neither
  // is the wait nor the blips' length.
  EXPECT_EQ(flaps.Dwell(base, S(55 + 480 + 240 + 120 + 60)).plan_dwell, S(2));
  EXPECT_EQ(flaps.level(), 0);
  EXPECT_EQ(flaps.StartWait(base), absl::ZeroDuration());
  ASSERT_TRUE(blip(1000, 1));
  EXPECT_EQ(flaps.StartWait(base), S(2));
  ASSERT_TRUE(blip(1010, 20));
  flaps.Dwell(base, S(1030 + 60 + 120));
  ASSERT_EQ(flaps.level(), 0);
  EXPECT_EQ(flaps.StartWait(base), S(30)) << "twice the 20 s blip, at most flap_hold";
  flaps.Dwell(base, S(1030 + 599));
  EXPECT_EQ(flaps.StartWait(base), S(30));
  flaps.Dwell(base, S(1030 + 600));
  EXPECT_EQ(flaps.StartWait(base), absl::ZeroDuration());
}

// The offload check's probe (all-local, deliberate) measures a straggler that outlasted
// the wait: no straggler is waited out while it is in force, or the wait would end the
// probe and balancing would start afresh after it, again and again. The next change that
// is no probe brings the wait back.
TEST(PlanFlapsTest, NoStragglerIsWaitedOutWhileAProbeIsInForce) {
  const DwellOptions base;
  PlanFlaps flaps;
  flaps.Seed(Offload(0));
  flaps.Pushed(Offload(3), false, false, base, S(0), false);
  ASSERT_TRUE(flaps.Pushed(Offload(0), false, false, base, S(1), /*calm=*/true));
  ASSERT_EQ(flaps.StartWait(base), S(2));
  // A straggler that outlasted the wait, balanced, then probed without its offloads.
  flaps.Pushed(Offload(3), false, false, base, S(10), false);
  EXPECT_FALSE(flaps.Pushed(Offload(0), false, /*deliberate=*/true, base, S(12), false));
  EXPECT_EQ(flaps.StartWait(base), absl::ZeroDuration()) << "the probe in force";
  EXPECT_THAT(flaps.Describe(base), HasSubstr("a straggler must last 2s"))
      << "the wait that applies once no probe is in force";
  // Its offloads back, then a blip's end: the wait is back.
  flaps.Pushed(Offload(3), false, /*deliberate=*/true, base, S(14), false);
  flaps.Pushed(Offload(0), false, false, base, S(15), /*calm=*/true);
  EXPECT_EQ(flaps.StartWait(base), S(2));
}

// What ends the waits before the flaps decay: balancing that outlasts a blip (a straggler
// that lasted), and a reshard. Experts' replicas, which follow token loads, make no blip;
// nor does anything before the plan in force is known.
TEST(PlanFlapsTest, WaitsEndWithAStragglerThatLastedOrAReshardAndReplicasMakeNoBlip) {
  const DwellOptions base;
  auto blip = [&](PlanFlaps& flaps, double at) {
    flaps.Pushed(Offload(3), false, false, base, S(at), false);
    return flaps.Pushed(Offload(0), false, false, base, S(at + 1), /*calm=*/true);
  };
  PlanFlaps lasted;
  lasted.Seed(Offload(0));
  ASSERT_TRUE(blip(lasted, 0));
  ASSERT_EQ(lasted.StartWait(base), S(2));
  lasted.Pushed(Offload(3), false, false, base, S(40), false);
  lasted.Pushed(Offload(4), false, false, base, S(60), false);
  EXPECT_FALSE(lasted.Pushed(Offload(0), false, false, base, S(110), /*calm=*/true));
  EXPECT_EQ(lasted.level(), 1) << "not decayed: changes kept coming";
  EXPECT_EQ(lasted.StartWait(base), absl::ZeroDuration());

  PlanFlaps resharded;
  resharded.Seed(Offload(0));
  ASSERT_TRUE(blip(resharded, 0));
  resharded.Pushed(Offload(0), /*moves_units=*/true, false, base, S(5), false);
  EXPECT_EQ(resharded.StartWait(base), absl::ZeroDuration());

  PlanFlaps experts;
  experts.Seed(Offload(0));
  experts.Pushed({BlockPlan{.block = BlockId(0),
                            .replicas = {{.unit = 0, .helper = RankId(1), .share = 0.5}}}},
                 false, false, base, S(0), false);
  // (A restore soon, so a flap as ever, but no blip.)
  EXPECT_TRUE(experts.Pushed(Offload(0), false, false, base, S(1), /*calm=*/true));
  EXPECT_EQ(experts.StartWait(base), absl::ZeroDuration());

  PlanFlaps unknown;  // never seeded: the first plan may have replaced one that balanced
  EXPECT_FALSE(blip(unknown, 0));
  EXPECT_EQ(unknown.StartWait(base), absl::ZeroDuration());
}

// The step feedback's probe and its way back are chosen to be measured: no flap, but the
// history follows them (a later undo of the probe's way back is one).
TEST(PlanFlapsTest, ADeliberateChangeIsNeverAFlap) {
  const DwellOptions base;
  PlanFlaps flaps;
  flaps.Pushed(Offload(3), false, false, base, S(0), false);
  EXPECT_FALSE(flaps.Pushed(Offload(4), false, /*deliberate=*/true, base, S(5), false));
  EXPECT_FALSE(flaps.Pushed(Offload(3), false, /*deliberate=*/true, base, S(10), false));
  EXPECT_EQ(flaps.level(), 0);
  EXPECT_EQ(flaps.Dwell(base, S(11)).plan_dwell, S(2));
  EXPECT_TRUE(flaps.Pushed(Offload(4), false, false, base, S(12), false));
}

TEST(PlanFlapsTest, FlapHoldZeroTurnsItOff) {
  DwellOptions base;
  base.flap_hold = absl::ZeroDuration();
  PlanFlaps flaps;
  flaps.Pushed(Offload(3), false, false, base, S(0), false);
  flaps.Pushed(Offload(2), false, false, base, S(1), false);
  EXPECT_FALSE(flaps.Pushed(Offload(3), false, false, base, S(2), false));
  EXPECT_EQ(flaps.Dwell(base, S(3)).plan_dwell, S(2));
  EXPECT_FALSE(flaps.Pushed(Offload(0), false, false, base, S(4), /*calm=*/true));
  EXPECT_EQ(flaps.StartWait(base), absl::ZeroDuration());
}

}  // namespace
}  // namespace ballast::coordinator
