#!/usr/bin/python3
"""The interleaved benchmark's schedule and arithmetic (bench/e2e_interleaved.py and its
judgement, bench/interleaved_judge.py), on made-up step records: which steps each
segment keeps, the ideal and ratios of a cycle, the static plans' segments, holds and
oracle, the reaction to a straggler's onset, and the summary. The job itself is a
benchmark (scripts/bench interleaved), not a test."""

import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import e2e_interleaved as il  # noqa: E402
import interleaved_judge as judge  # noqa: E402


def record(step, wall, spu, offloaded=0.0, plan=0):
    return {"step": step, "wall_s": wall, "seconds_per_unit": spu, "units_computed": 45,
            "offloaded_fraction": offloaded, "pruned_fraction": 0.0, "plan_version": plan,
            "owned_units": [45, 45]}


class FakeJob:
    """ballastctl calls recorded; `ok(args, n)` says whether the n-th call (from 1)
    succeeds (all do by default). Answers carry stdout "why" and stderr "no plan"."""

    def __init__(self, ok=lambda args, n: True):
        self.calls = []
        self.ok = ok

    def ctl(self, *args):
        self.calls.append(args)
        good = self.ok(args, len(self.calls))
        return type("Done", (), {"returncode": 0 if good else 1, "stdout": "why\n",
                                 "stderr": "no plan"})()


class ScheduleTest(unittest.TestCase):
    def test_segments_cycle_through_none_plain_and_the_modes_mirrored(self):
        segments = il.schedule(2, 10, ["auto", "migrate"])
        self.assertEqual([s["name"] for s in segments],
                         ["none", "plain", "auto", "migrate", "migrate", "auto", "plain", "none"])
        self.assertEqual([s["cycle"] for s in segments], [0] * 4 + [1] * 4)
        self.assertEqual([s["start"] for s in segments], list(range(0, 80, 10)))
        self.assertEqual([s["mode"] for s in segments[:4]], ["observe", "observe", "auto", "migrate"])
        self.assertEqual([s["straggler"] for s in segments[:4]], [False, True, True, True])

    def test_straggler_windows_merge_adjacent_segments_and_parse(self):
        # none plain auto | auto plain none | none plain auto
        text = il.straggler_windows(il.schedule(3, 20, ["auto"]))
        self.assertEqual(text, "1:2@20-100,140-180")
        straggler = il.harness.Straggler.parse(text)
        self.assertEqual([s for s in range(180) if straggler.active(s)],
                         [*range(20, 100), *range(140, 180)])
        self.assertEqual(il.straggler_windows(il.schedule(1, 20, ["auto"]), slowdown=3),
                         "1:3@20-60")

    def test_the_switcher_sets_a_mode_only_where_it_changes(self):
        # none plain auto | auto plain none | none
        segments = il.schedule(3, 10, ["auto"])[:7]
        sampled = []
        switcher = il.ModeSwitcher(segments, "vit", lambda job, step: sampled.append(step))
        job = FakeJob()
        for step in (0, 5, 11, 19, 24, 31, 45, 52, 61):
            switcher(job, step)
        # none -> plain holds the even split (the job started on it, unheld) and keeps
        # mode observe; plain -> auto switches and releases; auto -> auto (step 30) and
        # plain -> none (50) need nothing; auto -> plain (40) holds the even split again
        # and switches, and the next cycle's none (60) is reached at step 61.
        self.assertEqual(job.calls, [
            ("hold", "vit", "vit/tp0", "1", "offload=0", "reshard=0"),      # 10: plain
            ("policy", "set", "vit", "mode=auto"),                           # 20: auto, then
            ("release", "vit", "vit/tp0"),                                   #     release
            ("hold", "vit", "vit/tp0", "1", "offload=0", "reshard=0"),      # 40: plain
            ("policy", "set", "vit", "mode=observe"),
        ])
        self.assertEqual(switcher.switched_at, {10: 11, 20: 24, 30: 31, 40: 45, 50: 52, 60: 61})
        self.assertEqual(sampled, [0, 5, 11, 19, 24, 31, 45, 52, 61])

    def test_onset_follows_none_and_calm_in_both_orders(self):
        # none calm onset plain auto | auto plain none calm onset
        segments = il.schedule(2, 10, ["auto"], onset=True)
        self.assertEqual([s["name"] for s in segments],
                         ["none", "calm", "onset", "plain", "auto",
                          "auto", "plain", "none", "calm", "onset"])
        self.assertEqual([s["mode"] for s in segments[:5]],
                         ["observe", "auto", "auto", "observe", "auto"])
        self.assertEqual([s["hold"] is None for s in segments[:5]],
                         [False, True, True, False, True])
        # The straggler starts at each onset's first step, after calm's steps without it.
        self.assertEqual(il.straggler_windows(segments), "1:2@20-70,90-100")
        # --modes migrate: calm and onset still run auto.
        self.assertEqual([s["mode"] for s in il.schedule(1, 10, ["migrate"], onset=True)],
                         ["observe", "auto", "auto", "observe", "migrate"])

    def test_the_switcher_releases_into_calm_and_leaves_onset_alone(self):
        # none calm onset plain auto | auto plain none calm onset
        segments = il.schedule(2, 10, ["auto"], onset=True)
        switcher = il.ModeSwitcher(segments, "vit", lambda job, step: None)
        job = FakeJob()
        for step in range(0, 100, 5):
            switcher(job, step)
        self.assertEqual(job.calls, [
            ("policy", "set", "vit", "mode=auto"),                           # 10: calm
            ("hold", "vit", "vit/tp0", "1", "offload=0", "reshard=0"),      # 30: plain
            ("policy", "set", "vit", "mode=observe"),
            ("policy", "set", "vit", "mode=auto"),                           # 40: auto
            ("release", "vit", "vit/tp0"),
            ("hold", "vit", "vit/tp0", "1", "offload=0", "reshard=0"),      # 60: plain
            ("policy", "set", "vit", "mode=observe"),
            # 70: none, held as plain was
            ("policy", "set", "vit", "mode=auto"),                           # 80: calm
            ("release", "vit", "vit/tp0"),
        ])

    def test_the_recovery_is_a_running_median_from_the_onset(self):
        # One quick step before the contention took hold does not count; the first
        # step whose 3-step median is within 10% does (0.21 <= 1.1 x 0.2).
        walls = [0.2, 0.3, 0.3, 0.3, 0.21, 0.3, 0.2, 0.21, 0.25]
        self.assertEqual(judge.steps_to(walls, 0.2), 4)
        self.assertIsNone(judge.steps_to(walls, 0.1))
        self.assertIsNone(judge.steps_to([0.1, 0.1], 0.2))  # shorter than the median

    def test_reaction_figures_read_the_onset_and_calm_segments(self):
        # none calm onset plain auto, 10 steps each; the plan changes at steps 12
        # (calm, settling), 16 (calm) and 23 (onset).
        segments = il.schedule(1, 10, ["auto"], onset=True)
        walls = [0.2] * 20 + [0.3, 0.3, 0.3, 0.3, 0.23, 0.21, 0.2] + [0.2] * 23
        plans = [0] * 12 + [1] * 4 + [2] * 7 + [3] * 27
        steps = [dict(record(s, walls[s], 1e-3, plan=plans[s])) for s in range(50)]
        steps[17]["offloaded_fraction"] = 0.1  # one calm step not all-local
        out = il.reaction_figures([{"steps": steps}], segments, settle=5, oracle_seconds=0.2)
        self.assertEqual(out["onset_walls"], walls[20:30])
        self.assertEqual(out["onset_plan_steps"], [3])
        self.assertEqual(out["onset_steps_to_oracle"], 4)  # 0.23, 0.21, 0.2: 0.21
        self.assertEqual((out["calm_steps"], out["calm_plan_changes"]), (5, 1))  # 15-19
        self.assertEqual(out["calm_all_local_fraction"], 0.8)
        self.assertIsNone(out["calm_rank_spread"])  # one rank: no spread
        self.assertIsNone(out["none_rank_spread"])
        self.assertNotIn("onset_steps_to_oracle",
                         il.reaction_figures([{"steps": steps}], segments, settle=5))
        self.assertEqual(il.reaction_figures([{"steps": steps}], segments[3:], 5), {})

    def test_none_and_calm_spreads_are_each_their_slower_rank_over_the_faster(self):
        # none calm onset, 10 steps each: rank 1 1.2x slower in none's settled steps
        # (5-9), 1.3x in calm's (15-19), level elsewhere.
        segments = il.schedule(1, 10, ["auto"], onset=True)
        slow = {s: 1.2e-3 for s in range(5, 10)} | {s: 1.3e-3 for s in range(15, 20)}
        ranks = [{"steps": [record(s, 0.2, 1e-3) for s in range(30)]},
                 {"steps": [record(s, 0.2, slow.get(s, 1e-3)) for s in range(30)]}]
        out = il.reaction_figures(ranks, segments, settle=5)
        self.assertAlmostEqual(out["none_rank_spread"], 1.2)
        self.assertAlmostEqual(out["calm_rank_spread"], 1.3)
        for s in range(15, 20):
            ranks[1]["steps"][s]["seconds_per_unit"] = 0.8e-3  # rank 0 now the slower
        self.assertAlmostEqual(il.reaction_figures(ranks, segments, settle=5)["calm_rank_spread"],
                               1.25)

    def test_the_reaction_summary_judges_the_onset_against_both_oracles(self):
        def cycle(walls, oracle, fixed):
            return {"onset_walls": walls, "onset_segment_steps": 60, "oracle_seconds": oracle,
                    "static_seconds": {"reshard 0.4": fixed}, "calm_steps": 50,
                    "calm_plan_changes": 1, "calm_all_local_fraction": 1.0}
        quick = [0.3, 0.3, 0.2, 0.2, 0.2, 0.2]
        slow = [0.3] * 6
        cycles = [cycle(quick, 0.2, 0.2), cycle(quick, 0.2, 0.15), cycle(slow, 0.2, 0.2)]
        out = judge.reaction_summary(cycles, "reshard 0.4")
        steps = out["onset_steps_to_oracle"]
        self.assertEqual((steps["min"], steps["median"], steps["max"]), (1, 1, 60))
        self.assertEqual(steps["verdict"], "not resolved")
        # Counted as its 60 steps as scheduled, not the 6 logged.
        self.assertEqual(out["onset_steps_to_oracle_never"], 1)
        self.assertEqual(out["onset_steps_to_fixed_oracle_never"], 2)
        self.assertEqual(out["calm_plan_changes_per_1000_steps"], 20.0)
        self.assertEqual(out["calm_all_local_fraction"], 1.0)
        self.assertNotIn("calm_level_cycles", out)  # no spread recorded
        # Judged apart: the cycles whose ranks ran within 1.10x of each other in none;
        # calm's own spread, and a cycle whose none spread is unknown, count for nothing.
        cycles[0].update(none_rank_spread=1.25, calm_all_local_fraction=0.5)
        cycles[1].update(none_rank_spread=1.1, calm_rank_spread=1.4)
        cycles[2].update(none_rank_spread=1.02, calm_plan_changes=0)
        cycles.append(dict(cycles[0], none_rank_spread=None))
        out = judge.reaction_summary(cycles, "reshard 0.4")
        self.assertEqual(out["calm_plan_changes_per_1000_steps"], 15.0)
        self.assertEqual((out["calm_level_cycles"], out["calm_spread_measured_cycles"]), (2, 3))
        self.assertEqual(out["calm_level_plan_changes_per_1000_steps"], 10.0)
        self.assertEqual(out["calm_level_all_local_fraction"], 1.0)
        self.assertNotIn("onset_steps_to_fixed_oracle", judge.reaction_summary(cycles, None))
        self.assertEqual(judge.reaction_summary([{"plain_vs_ideal": 1.3}], None), {})

    def test_static_plans_parse_in_order_and_reject_bad_values(self):
        plans = il.parse_static(["offload:0.1,0.3", "reshard:0.25"])
        self.assertEqual([p["name"] for p in plans], ["offload 0.1", "offload 0.3", "reshard 0.25"])
        self.assertEqual((plans[1]["offload"], plans[1]["reshard"]), (0.3, 0.0))
        self.assertEqual((plans[2]["offload"], plans[2]["reshard"]), (0.0, 0.25))
        self.assertEqual(il.parse_static(["none"]), [])
        for bad in (["prune:0.1"], ["offload"], ["offload:x"], ["reshard:1"], ["offload:-0.1"],
                    ["offload:0.2", "offload:0.2"]):
            with self.assertRaises(ValueError, msg=bad):
                il.parse_static(bad)

    def test_static_segments_follow_the_modes_mirrored(self):
        plans = il.parse_static(["offload:0.2", "reshard:0.3"])
        segments = il.schedule(2, 10, ["auto"], plans)
        self.assertEqual([s["name"] for s in segments],
                         ["none", "plain", "auto", "offload 0.2", "reshard 0.3",
                          "reshard 0.3", "offload 0.2", "auto", "plain", "none"])
        self.assertEqual([s["mode"] for s in segments[:5]],
                         ["observe", "observe", "auto", "observe", "observe"])
        self.assertEqual([s["hold"] for s in segments[:5]], [il.EVEN, il.EVEN, None, *plans])
        self.assertEqual((il.EVEN["offload"], il.EVEN["reshard"]), (0.0, 0.0))
        self.assertEqual(il.straggler_windows(segments), "1:2@10-90")

    def test_the_switcher_holds_static_segments_and_releases_after_them(self):
        plans = il.parse_static(["offload:0.2", "reshard:0.3"])
        # none plain auto off0.2 re0.3 | re0.3 off0.2 auto plain none
        segments = il.schedule(2, 10, ["auto"], plans)
        switcher = il.ModeSwitcher(segments, "vit", lambda job, step: None)
        job = FakeJob()
        for step in range(0, 100, 5):
            switcher(job, step)
        self.assertEqual(job.calls, [
            ("hold", "vit", "vit/tp0", "1", "offload=0", "reshard=0"),      # 10: plain
            ("policy", "set", "vit", "mode=auto"),                           # 20: auto, then
            ("release", "vit", "vit/tp0"),                                   #     release
            ("hold", "vit", "vit/tp0", "1", "offload=0.2", "reshard=0"),    # 30: hold, then
            ("policy", "set", "vit", "mode=observe"),                        #     observe
            ("hold", "vit", "vit/tp0", "1", "offload=0", "reshard=0.3"),    # 40
            # 50: the same plan again, nothing to do
            ("hold", "vit", "vit/tp0", "1", "offload=0.2", "reshard=0"),    # 60
            ("policy", "set", "vit", "mode=auto"),                           # 70: auto, then
            ("release", "vit", "vit/tp0"),                                   #     release
            ("hold", "vit", "vit/tp0", "1", "offload=0", "reshard=0"),      # 80: plain, held
            ("policy", "set", "vit", "mode=observe"),                        #     even
        ])

    def test_the_switcher_keeps_the_explanation_as_a_modes_segment_ends(self):
        # none plain auto off0.2 | off0.2 auto plain none: auto ends at 30 and at 60
        segments = il.schedule(2, 10, ["auto"], il.parse_static(["offload:0.2"]))
        with tempfile.TemporaryDirectory() as d:
            switcher = il.ModeSwitcher(segments, "vit", lambda job, step: None,
                                       explain_dir=d)
            # The second explain fails.
            job = FakeJob(lambda args, n: args[0] != "explain" or n < 5)
            for step in range(0, 80, 5):
                switcher(job, step)
            explains = [i for i, c in enumerate(job.calls) if c[0] == "explain"]
            self.assertEqual([job.calls[i] for i in explains],
                             [("explain", "vit", "vit/tp0")] * 2)
            # Asked before the next segment's hold, while auto's plan is in force.
            self.assertEqual(job.calls[explains[0] + 1][0], "hold")
            self.assertEqual(sorted(os.listdir(d)), ["cycle-0-auto.txt", "cycle-1-auto.txt"])
            with open(os.path.join(d, "cycle-0-auto.txt")) as f:
                self.assertEqual(f.read(), "why\n")
            with open(os.path.join(d, "cycle-1-auto.txt")) as f:
                self.assertEqual(f.read(), "ballastctl explain failed: no plan")

    def test_a_failed_hold_stops_the_bench(self):
        class FailingJob:
            def ctl(self, *args):
                return type("Failed", (), {"returncode": 1, "stderr": "no group vit/tp0"})()

        segments = il.schedule(1, 10, ["auto"], il.parse_static(["offload:0.2"]))
        switcher = il.ModeSwitcher(segments[2:], "vit", lambda job, step: None)
        with self.assertRaisesRegex(il.harness.LaunchError, "hold vit vit/tp0 1.*no group"):
            switcher(FailingJob(), 30)


class ArithmeticTest(unittest.TestCase):
    def ranks(self):
        # Segments of 10 steps: none (0-9), plain (10-19), auto (20-29). Rank 1 is 2x
        # slower per unit under contention; steps 10 and 20 (the settle) are outliers.
        r0, r1 = [], []
        for s in range(30):
            if s < 10:
                r0.append(record(s, 0.10, 1e-3))
                r1.append(record(s, 0.10, 1e-3))
            elif s < 20:
                wall = 9.0 if s == 10 else 0.20
                r0.append(record(s, wall, 1e-3))
                r1.append(record(s, wall, 2e-3))
            else:
                wall = 9.0 if s == 20 else 0.14
                r0.append(record(s, wall, 1e-3, offloaded=0.2))
                r1.append(record(s, wall, 2e-3, offloaded=0.2))
        return [{"steps": r0}, {"steps": r1}]

    def test_a_cycle_holds_the_mode_to_its_own_ideal(self):
        ranks = self.ranks()
        segments = il.schedule(1, 10, ["auto"])
        figures = {s["name"]: il.segment_figures(ranks, s, 1, s["start"]) for s in segments}
        self.assertEqual(figures["plain"]["steps"], 9)  # step 10 left out
        self.assertAlmostEqual(figures["plain"]["step_seconds"], 0.20)
        self.assertAlmostEqual(figures["auto"]["offloaded_fraction"], 0.2)
        ratios = judge.cycle_ratios(figures, ["auto"])
        # Speeds 1 and 0.5: ideal = 0.10 x 2 / 1.5.
        self.assertAlmostEqual(ratios["ideal_seconds"], 0.2 / 1.5)
        self.assertAlmostEqual(ratios["auto_vs_ideal"], 0.14 / (0.2 / 1.5))
        self.assertAlmostEqual(ratios["plain_over_auto"], 0.20 / 0.14)
        self.assertAlmostEqual(ratios["plain_vs_ideal"], 1.5)
        # The auto segment's own speeds are plain's here: the same ideal.
        self.assertAlmostEqual(ratios["auto_vs_own_speeds_ideal"], ratios["auto_vs_ideal"])
        figures["auto"]["seconds_per_unit"] = [0.8e-3, 2e-3]  # rank 0 looks faster
        stricter = judge.cycle_ratios(figures, ["auto"])
        self.assertAlmostEqual(stricter["auto_vs_own_speeds_ideal"],
                               0.14 / (0.2 / (1.25 + 0.5)))
        self.assertAlmostEqual(stricter["auto_vs_ideal"], ratios["auto_vs_ideal"])

    def test_a_late_switch_moves_the_settled_window(self):
        ranks = self.ranks()
        auto = il.schedule(1, 10, ["auto"])[2]
        self.assertEqual(il.segment_figures(ranks, auto, 2, 25)["steps"], 3)  # 27, 28, 29
        self.assertIsNone(il.segment_figures(ranks, auto, 10, 20))

    def test_a_cycle_without_its_reference_has_no_ratios(self):
        self.assertIsNone(judge.cycle_ratios({"plain": {}}, ["auto"]))

    def test_the_best_static_plan_is_the_oracle_auto_is_judged_against(self):
        def figure(step, share=0.5, spu=(1e-3, 2e-3)):
            return {"step_seconds": step, "seconds_per_unit": list(spu),
                    "offloaded_fraction": 0.0, "pruned_fraction": 0.0,
                    "straggler_unit_share": share}

        plans = il.parse_static(["offload:0.2,0.4", "reshard:0.3"])
        figures = {"none": figure(0.10, spu=(1e-3, 1e-3)), "plain": figure(0.20),
                   "auto": figure(0.15),
                   "offload 0.2": figure(0.16, 0.42), "offload 0.4": figure(0.17, 0.34),
                   "reshard 0.3": figure(0.14, 0.35)}
        ratios = judge.cycle_ratios(figures, ["auto"], plans)
        self.assertEqual(ratios["oracle"], "reshard 0.3")
        self.assertAlmostEqual(ratios["oracle_seconds"], 0.14)
        self.assertAlmostEqual(ratios["auto_over_oracle"], 0.15 / 0.14)
        self.assertAlmostEqual(ratios["plain_over_oracle"], 0.20 / 0.14)
        # plain 0.20 -> oracle 0.14 is a gain of 0.06; auto took 0.05 of it.
        self.assertAlmostEqual(ratios["auto_captured_share"], 0.05 / 0.06)
        self.assertAlmostEqual(ratios["oracle_vs_ideal"], 0.14 / (0.2 / 1.5))
        self.assertEqual(ratios["static_seconds"]["offload 0.4"], 0.17)
        self.assertEqual(ratios["static_straggler_unit_share"]["reshard 0.3"], 0.35)
        # No static plan beats plain: no gain to share.
        for name in ("offload 0.2", "offload 0.4", "reshard 0.3"):
            figures[name]["step_seconds"] = 0.25
        self.assertIsNone(judge.cycle_ratios(figures, ["auto"], plans)["auto_captured_share"])
        # Without static plans, no oracle.
        self.assertNotIn("oracle", judge.cycle_ratios(figures, ["auto"]))

    def test_the_straggler_unit_share_counts_units_where_they_are_computed(self):
        ranks = [{"steps": [{"step": s, "units_computed": 60} for s in range(4)]},
                 {"steps": [{"step": s, "units_computed": 30} for s in range(4)]}]
        self.assertAlmostEqual(il.unit_share(ranks, lambda r: r["step"] >= 2), 1 / 3)
        self.assertIsNone(il.unit_share(ranks, lambda r: False))

    def test_a_sample_counts_as_one_plan_only_if_its_window_ran_one(self):
        # Rank 1 changes plan at step 30, rank 0 a step later: a sample's measured step is
        # the median of the 16 reports before it, and the step after it may already run
        # the plan the prediction is for.
        ranks = [{"steps": [record(s, 0.1, 1e-3, plan=1 if s < 31 else 2) for s in range(60)]},
                 {"steps": [record(s, 0.1, 1e-3, plan=1 if s < 30 else 2) for s in range(60)]}]
        self.assertTrue(il.one_plan(ranks, 28))
        self.assertFalse(il.one_plan(ranks, 29))  # its next step runs plan 2
        self.assertFalse(il.one_plan(ranks, 46))  # reports 30-45 mix the two
        self.assertTrue(il.one_plan(ranks, 47))

    def test_the_oracle_summary_judges_issue_39s_targets(self):
        cycles = [{"plain_vs_ideal": 1.4, "auto_vs_ideal": 1.0, "plain_over_auto": 1.4,
                   "oracle": "reshard 0.3", "oracle_vs_ideal": 0.98, "plain_over_oracle": 1.43,
                   "auto_over_oracle": 1.02, "auto_captured_share": 0.95},
                  {"plain_vs_ideal": 1.4, "auto_vs_ideal": 1.1, "plain_over_auto": 1.27,
                   "oracle": "offload 0.3", "oracle_vs_ideal": 1.0, "plain_over_oracle": 1.4,
                   "auto_over_oracle": 1.10, "auto_captured_share": 0.75},
                  {"plain_vs_ideal": 1.4, "auto_vs_ideal": 1.0, "plain_over_auto": 1.4,
                   "oracle": "reshard 0.3", "oracle_vs_ideal": 1.0, "plain_over_oracle": 1.4,
                   "auto_over_oracle": 1.0, "auto_captured_share": None}]
        summary = judge.summarize(cycles, ["auto"])
        self.assertEqual(summary["auto_over_oracle"]["target"], 1.05)
        self.assertEqual(summary["auto_over_oracle"]["verdict"], "not resolved")
        self.assertEqual(summary["auto_over_oracle"]["median"], 1.02)
        self.assertEqual(summary["auto_captured_share"]["target"], 0.9)
        self.assertEqual(summary["auto_captured_share"]["n"], 2)
        self.assertEqual(summary["auto_captured_share"]["verdict"], "not resolved")
        self.assertEqual(summary["auto_captured_share_undefined_cycles"], 1)
        self.assertEqual(summary["oracle_wins"], {"offload 0.3": 1, "reshard 0.3": 2})
        self.assertEqual(summary["plain_over_oracle"]["max"], 1.43)

    def test_the_fixed_oracle_is_the_plan_best_over_all_cycles(self):
        # reshard 0.3 wins one cycle by luck; offload 0.3 is best relative to plain in two.
        cycles = [{"plain_seconds": 0.20, "auto_seconds": 0.15,
                   "static_seconds": {"offload 0.3": 0.14, "reshard 0.3": 0.16}},
                  {"plain_seconds": 0.40, "auto_seconds": 0.30,
                   "static_seconds": {"offload 0.3": 0.30, "reshard 0.3": 0.26}},
                  {"plain_seconds": 0.20, "auto_seconds": 0.16,
                   "static_seconds": {"offload 0.3": 0.15, "reshard 0.3": 0.18}}]
        out = judge.fixed_oracle(cycles, ["auto"])
        self.assertEqual(out["fixed_oracle"], "offload 0.3")
        self.assertEqual(out["static_over_plain_median"], {"offload 0.3": 0.75, "reshard 0.3": 0.8})
        self.assertEqual(out["auto_over_fixed_oracle"]["n"], 3)
        self.assertAlmostEqual(out["auto_over_fixed_oracle"]["median"], round(0.16 / 0.15, 4))
        self.assertAlmostEqual(out["auto_captured_share_of_fixed_oracle"]["max"], 1.0)
        self.assertEqual(judge.fixed_oracle([{"plain_seconds": 0.2}], ["auto"]), {})

    def test_the_summary_judges_each_ratio_over_the_cycles(self):
        cycles = [{"plain_vs_ideal": 1.3, "auto_vs_ideal": 1.02, "plain_over_auto": 1.27},
                  {"plain_vs_ideal": 1.5, "auto_vs_ideal": 1.04, "plain_over_auto": 1.44}]
        summary = judge.summarize(cycles, ["auto"])
        self.assertEqual(summary["auto_vs_ideal"]["verdict"], "met")
        self.assertEqual(summary["plain_over_auto"]["verdict"], "not resolved")
        self.assertEqual(summary["plain_over_auto"]["min"], 1.27)
        self.assertEqual(summary["plain_vs_ideal"]["median"], 1.4)

    def test_the_straggler_lasted_from_its_run_of_segments(self):
        # none plain auto | auto plain none, 10 steps each, 0.1 s a step; the straggler is
        # on from step 10 to 50.
        segments = il.schedule(2, 10, ["auto"])
        ranks = [{"steps": [record(s, 0.1, 1e-3) for s in range(60)]}]
        by_start = {s["start"]: s for s in segments}
        self.assertEqual(il.straggler_seconds(ranks, segments, by_start[0], 1), 0.0)
        # Cycle 0's auto, its mode set at step 21: steps 10-20 ran with the straggler.
        self.assertAlmostEqual(il.straggler_seconds(ranks, segments, by_start[20], 21), 1.1)
        # Cycle 1's auto follows cycle 0's: steps 10-30.
        self.assertAlmostEqual(il.straggler_seconds(ranks, segments, by_start[30], 31), 2.1)
        self.assertAlmostEqual(il.straggler_seconds(ranks, segments, by_start[10], 12), 0.2)
        f = il.segment_figures([ranks[0], ranks[0]], by_start[30], 2, 33)
        self.assertEqual((f["began"], f["first_step"]), (33, 35))  # switched late, settled

    def test_the_summary_judges_cycles_by_how_long_the_straggler_lasted(self):
        def cycle(n, auto, seconds):
            return {"cycle": n, "plain_vs_ideal": 1.4, "auto_vs_ideal": 1.0,
                    "plain_over_auto": 0.20 / auto, "plain_seconds": 0.20, "auto_seconds": auto,
                    "oracle": "reshard 0.3", "oracle_vs_ideal": 1.0, "plain_over_oracle": 1.6,
                    "oracle_seconds": 0.125, "auto_over_oracle": auto / 0.125,
                    "auto_captured_share": (0.20 - auto) / (0.20 - 0.125),
                    "static_seconds": {"reshard 0.3": 0.125},
                    "auto_straggler_seconds": seconds}
        cycles = [cycle(0, 0.16, 9.0), cycle(1, 0.13, 75.0), cycle(2, 0.15, 9.5),
                  cycle(3, 0.125, 80.0)]
        summary = judge.summarize(cycles, ["auto"], reshard_after=60)
        lasted, new = summary["auto_straggler_lasted"], summary["auto_straggler_new"]
        self.assertEqual(lasted["cycles"], [1, 3])
        self.assertEqual(new["cycles"], [0, 2])
        self.assertAlmostEqual(lasted["over_oracle"]["median"], round((1.04 + 1.0) / 2, 4))
        self.assertEqual(lasted["over_oracle"]["verdict"], "met")
        self.assertEqual(new["over_oracle"]["verdict"], "missed")
        self.assertAlmostEqual(new["captured_share"]["max"], round(0.05 / 0.075, 4))
        self.assertAlmostEqual(lasted["over_fixed_oracle"]["max"], 1.04)
        self.assertNotIn("auto_straggler_lasted", judge.summarize(cycles, ["auto"]))

    def test_the_summary_judges_the_typical_cycle_by_the_median_interval(self):
        # Most cycles under the target, a few over: single cycles not resolved, the
        # typical cycle met.
        values = [1.0 + 0.001 * i for i in range(27)] + [1.2, 1.3, 1.4]
        cycles = [{"plain_vs_ideal": 1.3, "auto_vs_ideal": v, "plain_over_auto": 1.3 / v}
                  for v in values]
        judged = judge.summarize(cycles, ["auto"])["auto_vs_ideal"]
        self.assertEqual(judged["verdict"], "not resolved")
        self.assertEqual(judged["median_verdict"], "met")
        self.assertEqual(judged["median_interval"], [1.009, 1.02])


if __name__ == "__main__":
    unittest.main()
