#!/usr/bin/python3
"""Could a straggler's kind be judged from its first few steps? Reads an interleaved run
with --onset (bench/e2e_interleaved.py --out DIR: DIR/e2e_interleaved.json and the ranks'
DIR/job/rank-R.jsonl) and replays, offline, the rule the coordinator would need.

Why. The onset target (within 10% of the best static step in 5 steps) needs the first
plan to know the kind: a rank throttled whole is resharded, a slower device offloaded
(coordinator/straggler_kind.h). The coordinator judges the kind from the collectives'
floor (the least of the ranks' medians: the last rank to arrive waits for nobody) over
16 steps, against the calm floor; 16 steps is what puts the reshard at step 31-40. A
verdict from K steps is only as good as the separation between the K-step floor of a
group with no straggler (its noise) and that of a fresh quota straggler.

What it prints (one JSON object): for each K, the K-step floor over the calm floor in
every window of the no-straggler segments (none, calm; from their 16th step, against the
floor over the segment's first 16 steps) and in the onset segments' windows (against the
floor over the 16 steps before the onset) until the first plan changes the split;
the highest no-straggler ratios, the onset ratios' quantiles, and for each threshold R
how many no-straggler windows reach R and at which step each onset first does.

  /usr/bin/python3 bench/early_kind.py RUN_DIR [--window 3,4,5] [--ratio 2,2.5,3]
"""

import argparse
import json
import os
import sys

try:
    import ballast_harness as harness
except ModuleNotFoundError:  # run straight from a checkout: the package is in python/
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import ballast_harness as harness

SEGMENT_FLOOR_STEPS = 16  # the coordinator's min_steps: what a calm floor is a median of


def median(values):
    """The registry's median (coordinator/group_registry.cc, RecentSeconds): the upper
    middle of an even count, as the coordinator's per-rank medians are taken."""
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def floor_over(ranks, steps):
    """The collectives' floor over `steps`: the least of the ranks' medians."""
    return min(median([rank[s]["comm_s"] for s in steps]) for rank in ranks)


def even_split(ranks, steps):
    """Whether every rank ran its calm units without offloads in `steps`."""
    return all(rank[s]["offloaded_fraction"] == 0 and rank[s]["pruned_fraction"] == 0 and
               len(set(rank[s]["owned_units"])) == 1 for rank in ranks for s in steps)


def window_ratios(ranks, segments, segment_steps, window):
    """Per segment kind ("quiet": none and calm; "onset"), the K-step floor over the calm
    floor: quiet as one list of ratios, onset as one list per segment (in step order)."""
    quiet, onsets = [], []
    for index, name in sorted(segments.items()):
        if name not in ("none", "calm", "onset"):
            continue
        start = index * segment_steps
        end = start + segment_steps
        if name == "onset":
            calm = range(start - SEGMENT_FLOOR_STEPS, start)
            first = start
        else:
            calm = range(start, start + SEGMENT_FLOOR_STEPS)
            first = start + SEGMENT_FLOOR_STEPS
        if any(s not in rank for rank in ranks for s in calm) or not even_split(ranks, calm):
            continue
        calm_floor = floor_over(ranks, calm)
        ratios = []
        for last in range(first + window - 1, end):
            steps = range(last - window + 1, last + 1)
            if any(s not in rank for rank in ranks for s in steps) or not even_split(ranks, steps):
                break  # a plan changed the split: the kind was decided by then or not at all
            ratios.append(floor_over(ranks, steps) / calm_floor)
        if name == "onset":
            onsets.append(ratios)
        else:
            quiet.extend(ratios)
    return quiet, onsets


def summarize(quiet, onsets, window, thresholds):
    every_onset = sorted(r for ratios in onsets for r in ratios)
    quantile = lambda q: round(every_onset[int(q * (len(every_onset) - 1))], 2) if every_onset else None
    return {
        "window_steps": window,
        "quiet_windows": len(quiet),
        "quiet_highest": [round(r, 2) for r in sorted(quiet)[-5:]],
        "onset_windows": len(every_onset),
        "onset_quantiles_10_50_90": [quantile(0.1), quantile(0.5), quantile(0.9)],
        "by_threshold": {
            str(t): {
                "quiet_windows_at_or_above": sum(r >= t for r in quiet),
                # The onset step (counted from the segment's first) of the first window at or
                # above t; None where none before the split changed.
                "onset_first_step": [next((window - 1 + i for i, r in enumerate(ratios) if r >= t),
                                          None) for ratios in onsets],
            } for t in thresholds
        },
    }


def load(run_dir):
    with open(os.path.join(run_dir, "e2e_interleaved.json")) as f:
        run = json.load(f)
    segment_steps = None
    for cycle in run["cycles"]:
        segment_steps = cycle.get("onset_segment_steps") or segment_steps
    if segment_steps is None:
        sys.exit(f"{run_dir}: no onset segments (run bench/e2e_interleaved.py with --onset)")
    segments = {s["step"] // segment_steps: s["segment"] for s in run["samples"]}
    ranks = [{record["step"]: record for record in rank["steps"]}
             for rank in harness.load_ranks(os.path.join(run_dir, "job"), 2)]
    return ranks, segments, segment_steps


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir")
    p.add_argument("--window", default="3,4,5", help="comma list of K (steps)")
    p.add_argument("--ratio", default="2,2.5,3", help="comma list of thresholds R")
    a = p.parse_args()
    ranks, segments, segment_steps = load(a.run_dir)
    thresholds = [float(t) for t in a.ratio.split(",")]
    for window in (int(k) for k in a.window.split(",")):
        quiet, onsets = window_ratios(ranks, segments, segment_steps, window)
        print(json.dumps(summarize(quiet, onsets, window, thresholds)))


if __name__ == "__main__":
    main()
