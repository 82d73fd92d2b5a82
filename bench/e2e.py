#!/usr/bin/python3
"""End-to-end benchmark: the ViT job under real contention, one configuration at a time.

  (a) none      no straggler                          (policy mode off: the reference)
  (b) plain     rank 1 slowed 2x, balancing off       (plain tensor parallelism)
  (c) resize    rank 1 slowed 2x, ZERO-resizing only
  (d) migrate   rank 1 slowed 2x, migration/resharding only (exact)
  (e) auto      rank 1 slowed 2x, the planner chooses
  (e') auto_fixed  auto with the coordinator's --fixed_costs=on: each rank's collective
                time beyond the least balanced with its units (coordinator/fixed_costs.h)
  (e'') auto_feedback  auto with the coordinator's --step_feedback: the straggler's
                speed probed by the step it gets, kept while the step improves
                (coordinator/step_feedback.h)
  (f) midrun    auto, rank 1 slowed 2x from 30% to 65% of the steps only (a shorter run:
                half the steps; it measures reaction, not accuracy)
  (g) calm      auto, no straggler: how often calm ranks change the plan (issue 14: at
                most 2 changes per 1,000 steps after warm-up) and how many steps run
                all-local; (g') calm_feedback: the same with --step_feedback

Prints one JSON object per configuration (stdout), writes them all to <out>/e2e.json and
a plot of step time over steps and accuracy per configuration to <out>/e2e.png. Each
object names the contention it ran under ("contention": quota, cotenant or device, "none"
without a straggler; --contention picks: see launch.py --contention).

The ideal step time under contention is the reference's total work divided by the sum
of the measured rank speeds: with T_ref the reference's median step time and v_r rank r's
speed relative to the reference (its median seconds per computed unit there, divided by
its median seconds per unit under contention), ideal = T_ref * world / sum_r v_r.

The speeds are measured in the plain run, where every rank computes the same units: they
are a property of the contention, not of a plan, so every configuration under the same
contention is held to the same ideal. (Measured in a balanced run instead, a rank's
seconds per unit also move with the plan: rank 0 computing 58 units instead of 45 runs
larger GEMMs at fewer seconds per unit, which would look like a faster rank and lower
the bar. That per-configuration figure is reported too, as ideal_step_seconds_own_speeds.)
The plain run therefore always runs when any contended configuration does, like none.
"""

import argparse
import json
import os
import sys
import time
import urllib.request

try:
    import ballast_harness as harness
except ModuleNotFoundError:  # run straight from a checkout: the package is in python/
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import ballast_harness as harness

# (name, policy mode, stragglers, extra policy settings, extra coordinator flags).
# Resize-only prices pruning at 0.05 s per unit fraction of the group: at the default
# 1.0 s, no pruning ever pays at these step times and resize mode would do nothing.
CONFIGS = [
    ("none", "off", [], {}, []),
    ("plain", "off", ["1:2"], {}, []),
    ("resize", "resize", ["1:2"], {"accuracy_weight_seconds": "0.05"}, []),
    ("migrate", "migrate", ["1:2"], {}, []),
    ("auto", "auto", ["1:2"], {}, []),
    ("auto_fixed", "auto", ["1:2"], {}, ["--fixed_costs=on"]),
    ("auto_feedback", "auto", ["1:2"], {}, ["--step_feedback"]),
    ("midrun", "auto", ["1:2@{on}-{off}"], {}, []),
    ("calm", "auto", [], {}, []),
    ("calm_feedback", "auto", [], {}, ["--step_feedback"]),
]
WARMUP_STEPS = 10  # first steps pay allocation and cache warm-up
# Plans are counted from here: the speed model has filled its windows (16 samples) and the
# first steps' allocation and cache warm-up are over.
PLAN_WARMUP_STEPS = 50


def all_local(record):
    return (record["pruned_fraction"] == 0 and record["offloaded_fraction"] == 0 and
            len(set(record["owned_units"])) == 1)


class StatusSampler:
    """Every SAMPLE_EVERY steps after warm-up, the coordinator's predicted and measured step
    seconds of the group (issue 14: within 10% of each other), scraped from its /metrics:
    an HTTP GET from this process, where spawning `ballastctl status` each time took enough
    CPU to show as a blip in a rank's speed."""

    SAMPLE_EVERY = 25

    def __init__(self):
        self.samples = []
        self.next_step = PLAN_WARMUP_STEPS

    def __call__(self, job, step):
        if step < self.next_step:
            return
        self.next_step = step + self.SAMPLE_EVERY
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{job.metrics_port}/metrics",
                                        timeout=2) as r:
                text = r.read().decode()
        except OSError:
            return  # the coordinator is busy or not up: a missed sample, not a failure
        values = {}
        for line in text.splitlines():
            for name in ("predicted", "measured"):
                if line.startswith(f"ballast_group_{name}_step_seconds{{"):
                    values[name] = float(line.rsplit(" ", 1)[1])
        if values.get("predicted", 0) > 0 and values.get("measured", 0) > 0:
            self.samples.append({"step": step, **values})

    def summary(self, contended):
        """Median and worst |predicted / measured - 1|, under contention and without."""
        out = {}
        for name, keep in (("contended", contended), ("calm", lambda s: not contended(s))):
            errors = sorted(abs(x["predicted"] / x["measured"] - 1)
                            for x in self.samples if keep(x["step"]))
            if errors:
                out[f"prediction_error_{name}"] = {
                    "samples": len(errors), "median": round(harness.median(errors), 4),
                    "max": round(errors[-1], 4),
                    "within_10pct": round(sum(e <= 0.10 for e in errors) / len(errors), 3)}
        return out


def spu(records):
    return harness.median([r["seconds_per_unit"] for r in records if r["units_computed"] > 0])


def analyse(name, ranks, stragglers, reference, contended_reference, elapsed, sampler=None):
    steps0 = ranks[0]["steps"]
    contended = lambda s: any(st.active(s) for st in stragglers)
    measured = [r for r in steps0 if r["step"] >= WARMUP_STEPS]
    out = {
        "config": name,
        "steps": len(steps0),
        "median_step_seconds": harness.median([r["wall_s"] for r in measured]),
        "test_accuracy": ranks[0]["final"]["test_accuracy"],
        "test_loss": ranks[0]["final"]["test_loss"],
        "val_loss": ranks[0]["final"].get("val_loss"),  # the GPT's quality figure
        "pruned_fraction": sum(r["pruned_fraction"] for r in measured) / len(measured),
        "offloaded_fraction": sum(r["offloaded_fraction"] for r in measured) / len(measured),
        "final_owned_units": steps0[-1]["owned_units"],
        "plan_changes": len({r["plan_version"] for r in steps0}) - 1,
        "wall_seconds": round(elapsed, 1),
        # What slowed rank 1 (the harness's record; None for runs from before it was kept).
        "contention": (ranks[0].get("contention") or {}).get("kind"),
        "contention_mechanism": (ranks[0].get("contention") or {}).get("mechanism"),
    }
    # Per-rank speed (seconds per computed unit) over the contended steps (all steps when
    # there is no straggler).
    window = [s for s in range(WARMUP_STEPS, len(steps0)) if contended(s) or not stragglers]
    rank_spu = []
    for rank in ranks:
        by_step = {r["step"]: r for r in rank["steps"]}
        rank_spu.append(spu([by_step[s] for s in window if s in by_step]))
    out["rank_seconds_per_unit"] = rank_spu
    after = [r for r in steps0 if r["step"] >= PLAN_WARMUP_STEPS]
    changes = sum(a["plan_version"] != b["plan_version"] for a, b in zip(after, after[1:]))
    out["plan_changes_per_1000_steps_after_warmup"] = round(1000 * changes / max(1, len(after) - 1), 2)
    out["all_local_step_fraction_after_warmup"] = round(
        sum(all_local(r) for r in after) / max(1, len(after)), 4)
    if reference is None or not stragglers:
        out["ideal_step_seconds"] = (reference or out)["median_step_seconds"]
        out["vs_ideal"] = out["median_step_seconds"] / out["ideal_step_seconds"]
    else:
        speeds = [ref / mine for ref, mine in zip(reference["rank_seconds_per_unit"], rank_spu)]
        out["rank_relative_speed"] = [round(v, 3) for v in speeds]
        work = reference["median_step_seconds"] * len(ranks)
        out["ideal_step_seconds_own_speeds"] = work / sum(speeds)
        # Every configuration under the same contention gets the plain run's ideal.
        out["ideal_step_seconds"] = (contended_reference["ideal_step_seconds"]
                                     if contended_reference is not None
                                     else out["ideal_step_seconds_own_speeds"])
        contended_steps = [r["wall_s"] for r in measured if contended(r["step"])]
        out["median_contended_step_seconds"] = harness.median(contended_steps)
        out["vs_ideal"] = out["median_contended_step_seconds"] / out["ideal_step_seconds"]
        out["vs_ideal_own_speeds"] = (out["median_contended_step_seconds"] /
                                      out["ideal_step_seconds_own_speeds"])
        if contended_reference is not None:
            out["speedup_vs_plain"] = (contended_reference["median_contended_step_seconds"] /
                                       out["median_contended_step_seconds"])
    if name == "midrun":
        out.update(midrun(steps0, stragglers[0], out["ideal_step_seconds"]))
    if sampler is not None:
        out.update(sampler.summary(contended))
    return out


# How a reaction to contention that starts mid-run is judged: the steps after its onset
# until the running median of RECOVERY_WINDOW steps first lies within RECOVERY_TOLERANCE
# of the step aimed at (the ideal here, the best static plan in e2e_interleaved.py).
RECOVERY_WINDOW = 3
RECOVERY_TOLERANCE = 0.10


def steps_to_within(walls, start, end, target, tolerance=RECOVERY_TOLERANCE):
    """Steps from `start` to the first step s whose running median of RECOVERY_WINDOW
    steps (s onwards, from `walls`: step -> seconds, those before `end` only) is at most
    (1 + tolerance) x target; None when none is before end. A median, so that one quick
    step (a plan's first, or one before the contention took hold) does not count."""
    for s in range(start, end - RECOVERY_WINDOW + 1):
        window = sorted(walls[t] for t in range(s, s + RECOVERY_WINDOW) if t in walls)
        if window and window[len(window) // 2] <= (1 + tolerance) * target:
            return s - start
    return None


def midrun(steps, straggler, ideal):
    """Steps after contention starts until the step time is back within 10% of the new
    ideal (3-step running median), and whether plans return to all-local after it ends."""
    start, end = straggler.windows[0]
    recovered = steps_to_within({r["step"]: r["wall_s"] for r in steps}, start, end, ideal)
    after = [r for r in steps if r["step"] >= end]
    back_local = next((r["step"] - end for r in after if all_local(r)), None)
    last = steps[-1]
    return {
        "contention_window": [start, end],
        "steps_to_within_10pct_of_ideal": recovered,
        "steps_to_all_local_after_contention": back_local,
        "all_local_at_end": all_local(last),
        # Issue 14: once calm, it stays all-local.
        "all_local_fraction_from_20_steps_after": round(
            sum(all_local(r) for r in after if r["step"] >= end + 20) /
            max(1, sum(r["step"] >= end + 20 for r in after)), 4),
    }


def plot(results, runs, path, slowed_by):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [3, 1]})
    for name, ranks in runs.items():
        steps = ranks[0]["steps"]
        xs = [r["step"] for r in steps]
        walls = [r["wall_s"] * 1e3 for r in steps]
        smooth = [harness.median(walls[max(0, i - 4):i + 1]) for i in range(len(walls))]
        ax1.plot(xs, smooth, label=name, linewidth=1.2)
    ax1.set_xlabel("step")
    ax1.set_ylabel("step time, ms (5-step running median)")
    ax1.set_title(f"ViT on Fashion-MNIST, 2 TP ranks, rank 1 slowed 2x by {slowed_by}")
    ax1.legend()
    ax1.grid(alpha=0.3)
    names = [r["config"] for r in results]
    ax2.bar(names, [100 * r["test_accuracy"] for r in results], color="tab:blue")
    lo = min(100 * r["test_accuracy"] for r in results)
    ax2.set_ylim(max(0, lo - 5), 100)
    ax2.set_ylabel("test accuracy, %")
    ax2.tick_params(axis="x", rotation=45)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build-release")
    p.add_argument("--steps", type=int, default=1875,
                   help="training steps per configuration (1875 x 64 images = 2 epochs)")
    p.add_argument("--out", default="")
    p.add_argument("--only", default="",
                   help="comma list of configurations (none always runs, plain whenever a "
                        "contended configuration does)")
    p.add_argument("--reuse", action="store_true",
                   help="reload configurations measured earlier into --out instead of rerunning "
                        "those not named by --only")
    p.add_argument("--trainer", choices=harness.TRAINERS, default="cpp",
                   help="the C++ ViT, the PyTorch one (examples/torch/vit_train.py), or the "
                        "PyTorch GPT (examples/torch/gpt_train.py)")
    p.add_argument("--quota-period-us", type=int, default=harness.JobConfig.quota_period_us,
                   help="the straggler's CPU quota period (launch.py --quota-period-us)")
    p.add_argument("--contention", choices=harness.CONTENTION_KINDS, default="auto",
                   help="how rank 1 is slowed (launch.py --contention); device: an emulated "
                        "slower device, its block compute only")
    p.add_argument("trainer_args", nargs="*", help="extra vit_train flags (after --)")
    a = p.parse_args()
    if not 1000 <= a.quota_period_us <= 1000000:
        p.error(f"--quota-period-us {a.quota_period_us} out of range [1000, 1000000]")
    out_dir = a.out or os.path.join(a.build, "bench-e2e")
    os.makedirs(out_dir, exist_ok=True)
    only = set(filter(None, a.only.split(",")))
    results, runs, reference, contended_reference = [], {}, None, None
    previous = {}
    if a.reuse and os.path.exists(os.path.join(out_dir, "e2e.json")):
        previous = {r["config"]: r for r in json.load(open(os.path.join(out_dir, "e2e.json")))}
    if (any(name in only and stragglers for name, _, stragglers, _, _ in CONFIGS) and
            "plain" not in previous):
        only.add("plain")  # the contended configurations' ideal comes from it
    for name, mode, stragglers, policy, coordinator_flags in CONFIGS:
        if only and name not in only and not (a.reuse and name in previous) and name != "none":
            continue
        steps = a.steps // 2 if name == "midrun" else a.steps
        stragglers = [s.format(on=int(0.30 * steps), off=int(0.65 * steps)) for s in stragglers]
        parsed = [harness.Straggler.parse(s) for s in stragglers]
        cfg = harness.JobConfig(build=a.build, steps=steps, mode=mode, stragglers=parsed,
                                out=os.path.join(out_dir, name), verbose=False, progress="none",
                                trainer_args=a.trainer_args, policy=policy, trainer=a.trainer,
                                quota_period_us=a.quota_period_us, contention=a.contention,
                                coordinator_flags=coordinator_flags)
        sampler = None
        reused = a.reuse and name in previous and name not in only
        if reused:
            # Measured by an earlier invocation into the same --out: reload, do not rerun.
            print(f"[e2e] {name}: reusing {cfg.out}", file=sys.stderr, flush=True)
            ranks = harness.load_ranks(cfg.out, cfg.world)
            elapsed = previous[name]["wall_seconds"]
        else:
            print(f"[e2e] {name}: mode={mode} stragglers={stragglers or 'none'} policy={policy}",
                  file=sys.stderr, flush=True)
            began = time.monotonic()
            sampler = StatusSampler() if mode != "off" else None
            ranks = harness.run_job(cfg, on_step=sampler)
            elapsed = time.monotonic() - began
        result = analyse(name, ranks, parsed, reference, contended_reference, elapsed, sampler)
        # A reused run keeps the period it ran with (10 ms before the flag).
        result["quota_period_us"] = (previous[name].get("quota_period_us", 10000) if reused
                                     else a.quota_period_us)
        if sampler is None and name in previous:
            # The status samples of a reused run are in its earlier result only.
            result.update({k: v for k, v in previous[name].items()
                           if k.startswith("prediction_error_")})
        if name == "none":
            reference = result
        elif name == "plain":
            contended_reference = result
        results.append(result)
        runs[name] = ranks
        print(json.dumps(result), flush=True)
    with open(os.path.join(out_dir, "e2e.json"), "w") as f:
        json.dump(results, f, indent=1)
    kinds = {r["contention"] for r in results if r["contention"] not in (None, "none")}
    slowed_by = {"device": "an emulated slower device", "quota": "a co-tenant and a CPU quota",
                 "cotenant": "a co-tenant"}.get(kinds.pop() if len(kinds) == 1 else "",
                                                "contention")
    plot(results, runs, os.path.join(out_dir, "e2e.png"), slowed_by)
    print(f"[e2e] wrote {out_dir}/e2e.json and {out_dir}/e2e.png", file=sys.stderr)


if __name__ == "__main__":
    try:
        main()
    except harness.LaunchError as e:
        print(f"e2e: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
