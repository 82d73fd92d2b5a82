#!/usr/bin/python3
"""bench/early_kind.py's replay: the K-step floor over the calm floor in quiet and onset
segments, cut where a plan changes the split, and the thresholds' counts."""

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import early_kind  # noqa: E402

SEGMENT = 20


def record(comm, offloaded=0.0, owned=(45, 45)):
    return {"comm_s": comm, "offloaded_fraction": offloaded, "pruned_fraction": 0.0,
            "owned_units": list(owned)}


def two_ranks(comm0, comm1, plan_from=None):
    """Rank r's collectives per step; from step `plan_from` on, a plan offloads."""
    ranks = [{}, {}]
    for step, (a, b) in enumerate(zip(comm0, comm1)):
        offloaded = 0.1 if plan_from is not None and step >= plan_from else 0.0
        ranks[0][step] = record(a, offloaded)
        ranks[1][step] = record(b, offloaded)
    return ranks


class EarlyKindTest(unittest.TestCase):
    def test_quiet_windows_start_after_their_calm_floor_and_onsets_use_the_one_before(self):
        # Segment 0 calm (collectives 0.010 and 0.012: floor 0.010), one noisy step at 17;
        # segment 1 an onset: the straggler's collectives 0.030 (3x), its peer waits 0.090.
        comm0 = [0.010] * SEGMENT + [0.090] * SEGMENT
        comm1 = [0.012] * SEGMENT + [0.030] * SEGMENT
        comm0[17] = comm1[17] = 0.05
        ranks = two_ranks(comm0, comm1, plan_from=SEGMENT + 5)
        quiet, onsets = early_kind.window_ratios(ranks, {0: "calm", 1: "onset"}, SEGMENT, 3)
        # Quiet windows end at steps 18-19 (from the 16th step): one noisy step in 3 is not
        # the median.
        self.assertEqual(len(quiet), SEGMENT - 16 - 2)
        self.assertTrue(all(abs(r - 1.0) < 1e-9 for r in quiet))
        # The onset's windows end at steps 2-4: the plan from step 5 changes the split.
        self.assertEqual(len(onsets), 1)
        self.assertEqual(len(onsets[0]), 3)
        self.assertTrue(all(abs(r - 3.0) < 1e-9 for r in onsets[0]))
        summary = early_kind.summarize(quiet, onsets, 3, [2.0, 4.0])
        self.assertEqual(summary["by_threshold"]["2.0"]["onset_first_step"], [2])
        self.assertEqual(summary["by_threshold"]["4.0"]["onset_first_step"], [None])
        self.assertEqual(summary["by_threshold"]["2.0"]["quiet_windows_at_or_above"], 0)

    def test_a_noisy_quiet_window_counts_against_the_threshold(self):
        comm = [0.010] * SEGMENT
        for step in (17, 18):  # two of three steps: the median
            comm[step] = 0.025
        ranks = two_ranks(comm, comm)
        quiet, _ = early_kind.window_ratios(ranks, {0: "none"}, SEGMENT, 3)
        summary = early_kind.summarize(quiet, [], 3, [2.0, 3.0])
        self.assertEqual(summary["by_threshold"]["2.0"]["quiet_windows_at_or_above"], 2)
        self.assertEqual(summary["by_threshold"]["3.0"]["quiet_windows_at_or_above"], 0)
        self.assertEqual(summary["quiet_highest"][-1], 2.5)

    def test_other_segments_are_skipped(self):
        ranks = two_ranks([0.01] * SEGMENT, [0.05] * SEGMENT)
        self.assertEqual(early_kind.window_ratios(ranks, {0: "plain"}, SEGMENT, 3), ([], []))


if __name__ == "__main__":
    unittest.main()
