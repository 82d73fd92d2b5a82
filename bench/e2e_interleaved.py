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
directions). With --onset, two more follow none in every cycle (the three keep this
order in odd cycles too, so that each onset starts from the even split):

  calm    no straggler,        mode auto               (does all-local stay?)
  onset   rank 1 slowed 2x from its first step, auto   (how fast does auto react?)

Issue 39 asks that with contention starting mid-run the step be within 10% of the best
static plan's in at most 5 steps: onset_steps_to_oracle counts the steps from the
straggler's first until the running median of 3 steps first lies within 10% of the
cycle's oracle (bench/e2e.py's steps_to_within, the rule its midrun uses against the
ideal). The summary judges it against the cycle's oracle and against the fixed oracle,
counting a cycle that never got there as its whole segment; it also gives calm's plan
changes per 1,000 steps after settling. The onset segment is also judged as a mode
(its settled step against the oracle: onset_over_oracle).

none and plain are held (`ballastctl hold JOB GROUP 1 offload=0 reshard=0`, mode observe)
so that they run plain TP whatever a mode's segment before left in force: observe alone
ends offloads and prunes but keeps a reshard's ownership, and once auto reshards (a
straggler that lasted), the plain segments after it ran its split until 2026-12-02. A
held group's step is predicted as its plan's (all-local on the even split here), so the
prediction is sampled in every segment. The coordinator's measured step is a median over
the last 16 reports, so for 16 steps after a plan change it still measures the plan
before; each prediction figure is also given over the samples whose window ran one plan
(prediction_error_MODE's within_10pct_one_plan).

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
each ratio's min, median and max over the cycles and two verdicts against the target
(bench/interleaved_judge.py; the verdicts are bench/verdicts.py's).
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
      [--policy reshard_after_ms=10000] [--onset]
"""

import argparse
import json
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
import interleaved_judge as judge  # noqa: E402  (bench/interleaved_judge.py)

STRAGGLER_RANK = 1
SLOWDOWN = 2
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
# --onset's calm and onset segments run this mode, whatever --modes says.
ONSET_MODE = "auto"


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


def schedule(cycles, segment, modes, statics=(), onset=False):
    """The segments in order: dicts with cycle, name, mode, straggler (bool), hold (a static
    plan, EVEN for none and plain, or None), start and end step. Odd cycles run their
    segments in reverse (none, plain, auto, statics, then statics, auto, plain, none), so
    that a drift of the machine's speed across a pair of cycles biases the two alike in
    opposite directions, and the median over cycles cancels it. With `onset`, calm then
    onset follow none in every cycle (none, calm, onset keep their order in odd cycles):
    the straggler starts at onset's first step, after none held the even split and calm
    ran the same mode without it."""
    first = [("none", EVEN)] + ([("calm", None), ("onset", None)] if onset else [])
    units = ([first, [("plain", EVEN)]] + [[(m, None)] for m in modes]
             + [[(p["name"], p)] for p in statics])
    out = []
    for c in range(cycles):
        kinds = [k for unit in (units if c % 2 == 0 else units[::-1]) for k in unit]
        for i, (name, hold) in enumerate(kinds):
            start = (c * len(kinds) + i) * segment
            mode = ("observe" if hold is not None else ONSET_MODE if name in ("calm", "onset")
                    else name)
            out.append({"cycle": c, "name": name, "mode": mode,
                        "straggler": name not in ("none", "calm"),
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


def one_plan(ranks, step):
    """Whether every rank ran one plan over the REPORTS_IN_MEASURED_STEP steps before a
    status sample, the sample's step and the one after it (the coordinator may have pushed
    the next plan already): the measured step (a median over the reports before) is then
    a step of the plan the prediction is for. Within 16 steps of a change it mixes
    the plan before, which the prediction is not about (under a new straggler the plan
    changes about 20 steps in, and such samples were 29 of the 32 misses of 30 onsets)."""
    first = step - REPORTS_IN_MEASURED_STEP
    versions = {r["plan_version"] for rank in ranks for r in rank["steps"]
                if first <= r["step"] <= step + 1}
    return len(versions) == 1


def rank_spread(ranks, segment, settle):
    """The slowest rank's median seconds per unit over the fastest's, over a segment's steps
    after its first `settle` (None: fewer than two ranks computed)."""
    keep = lambda r: segment["start"] + settle <= r["step"] < segment["end"]
    spus = [e2e.spu([r for r in rank["steps"] if keep(r)]) for rank in ranks]
    spus = [x for x in spus if x]
    return round(max(spus) / min(spus), 4) if len(spus) > 1 else None


def reaction_figures(ranks, segments, settle, oracle_seconds=None):
    """--onset's figures for one cycle's `segments`: rank 0's step seconds over the onset
    segment (onset_walls, its first step the straggler's first; onset_segment_steps its
    length as scheduled), the steps in it at which the plan changed (onset_plan_steps,
    counted from its first), the steps until the step came within 10% of the cycle's
    oracle (onset_steps_to_oracle; None: not in the segment); the plan changes over the
    calm segment after its first `settle` steps and the share of those steps that ran
    all-local; none_rank_spread and calm_rank_spread, their rank_spread. No straggler is
    injected in either, but this VM's ranks drift apart by themselves (1.15-1.45x for a
    segment or more, either rank, before any contention too). None holds the even split
    all-local, so its timers show that drift before calm plans on it, and the judge
    reports the calm figures of the cycles level there apart (calm's own spread may move
    with its plans, where a block's time has a fixed part). {} without those segments."""
    by_name = {s["name"]: s for s in segments}
    out = {}
    onset, calm = by_name.get("onset"), by_name.get("calm")
    if onset is not None:
        steps = [r for r in ranks[0]["steps"] if onset["start"] - 1 <= r["step"] < onset["end"]]
        walls = [r["wall_s"] for r in steps if r["step"] >= onset["start"]]
        out["onset_walls"] = [round(w, 4) for w in walls]
        out["onset_segment_steps"] = onset["end"] - onset["start"]
        out["onset_plan_steps"] = [b["step"] - onset["start"] for a, b in zip(steps, steps[1:])
                                   if a["plan_version"] != b["plan_version"]]
        if oracle_seconds is not None:
            out["onset_steps_to_oracle"] = judge.steps_to(walls, oracle_seconds)
    if calm is not None:
        kept = [r for r in ranks[0]["steps"] if calm["start"] + settle <= r["step"] < calm["end"]]
        out["calm_steps"] = len(kept)
        out["calm_plan_changes"] = sum(a["plan_version"] != b["plan_version"]
                                       for a, b in zip(kept, kept[1:]))
        out["calm_all_local_fraction"] = round(
            sum(e2e.all_local(r) for r in kept) / max(1, len(kept)), 4)
        none = by_name.get("none")
        out["none_rank_spread"] = rank_spread(ranks, none, settle) if none else None
        out["calm_rank_spread"] = rank_spread(ranks, calm, settle)
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
    p.add_argument("--onset", action="store_true",
                   help="two more segments a cycle, after none: calm (auto, no straggler) "
                        "then onset (auto, the straggler from its first step): how many "
                        f"steps the step takes to come within 10%% of the oracle (target "
                        f"{judge.TARGET_ONSET_STEPS}), and whether calm stays all-local")
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
    segments = schedule(a.cycles, a.segment, modes, statics, onset=a.onset)
    # The onset segment is judged like a mode (its settled step against the oracle), and
    # also by how fast it got there (reaction_figures).
    ratio_modes = modes + (["onset"] if a.onset else [])
    out_dir = a.out or os.path.join(a.build, "bench-e2e-interleaved")
    os.makedirs(out_dir, exist_ok=True)
    cfg = harness.JobConfig(build=a.build, steps=segments[-1]["end"], mode=segments[0]["mode"],
                            stragglers=[harness.Straggler.parse(
                                straggler_windows(segments, a.slowdown))],
                            out=os.path.join(out_dir, "job"), verbose=False, progress="none",
                            trainer_args=a.trainer_args, quota_period_us=a.quota_period_us,
                            contention=a.contention, coordinator_flags=a.coordinator_flag,
                            trainer=a.trainer, policy=policy)
    names = ", ".join(["none", *(["calm", "onset"] if a.onset else []), "plain", *modes,
                       *(p["name"] for p in statics)])
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
        ratios = judge.cycle_ratios(figures, ratio_modes, statics)
        if ratios is not None:
            ratios.update(reaction_figures(ranks, [s for s in segments if s["cycle"] == c],
                                           a.settle, ratios.get("oracle_seconds")))
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
               **judge.summarize(results, ratio_modes, a.reshard_after),
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
    # Each figure also over the samples whose measured step ran one plan (one_plan):
    # the others compare a plan's prediction with steps of the plan before.
    static_names = {p["name"] for p in statics}
    for x in sampler.samples:
        x["one_plan"] = one_plan(ranks, x["step"])
    for name in ["none", "plain", *ratio_modes, "calm", "static"]:
        kept = [x for x in sampler.samples
                if kind_of.get(x["step"]) == name
                or (name == "static" and kind_of.get(x["step"]) in static_names)]
        errors = sorted(abs(x["predicted"] / x["measured"] - 1) for x in kept)
        one = [abs(x["predicted"] / x["measured"] - 1) for x in kept if x["one_plan"]]
        if errors:
            summary[f"prediction_error_{name}"] = {
                "samples": len(errors), "median": round(harness.median(errors), 4),
                "max": round(errors[-1], 4),
                "within_10pct": round(sum(e <= 0.10 for e in errors) / len(errors), 3),
                "samples_one_plan": len(one),
                "within_10pct_one_plan":
                    round(sum(e <= 0.10 for e in one) / len(one), 3) if one else None}
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
