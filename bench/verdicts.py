"""Judging a benchmark's per-cycle figures against a target: their spread, a verdict on
single cycles, and one on the typical cycle from a distribution-free confidence interval
for the median (bench/e2e_interleaved.py's summary). Standard library only."""

import math
import statistics


def spread(values):
    values = sorted(values)
    return {"min": round(values[0], 4), "median": round(statistics.median(values), 4),
            "max": round(values[-1], 4), "n": len(values)}


def verdict(values, meets):
    """met: every cycle meets the target; missed: none does; else not resolved."""
    hits = sum(1 for v in values if meets(v))
    return "met" if hits == len(values) else "missed" if hits == 0 else "not resolved"


def median_interval(values, confidence=0.95):
    """A confidence interval for the median of the distribution the values were drawn
    from, with no assumption on its shape: [x_(k), x_(n+1-k)] of the sorted values holds
    the median unless at least n+1-k values fall on one side of it, each with chance 1/2,
    so it covers with probability 1 - 2 P(Binomial(n, 1/2) <= k - 1); the largest k whose
    coverage is at least `confidence`. Returns (low, high, coverage); with 5 values or
    fewer even [min, max] covers less than 95%, and that is what it returns."""
    values = sorted(values)
    n = len(values)
    k, coverage = 1, 1 - 2 * 0.5 ** n
    tail = 0.5 ** n  # P(B <= k - 1) for the next k
    for j in range(1, n // 2 + 1):
        tail += math.comb(n, j) * 0.5 ** n
        if 1 - 2 * tail < confidence:
            break
        k, coverage = j + 1, 1 - 2 * tail
    return values[k - 1], values[n - k], coverage


def meets_target(target, at_most):
    """The test a value must pass: <= target when at_most, else >= target."""
    return (lambda v: v <= target) if at_most else (lambda v: v >= target)


def median_verdict(low, high, target, at_most):
    """met: the median's interval lies wholly on the target's good side (<= target when
    at_most, else >=); missed: wholly on the other; else not resolved."""
    return verdict([low, high], meets_target(target, at_most))


def judged(values, target, at_most):
    """spread() with the target and both verdicts."""
    low, high, coverage = median_interval(values)
    return {**spread(values), "target": target,
            "verdict": verdict(values, meets_target(target, at_most)),
            "median_interval": [round(low, 4), round(high, 4)],
            "median_interval_coverage": round(coverage, 3),
            "median_verdict": median_verdict(low, high, target, at_most)}
