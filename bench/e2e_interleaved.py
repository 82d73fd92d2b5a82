#!/usr/bin/python3
"""Plain TP and Ballast measured in turn, inside one job: ratios with their spread.

`scripts/bench e2e` runs each configuration as its own job, minutes apart. This VM's
speed moves by up to 40% between such runs (docs/benchmarks.md), so a ratio of two runs
(plain / auto, auto / ideal) carries that much noise, and the issue's targets (auto at
most 1.05x the ideal, plain at least 1.4x auto) could not be told met or missed. Here
one job cycles through segments of SEGMENT steps:

  none    no straggler,        held at the even split  (the reference)
  plain   rank 1 slowed 2x,    held at the even split  (plain tensor parallelism)
  MODE    rank 1 slowed 2x,    mode MODE               (for each of --modes; auto by default)
  static  rank 1 slowed 2x,    held at a fixed plan    (for each plan of --static)

(2x by default: --slowdown) in this order in even cycles and in reverse in odd ones (a
linear drift of the machine's speed then biases consecutive cycles in opposite
directions).

none and plain are held (`ballastctl hold JOB GROUP 1 offload=0 reshard=0`, mode observe)
so that they run plain TP whatever a mode's segment before left in force: observe alone
ends offloads and prunes but keeps a reshard's ownership, and once auto reshards (a
straggler that lasted), the plain segments after it ran its split until 2026-12-02. A
held group's step is predicted as its plan's (all-local on the even split here), so the
prediction is sampled in every segment.

A static segment holds the group at one plan with `ballastctl hold` from its first step
and releases it at its end, or holds the next one (the planner is not consulted while
held): rank 1 keeps (1 - reshard) of its even share of units, the rest resharded evenly
to the others, and helpers compute `offload` of what it keeps. --static
offload:0.2,0.3,0.4 runs three such segments (repeatable, one kind per flag; kinds
offload and reshard; --static none for none). The best of a cycle's static plans (the
lowest median step) is its oracle: what a fixed plan picked with hindsight attains. Each
cycle reports MODE / oracle, plain / oracle and the share of plain's excess over the
oracle that MODE removed, (plain - MODE) / (plain - oracle), beside MODE / ideal; the
summary judges them against issue 39's targets (MODE at most 1.05x the oracle; at least
90% of the plain-to-oracle gain captured). A cycle's oracle is the least of several
noisy steps, biased low by the noise; the summary also judges MODE against the fixed
oracle, the one plan best over all cycles (the lowest median of its step over plain's),
in every cycle. A reshard moves units with their optimizer state, back and forth as the
cycle goes through the plans: the settle steps cover it.

How long the straggler has lasted when a mode's segment begins differs by cycle: in even
cycles it came with plain, a segment or a few before, in odd ones it has been on since
the cycle before's plain segment, through every static one (a hold's moves do not
restart the coordinator's count to chronic). The coordinator reshards a straggler only
once it is chronic (its policy's reshard_after, 60 s by default), so a mode's segment
shows its answer to a new straggler or to one that lasts. Each cycle reports how long
the straggler had been on when the segment's mode was set (MODE_straggler_seconds, rank
0's wall time), and the summary judges the cycles where that was at least
--reshard-after apart from the others (MODE_straggler_lasted, MODE_straggler_new). It
stands in for the coordinator's own count, which starts a round or two after the
straggler and restarts at the planner's reshards (with several --modes, one mode's
reshard delays the next mode's).

The straggler follows the launcher's step windows (launch.py --straggler 1:2@A-B,...),
the mode `ballastctl policy set` at each segment's first step. Each segment's first
SETTLE steps are left out: the plan that goes with the new mode or contention arrives a
few steps late. Each cycle is its own experiment, with its own ideal computed as
bench/e2e.py does (none's median step x world / the sum of the ranks' speeds, a rank's
speed being its seconds per unit in none over those in plain), so the ratios of a cycle
are measured a minute apart at most. Prints one JSON object per cycle, then one with
each ratio's min, median and max over the cycles and two verdicts against the target.
`verdict` is about single cycles: met when every cycle meets it, missed when none does,
else not resolved. `median_verdict` is about the typical cycle: the median's 95%
confidence interval (distribution-free, from the order statistics) met when it lies
wholly on the target's good side, missed when wholly on the other, else not resolved;
more cycles narrow it.

--contention (device, quota, cotenant, auto: launch.py --contention) picks how rank 1 is
slowed; every JSON line names the kind it ran under ("contention"). --trainer picks the
model (the C++ ViT by default; torch: the same ViT on ballast.torch; gpt: the PyTorch GPT,
2 micro-batches a step), --policy sets the job's policy for the whole run (e.g.
reshard_after_ms=10000: how long a straggler must last before it is resharded), and every
JSON line names both. As each mode's segment ends, the group's `ballastctl explain` (its
last plan and why) is kept in OUT/explain/cycle-C-MODE.txt.

  scripts/bench interleaved [--cycles 8] [--segment 60] [--modes auto,migrate]
      [--contention device] [--static offload:0.1,0.2,0.3 --static reshard:0.2,0.4]
      [--coordinator-flag=--step_feedback] [--reshard-after 60] [--trainer gpt]
      [--policy reshard_after_ms=10000]
"""

import argparse
import json
import math
import os
import subprocess
import sys
import time

try:
    import ballast_harness as harness
except ModuleNotFoundError:  # run straight from a checkout: the package is in python/
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import ballast_harness as harness

import e2e  # noqa: E402  (bench/e2e.py, beside this file)

STRAGGLER_RANK = 1
SLOWDOWN = 2
# Issue 14's targets for each balancing mode against plain TP and the ideal.
TARGET_VS_IDEAL = 1.05
TARGET_PLAIN_OVER_MODE = 1.4
# Issue 39's targets against the best static plan of the cycle (the oracle).
TARGET_VS_ORACLE = 1.05
TARGET_CAPTURED_SHARE = 0.90
STATIC_KINDS = ("offload", "reshard")
DEFAULT_STATIC = ("offload:0.2,0.3,0.4", "reshard:0.2,0.3,0.4")
# The coordinator's measured step is the slowest rank's median over its last 16 reports.
REPORTS_IN_MEASURED_STEP = 16
# none and plain run held at the even split, nothing offloaded: plain tensor parallelism
# whatever a mode's segment before left in force. (Observe ends offloads and prunes, but
# keeps a reshard's ownership: after a mode resharded, plain would run its split.)
EVEN = {"name": "even", "offload": 0.0, "reshard": 0.0}
# The coordinator's default reshard_after (coordinator/policy.h), in seconds.
RESHARD_AFTER_DEFAULT = 60.0


def parse_static(specs):
    """--static values -> the static plans in order: dicts with name ("offload 0.3"),
    offload and reshard fractions. Raises ValueError naming a bad value."""
    plans = []
    for spec in specs:
        if spec == "none":
            continue
        kind, _, fractions = spec.partition(":")
        if kind not in STATIC_KINDS or not fractions:
            raise ValueError(f"--static {spec!r} is not KIND:F[,F...] with KIND one of "
                             f"{', '.join(STATIC_KINDS)} (or none)")
        for text in fractions.split(","):
            try:
                f = float(text)
            except ValueError:
                raise ValueError(f"--static {spec!r}: {text!r} is not a number") from None
            if not 0 <= f < 1:
                raise ValueError(f"--static {spec!r}: {text} out of range [0, 1)")
            name = f"{kind} {f:g}"
            if any(p["name"] == name for p in plans):
                raise ValueError(f"--static: {name} given twice")
            plans.append({"name": name, "offload": f if kind == "offload" else 0.0,
                          "reshard": f if kind == "reshard" else 0.0})
    return plans


def schedule(cycles, segment, modes, statics=()):
    """The segments in order: dicts with cycle, name, mode, straggler (bool), hold (a static
    plan, EVEN for none and plain, or None), start and end step. Odd cycles run their
    segments in reverse (none, plain, auto, statics, then statics, auto, plain, none), so
    that a drift of the machine's speed across a pair of cycles biases the two alike in
    opposite directions, and the median over cycles cancels it."""
    kinds = ([("none", EVEN), ("plain", EVEN)] + [(m, None) for m in modes]
             + [(p["name"], p) for p in statics])
    out = []
    for c in range(cycles):
        for i, (name, hold) in enumerate(kinds if c % 2 == 0 else kinds[::-1]):
            start = (c * len(kinds) + i) * segment
            mode = "observe" if hold is not None else name
            out.append({"cycle": c, "name": name, "mode": mode, "straggler": name != "none",
                        "hold": hold, "start": start, "end": start + segment})
    return out


def straggler_windows(segments, slowdown=SLOWDOWN):
    """launch.py's --straggler text for the segments with the straggler on (merged runs)."""
    windows = []
    for s in segments:
        if not s["straggler"]:
            continue
        if windows and windows[-1][1] == s["start"]:
            windows[-1][1] = s["end"]
        else:
            windows.append([s["start"], s["end"]])
    return f"{STRAGGLER_RANK}:{slowdown:g}@" + ",".join(f"{a}-{b}" for a, b in windows)


class ModeSwitcher:
    """The launcher's per-step hook: as rank 0 reaches each segment's first step, holds the
    group at the segment's plan (a static one, or EVEN) or releases the one held before,
    and sets its policy mode; records the step at which the switch was made, and feeds the
    status sampler. A hold goes before the mode (the planner is out of the way while the
    mode changes), a release after it (the group returns to the new mode). The job starts
    on the even split, so the first segment needs no hold: the switcher holds only what
    differs from what it holds already, and releases only what it held."""

    def __init__(self, segments, job_name, sampler, straggler_rank=STRAGGLER_RANK,
                 explain_dir=None):
        self.pending = list(zip(segments, segments[1:]))  # (segment before, segment)
        self.job_name = job_name
        self.group = f"{job_name}/tp0"
        self.rank = straggler_rank
        self.sampler = sampler
        self.explain_dir = explain_dir
        self.held = None  # the plan this switcher holds the group at, if any
        self.switched_at = {}  # segment start -> step reached when the mode was set

    def _ctl(self, job, *args):
        r = job.ctl(*args)
        if r.returncode != 0:
            raise harness.LaunchError(f"ballastctl {' '.join(args)} failed: {r.stderr.strip()}")

    def _keep_explanation(self, job, segment):
        """`ballastctl explain` of the group as a mode's segment ends (its last plan and
        why), kept as cycle-C-NAME.txt in explain_dir: what a cycle's figures do not say,
        e.g. why auto offloaded where it resharded in the other cycles. Best effort: a
        failed call is written down, not raised (the figures do not depend on it). The
        run's last segment has no switch after it, and is not explained."""
        if self.explain_dir is None or segment["hold"] is not None:
            return
        try:
            r = job.ctl("explain", self.job_name, self.group)
            text = r.stdout if r.returncode == 0 else f"ballastctl explain failed: {r.stderr}"
        except (OSError, subprocess.SubprocessError, harness.LaunchError) as e:
            text = f"ballastctl explain failed: {e}\n"
        name = f"cycle-{segment['cycle']}-{segment['name']}.txt"
        with open(os.path.join(self.explain_dir, name), "w") as f:
            f.write(text)

    def __call__(self, job, step):
        while self.pending and step >= self.pending[0][1]["start"]:
            before, s = self.pending.pop(0)
            self._keep_explanation(job, before)
            hold = s["hold"]
            if hold is not None and hold is not self.held:
                self._ctl(job, "hold", self.job_name, self.group, str(self.rank),
                          f"offload={hold['offload']:g}", f"reshard={hold['reshard']:g}")
                self.held = hold
            if s["mode"] != before["mode"]:
                self._ctl(job, "policy", "set", self.job_name, f"mode={s['mode']}")
            if hold is None and self.held is not None:
                self._ctl(job, "release", self.job_name, self.group)
                self.held = None
            self.switched_at[s["start"]] = step
        self.sampler(job, step)


def segment_figures(ranks, segment, settle, switched_at):
    """Median step seconds (rank 0's wall time), each rank's median seconds per unit, and
    the mean offloaded and pruned fractions over a segment's steps after it settled (from
    first_step, `settle` steps after the step its mode was set at, began)."""
    began = max(segment["start"], switched_at)
    first = began + settle
    keep = lambda r: first <= r["step"] < segment["end"]
    steps0 = [r for r in ranks[0]["steps"] if keep(r)]
    if not steps0:
        return None
    return {
        "began": began,
        "first_step": first,
        "steps": len(steps0),
        "step_seconds": harness.median([r["wall_s"] for r in steps0]),
        "seconds_per_unit": [e2e.spu([r for r in rank["steps"] if keep(r)]) for rank in ranks],
        "offloaded_fraction": sum(r["offloaded_fraction"] for r in steps0) / len(steps0),
        "pruned_fraction": sum(r["pruned_fraction"] for r in steps0) / len(steps0),
        # The straggler's share of the units computed (offloaded and resharded units count
        # where they are computed): what a hold is checked by.
        "straggler_unit_share": unit_share(ranks, keep),
    }


def unit_share(ranks, keep, rank=STRAGGLER_RANK):
    """The mean over kept steps of `rank`'s units computed over all ranks' (None: none kept)."""
    by_step = {}
    for r, records in enumerate(ranks):
        for rec in records["steps"]:
            if keep(rec):
                by_step.setdefault(rec["step"], [0, 0])
                by_step[rec["step"]][0] += rec["units_computed"] if r == rank else 0
                by_step[rec["step"]][1] += rec["units_computed"]
    shares = [mine / total for mine, total in by_step.values() if total > 0]
    return sum(shares) / len(shares) if shares else None


def straggler_seconds(ranks, segments, segment, step):
    """Rank 0's wall seconds with the straggler on, without a break, before `step` of
    `segment` (0 when the segment has no straggler): from the first step of the run of
    straggler segments that `segment` ends."""
    if not segment["straggler"]:
        return 0.0
    onset = segment["start"]
    for s in sorted(segments, key=lambda s: s["start"], reverse=True):
        if s["start"] >= segment["start"]:
            continue
        if not s["straggler"] or s["end"] != onset:
            break
        onset = s["start"]
    return sum(r["wall_s"] for r in ranks[0]["steps"] if onset <= r["step"] < step)


def sample_truth(ranks, step):
    """What the ranks logged over the REPORTS_IN_MEASURED_STEP steps before a status
    sample, to tell where a prediction that is off goes wrong: each rank's median wall,
    compute and collective seconds, and the step the prediction's own formula gives from
    them (the slowest rank's compute + the least collective time)."""
    first = step - REPORTS_IN_MEASURED_STEP
    medians = {}
    for name in ("wall_s", "compute_s", "comm_s"):
        medians[name] = [round(harness.median([r[name] for r in rank["steps"]
                                              if first <= r["step"] < step] or [0]), 5)
                         for rank in ranks]
    formula = max(medians["compute_s"]) + min(medians["comm_s"])
    return {"rank_" + k: v for k, v in medians.items()} | {"formula_s": round(formula, 5)}


def cycle_ratios(figures, modes, statics=()):
    """One cycle's ideal and ratios from its segments' figures (None: a segment is missing).
    With static plans, the best of them is the cycle's oracle (oracle_ratios)."""
    none, plain = figures.get("none"), figures.get("plain")
    if none is None or plain is None:
        return None
    speeds = [a / b for a, b in zip(none["seconds_per_unit"], plain["seconds_per_unit"])]
    ideal = none["step_seconds"] * len(speeds) / sum(speeds)
    out = {"none_seconds": none["step_seconds"], "plain_seconds": plain["step_seconds"],
           "rank_relative_speed": [round(v, 3) for v in speeds], "ideal_seconds": ideal,
           "plain_vs_ideal": plain["step_seconds"] / ideal}
    for mode in modes:
        f = figures.get(mode)
        if f is None:
            continue
        out[f"{mode}_seconds"] = f["step_seconds"]
        out[f"{mode}_vs_ideal"] = f["step_seconds"] / ideal
        # Against the ideal from the speeds in the mode's own segment (e2e.py's "own
        # speeds"): measured at the same time as the step, but stricter, since a rank given
        # more units runs larger GEMMs at fewer seconds per unit and looks faster.
        own = [a / b for a, b in zip(none["seconds_per_unit"], f["seconds_per_unit"])]
        out[f"{mode}_vs_own_speeds_ideal"] = (
            f["step_seconds"] / (none["step_seconds"] * len(own) / sum(own)))
        out[f"plain_over_{mode}"] = plain["step_seconds"] / f["step_seconds"]
        out[f"{mode}_offloaded_fraction"] = round(f["offloaded_fraction"], 4)
        out[f"{mode}_pruned_fraction"] = round(f["pruned_fraction"], 4)
        if f.get("straggler_unit_share") is not None:
            out[f"{mode}_straggler_unit_share"] = round(f["straggler_unit_share"], 4)
        if f.get("straggler_seconds") is not None:
            out[f"{mode}_straggler_seconds"] = round(f["straggler_seconds"], 1)
    out.update(oracle_ratios(figures, modes, statics, ideal))
    return out


def oracle_ratios(figures, modes, statics, ideal):
    """The static segments' steps, the best of them (the oracle) and each mode against it:
    MODE / oracle, plain / oracle, and the share of plain's excess over the oracle that
    MODE removed, (plain - MODE) / (plain - oracle); None where no static plan beat plain
    (no gain to share)."""
    static = {p["name"]: figures[p["name"]] for p in statics if p["name"] in figures}
    if not static:
        return {}
    oracle = min(static, key=lambda name: static[name]["step_seconds"])
    best, plain = static[oracle]["step_seconds"], figures["plain"]["step_seconds"]
    out = {"static_seconds": {n: f["step_seconds"] for n, f in static.items()},
           "static_straggler_unit_share": {n: f["straggler_unit_share"] and
                                           round(f["straggler_unit_share"], 4)
                                           for n, f in static.items()},
           "oracle": oracle, "oracle_seconds": best, "oracle_vs_ideal": best / ideal,
           "plain_over_oracle": plain / best}
    for mode in modes:
        if mode in figures:
            step = figures[mode]["step_seconds"]
            out[f"{mode}_over_oracle"] = step / best
            out[f"{mode}_captured_share"] = ((plain - step) / (plain - best)
                                             if plain > best else None)
    return out


def spread(values):
    values = sorted(values)
    return {"min": round(values[0], 4), "median": round(harness.median(values), 4),
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


def summarize(cycles, modes, reshard_after=None):
    """The ratios over the cycles, judged against the targets; with `reshard_after`
    (seconds), each mode's oracle ratios also over the cycles where the straggler had
    lasted at least that long when its segment began (MODE_straggler_lasted) and over the
    others (MODE_straggler_new)."""
    out = {"cycles": len(cycles), "plain_vs_ideal": spread([c["plain_vs_ideal"] for c in cycles])}
    for mode in modes:
        vs_ideal = [c[f"{mode}_vs_ideal"] for c in cycles if f"{mode}_vs_ideal" in c]
        over = [c[f"plain_over_{mode}"] for c in cycles if f"plain_over_{mode}" in c]
        if not vs_ideal:
            continue
        out[f"{mode}_vs_ideal"] = judged(vs_ideal, TARGET_VS_IDEAL, at_most=True)
        own = [c[f"{mode}_vs_own_speeds_ideal"] for c in cycles
               if f"{mode}_vs_own_speeds_ideal" in c]
        if own:
            out[f"{mode}_vs_own_speeds_ideal"] = judged(own, TARGET_VS_IDEAL, at_most=True)
        out[f"plain_over_{mode}"] = judged(over, TARGET_PLAIN_OVER_MODE, at_most=False)
        against = against_oracle(cycles, mode)
        if against:
            out.update({f"{mode}_{k}": v for k, v in against.items()})
            out[f"{mode}_captured_share_undefined_cycles"] = (
                against["over_oracle"]["n"] - against.get("captured_share", {"n": 0})["n"])
    oracles = [c["oracle"] for c in cycles if "oracle" in c]
    if oracles:
        out["oracle_vs_ideal"] = spread([c["oracle_vs_ideal"] for c in cycles if "oracle" in c])
        out["plain_over_oracle"] = spread([c["plain_over_oracle"] for c in cycles
                                           if "oracle" in c])
        out["oracle_wins"] = {n: oracles.count(n) for n in sorted(set(oracles))}
        out.update(fixed_oracle(cycles, modes))
        if reshard_after is not None:
            out.update(by_straggler_age(cycles, modes, reshard_after, out.get("fixed_oracle")))
    # plain / MODE is at most plain_vs_ideal unless the mode beats the ideal (pruning can:
    # it computes less), so in a cycle with plain under 1.4x the ideal the plain target
    # asks for a step below the ideal. plain_vs_ideal above says how often that is.
    return out


def by_straggler_age(cycles, modes, reshard_after, fixed):
    """Each mode against the cycle's oracle and against the fixed oracle `fixed` (None:
    none), over the cycles whose straggler had lasted `reshard_after` seconds when the
    mode's segment began ("lasted") and over the others ("new")."""
    out = {}
    for mode in modes:
        key = f"{mode}_straggler_seconds"
        for name, pick in (("lasted", lambda v: v >= reshard_after),
                           ("new", lambda v: v < reshard_after)):
            group = [c for c in cycles if key in c and pick(c[key])
                     and f"{mode}_over_oracle" in c]
            if not group:
                continue
            out[f"{mode}_straggler_{name}"] = {
                "cycles": [c["cycle"] for c in group if "cycle" in c],
                "reshard_after_seconds": reshard_after,
                **against_oracle(group, mode),
                **(against_fixed(group, mode, fixed) if fixed is not None else {})}
    return out


def against_oracle(cycles, mode):
    """MODE against each cycle's own oracle over `cycles`: over_oracle and captured_share
    judged against issue 39's targets; {} when no cycle has an oracle."""
    vs_oracle = [c[f"{mode}_over_oracle"] for c in cycles if f"{mode}_over_oracle" in c]
    if not vs_oracle:
        return {}
    out = {"over_oracle": judged(vs_oracle, TARGET_VS_ORACLE, at_most=True)}
    share = [c[f"{mode}_captured_share"] for c in cycles
             if c.get(f"{mode}_captured_share") is not None]
    if share:
        out["captured_share"] = judged(share, TARGET_CAPTURED_SHARE, at_most=False)
    return out


def against_fixed(cycles, mode, fixed):
    """MODE against the static plan `fixed` in every one of `cycles` that ran both:
    over_fixed_oracle and captured_share_of_fixed_oracle judged; {} when none did."""
    pairs = [(c[f"{mode}_seconds"], c["static_seconds"][fixed], c["plain_seconds"])
             for c in cycles if fixed in c.get("static_seconds", {}) and f"{mode}_seconds" in c]
    if not pairs:
        return {}
    out = {"over_fixed_oracle": judged([m / o for m, o, _ in pairs], TARGET_VS_ORACLE,
                                       at_most=True)}
    share = [(p - m) / (p - o) for m, o, p in pairs if p > o]
    if share:
        out["captured_share_of_fixed_oracle"] = judged(share, TARGET_CAPTURED_SHARE,
                                                       at_most=False)
    return out


def fixed_oracle(cycles, modes):
    """The one static plan that is best over the cycles (the lowest median of its step over
    plain's in the same cycle), and each mode judged against that plan in every cycle.
    A cycle's own oracle is the least of several noisy segments, so it is biased low by
    the noise (the more plans, the more); a plan picked once for the whole run is not,
    in any one cycle, and that is the fixed plan an operator with hindsight would hold."""
    relative = {}
    for c in cycles:
        for name, step in c.get("static_seconds", {}).items():
            relative.setdefault(name, []).append(step / c["plain_seconds"])
    if not relative:
        return {}
    best = min(relative, key=lambda name: harness.median(relative[name]))
    out = {"fixed_oracle": best,
           "static_over_plain_median": {n: round(harness.median(v), 4)
                                        for n, v in relative.items()}}
    for mode in modes:
        out.update({f"{mode}_{k}": v for k, v in against_fixed(cycles, mode, best).items()})
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build-release")
    p.add_argument("--cycles", type=int, default=8)
    p.add_argument("--segment", type=int, default=60, help="steps per segment")
    p.add_argument("--settle", type=int, default=10,
                   help="steps left out at the start of each segment")
    p.add_argument("--modes", default="auto",
                   help="comma list of balancing modes run after plain in each cycle "
                        "(auto, migrate, resize)")
    p.add_argument("--static", action="append", default=None, metavar="KIND:F[,F...]",
                   help="static plans held in segments of their own: KIND offload or reshard, "
                        "F a fraction of rank 1's even share in [0, 1); repeatable; 'none' "
                        f"for none (default: {' '.join(DEFAULT_STATIC)})")
    p.add_argument("--contention", choices=harness.CONTENTION_KINDS, default="auto",
                   help="how rank 1 is slowed (launch.py --contention); device: an emulated "
                        "slower device, its block compute only")
    p.add_argument("--slowdown", type=float, default=SLOWDOWN,
                   help="how much slower rank 1 runs in the straggler's segments, in (1, 16]")
    p.add_argument("--quota-period-us", type=int, default=harness.JobConfig.quota_period_us)
    p.add_argument("--reshard-after", type=float, default=None, metavar="SECONDS",
                   help="the job policy's reshard_after (default: --policy reshard_after_ms's, "
                        "else the coordinator's default, 60; this flag does not set it): the "
                        "summary judges the cycles where the straggler had lasted this long "
                        "apart")
    p.add_argument("--coordinator-flag", action="append", default=[], metavar="--FLAG=VALUE",
                   help="extra ballast-coordinator flag for the whole job (repeatable), e.g. "
                        "--coordinator-flag=--step_feedback; every JSON line names them")
    p.add_argument("--trainer", choices=("cpp", "torch", "gpt"), default="cpp",
                   help="the ViT in C++ (vit_train) or in PyTorch, or the GPT in PyTorch "
                        "(launch.py --trainer)")
    p.add_argument("--policy", action="append", default=[], metavar="KEY=VALUE",
                   help="job policy setting for the whole job (repeatable; ballastctl policy "
                        "set's keys), e.g. --policy reshard_after_ms=10000; every JSON line "
                        "names them")
    p.add_argument("--out", default="")
    p.add_argument("trainer_args", nargs="*", help="extra trainer flags (after --)")
    a = p.parse_args()
    policy = {}
    for kv in a.policy:
        key, eq, value = kv.partition("=")
        if not eq or not key or key == "mode" or key in policy:
            p.error(f"--policy {kv!r} is not KEY=VALUE, or names mode (the bench sets it) "
                    "or a key given before")
        policy[key] = value
    if a.reshard_after is not None and "reshard_after_ms" in policy:
        p.error("give --reshard-after or --policy reshard_after_ms, not both (the policy's "
                "sets the summary's)")
    if a.reshard_after is None:
        try:
            a.reshard_after = float(policy.get("reshard_after_ms", RESHARD_AFTER_DEFAULT * 1000))
        except ValueError:
            p.error(f"--policy reshard_after_ms={policy['reshard_after_ms']!r} is not a number")
        a.reshard_after /= 1000
    modes = [m for m in a.modes.split(",") if m]
    bad = [m for m in modes if m not in ("auto", "migrate", "resize")]
    if bad or not modes:
        p.error(f"--modes {a.modes!r}: each must be auto, migrate or resize")
    if a.cycles < 1 or a.segment < 2 or not 0 <= a.settle < a.segment:
        p.error("need --cycles >= 1, --segment >= 2 and 0 <= --settle < --segment")
    if not 1 < a.slowdown <= 16:
        p.error(f"--slowdown {a.slowdown} out of range (1, 16]")
    if not a.reshard_after > 0:
        p.error(f"--reshard-after {a.reshard_after} must be positive")
    if not 1000 <= a.quota_period_us <= 1000000:
        p.error(f"--quota-period-us {a.quota_period_us} out of range [1000, 1000000]")
    for flag in a.coordinator_flag:
        if not flag.startswith("--"):
            p.error(f"--coordinator-flag {flag!r} must start with --")
    try:
        statics = parse_static(a.static if a.static is not None else DEFAULT_STATIC)
    except ValueError as e:
        p.error(str(e))
    segments = schedule(a.cycles, a.segment, modes, statics)
    out_dir = a.out or os.path.join(a.build, "bench-e2e-interleaved")
    os.makedirs(out_dir, exist_ok=True)
    cfg = harness.JobConfig(build=a.build, steps=segments[-1]["end"], mode=segments[0]["mode"],
                            stragglers=[harness.Straggler.parse(
                                straggler_windows(segments, a.slowdown))],
                            out=os.path.join(out_dir, "job"), verbose=False, progress="none",
                            trainer_args=a.trainer_args, quota_period_us=a.quota_period_us,
                            contention=a.contention, coordinator_flags=a.coordinator_flag,
                            trainer=a.trainer, policy=policy)
    names = ", ".join(["none", "plain", *modes, *(p["name"] for p in statics)])
    print(f"[interleaved] {a.cycles} cycles of {names}; {a.segment} steps a segment "
          f"({cfg.steps} steps)", file=sys.stderr, flush=True)
    sampler = e2e.StatusSampler()
    sampler.SAMPLE_EVERY = 5
    explain_dir = os.path.join(out_dir, "explain")
    os.makedirs(explain_dir, exist_ok=True)
    for name in os.listdir(explain_dir):  # an earlier run's, which this one may not replace
        if name.startswith("cycle-") and name.endswith(".txt"):
            os.remove(os.path.join(explain_dir, name))
    switcher = ModeSwitcher(segments, harness.JOB_OF_TRAINER[a.trainer], sampler,
                            explain_dir=explain_dir)
    began = time.monotonic()
    ranks = harness.run_job(cfg, on_step=switcher)
    elapsed = time.monotonic() - began
    contention = (ranks[0].get("contention") or {}).get("kind")

    results = []
    for c in range(a.cycles):
        figures = {}
        for s in segments:
            if s["cycle"] != c:
                continue
            switched_at = switcher.switched_at.get(s["start"], s["start"])
            f = segment_figures(ranks, s, a.settle, switched_at)
            if f is not None:
                f["straggler_seconds"] = straggler_seconds(ranks, segments, s, f["began"])
                figures[s["name"]] = f
        ratios = cycle_ratios(figures, modes, statics)
        if ratios is not None:
            results.append({"cycle": c, "contention": contention, "slowdown": a.slowdown,
                            "trainer": a.trainer,
                            "coordinator_flags": a.coordinator_flag, "policy": policy,
                            **ratios})
            print(json.dumps(results[-1]), flush=True)
    if not results:
        raise harness.LaunchError("no cycle had both a none and a plain segment")
    summary = {"bench": "e2e_interleaved", "contention": contention, "slowdown": a.slowdown,
               "trainer": a.trainer,
               "coordinator_flags": a.coordinator_flag, "policy": policy,
               "static": [p["name"] for p in statics],
               **summarize(results, modes, a.reshard_after),
               "segment_steps": a.segment, "settle_steps": a.settle,
               "quota_period_us": a.quota_period_us, "wall_seconds": round(elapsed, 1)}
    # Predicted against measured step, by segment kind (in none and plain, the held even
    # split's all-local step). The measured step is a median over a rank's last 16
    # reports (about a step each here), so a sample counts only once those all come from
    # the settled part of its segment.
    kind_of = {}
    for s in segments:
        for step in range(s["start"] + a.settle + REPORTS_IN_MEASURED_STEP, s["end"]):
            kind_of[step] = s["name"]
    static_names = {p["name"] for p in statics}
    for name in ["none", "plain", *modes, "static"]:
        errors = sorted(abs(x["predicted"] / x["measured"] - 1) for x in sampler.samples
                        if kind_of.get(x["step"]) == name
                        or (name == "static" and kind_of.get(x["step"]) in static_names))
        if errors:
            summary[f"prediction_error_{name}"] = {
                "samples": len(errors), "median": round(harness.median(errors), 4),
                "max": round(errors[-1], 4),
                "within_10pct": round(sum(e <= 0.10 for e in errors) / len(errors), 3)}
    print(json.dumps(summary), flush=True)
    samples = [{**x, "segment": kind_of.get(x["step"]), **sample_truth(ranks, x["step"])}
               for x in sampler.samples]
    with open(os.path.join(out_dir, "e2e_interleaved.json"), "w") as f:
        json.dump({"cycles": results, "summary": summary, "samples": samples,
                   "switched_at": switcher.switched_at}, f, indent=1)
    print(f"[interleaved] wrote {out_dir}/e2e_interleaved.json", file=sys.stderr)


if __name__ == "__main__":
    try:
        main()
    except harness.LaunchError as e:
        print(f"e2e_interleaved: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
