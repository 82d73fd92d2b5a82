#!/usr/bin/python3
"""The verdicts that benchmark summaries give (bench/verdicts.py): on single cycles, on
the median's distribution-free interval, and both beside the spread."""

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import verdicts  # noqa: E402


class VerdictsTest(unittest.TestCase):
    def test_verdicts_need_every_cycle_or_none(self):
        meets = lambda v: v <= 1.05
        self.assertEqual(verdicts.verdict([1.01, 1.04], meets), "met")
        self.assertEqual(verdicts.verdict([1.06, 1.2], meets), "missed")
        self.assertEqual(verdicts.verdict([1.01, 1.2], meets), "not resolved")

    def test_the_median_interval_is_the_binomial_order_statistics(self):
        # n = 8: [x_(1), x_(8)] covers 1 - 2/256 = 0.992; [x_(2), x_(7)] only 0.930.
        low, high, coverage = verdicts.median_interval([8, 1, 7, 2, 6, 3, 5, 4])
        self.assertEqual((low, high), (1, 8))
        self.assertAlmostEqual(coverage, 1 - 2 / 256)
        # n = 30: k = 10 covers 1 - 2 P(B <= 9) = 0.9572; k = 11 only 0.9013.
        low, high, coverage = verdicts.median_interval(list(range(30, 0, -1)))
        self.assertEqual((low, high), (10, 21))
        self.assertAlmostEqual(coverage, 0.95723, places=4)
        # With 5 values even [min, max] covers less than 95%: returned as it is.
        self.assertEqual(verdicts.median_interval([3, 1, 2, 5, 4])[:2], (1, 5))
        self.assertAlmostEqual(verdicts.median_interval([3, 1, 2, 5, 4])[2], 1 - 2 / 32)

    def test_the_median_verdict_needs_the_whole_interval_on_one_side(self):
        self.assertEqual(verdicts.median_verdict(0.98, 1.04, 1.05, at_most=True), "met")
        self.assertEqual(verdicts.median_verdict(1.06, 1.10, 1.05, at_most=True), "missed")
        self.assertEqual(verdicts.median_verdict(1.00, 1.10, 1.05, at_most=True),
                         "not resolved")
        self.assertEqual(verdicts.median_verdict(1.41, 1.60, 1.4, at_most=False), "met")
        self.assertEqual(verdicts.median_verdict(1.10, 1.30, 1.4, at_most=False), "missed")

    def test_judged_gives_the_spread_and_both_verdicts(self):
        judged = verdicts.judged([3, 1, 2, 6, 5, 4], 5, at_most=True)
        self.assertEqual((judged["min"], judged["median"], judged["max"], judged["n"]),
                         (1, 3.5, 6, 6))
        self.assertEqual(judged["verdict"], "not resolved")  # 6 is over 5
        self.assertEqual(judged["median_interval"], [1, 6])  # 6 values: [min, max], 96.9%
        self.assertEqual(judged["median_verdict"], "not resolved")
        self.assertEqual(verdicts.judged([1, 2, 3, 4, 5, 6], 7, at_most=True)["median_verdict"],
                         "met")


if __name__ == "__main__":
    unittest.main()
