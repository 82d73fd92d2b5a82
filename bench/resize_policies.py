#!/usr/bin/python3
"""Resize policies measured: the ViT trained in resize-only mode under the same contention,
with each imputation (zero, mean) and each priority (change, magnitude, random,
round-robin), at a fixed pruned fraction, against the same seed's run with no contention.

The pruned fraction is fixed by the policy, not by the planner's judgement: rank 1 is slowed
2x for the whole run, pruning is free (accuracy_weight_seconds=0) and capped at a quarter
of a rank's units and an eighth of the group's. Balancing would need half of rank 1's
units, so the cap binds: rank 1 prunes exactly 25% of its units (12.5% of the group) from
the first plan on, in every configuration alike, and only the imputation and the priority
differ.

Every configuration runs once per seed (--seeds, data order and initialisation), the
no-contention run too, so each result is a paired difference: accuracy and test loss
minus the same seed's no-contention run. The spread across seeds is the noise floor
that a difference between policies has to clear.

Prints one JSON object per run (stdout) and a summary per configuration; writes all of
them to <out>/resize_policies.json.
"""

import argparse
import json
import os
import sys
import time

try:
    import ballast_harness as harness
except ModuleNotFoundError:  # run straight from a checkout: the package is in python/
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import ballast_harness as harness

IMPUTATIONS = ("zero", "mean")
PRIORITIES = ("change", "magnitude", "random", "round-robin")
POLICY = {"accuracy_weight_seconds": "0", "max_pruned_fraction_rank": "0.25",
          "max_pruned_fraction_group": "0.125"}
WARMUP_STEPS = 50  # pruned fraction is averaged from here (the first plan comes earlier)


def run(a, name, mode, stragglers, policy, trainer_args, seed):
    cfg = harness.JobConfig(build=a.build, steps=a.steps, mode=mode,
                            stragglers=[harness.Straggler.parse(s) for s in stragglers],
                            out=os.path.join(a.out, f"{name}-seed{seed}"), verbose=False,
                            progress="none", policy=policy,
                            trainer_args=trainer_args + [f"--seed={seed}"])
    print(f"[resize] {name} seed {seed}", file=sys.stderr, flush=True)
    began = time.monotonic()
    ranks = harness.run_job(cfg)
    steps = [r for r in ranks[0]["steps"] if r["step"] >= WARMUP_STEPS]
    final = ranks[0]["final"]
    return {
        "config": name, "seed": seed, "steps": len(ranks[0]["steps"]),
        "test_accuracy": final["test_accuracy"], "test_loss": final["test_loss"],
        "pruned_fraction": sum(r["pruned_fraction"] for r in steps) / max(1, len(steps)),
        "median_step_seconds": harness.median([r["wall_s"] for r in steps]),
        "wall_seconds": round(time.monotonic() - began, 1),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build-release")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--seeds", type=int, default=2, help="runs per configuration (seeds 1..N)")
    p.add_argument("--only", default="",
                   help="comma list of IMPUTATION/PRIORITY configurations (default: all 8)")
    p.add_argument("--out", default="")
    a = p.parse_args()
    a.out = a.out or os.path.join(a.build, "bench-resize")
    os.makedirs(a.out, exist_ok=True)
    configs = [f"{i}/{q}" for i in IMPUTATIONS for q in PRIORITIES]
    if a.only:
        wanted = a.only.split(",")
        unknown = sorted(set(wanted) - set(configs))
        if unknown:
            p.error(f"unknown configuration(s) {', '.join(unknown)}; known: {', '.join(configs)}")
        configs = [c for c in configs if c in wanted]
    results = []
    path = os.path.join(a.out, "resize_policies.json")

    def save():  # after every run: a failure an hour in keeps what was measured
        with open(path, "w") as f:
            json.dump(results, f, indent=1)

    # Seed by seed, every configuration in turn: a slow spell of the machine then hits
    # one seed's runs of all configurations, not one configuration's runs of all seeds.
    for seed in range(1, a.seeds + 1):
        reference = run(a, "none", "off", [], {}, [], seed)
        results.append(reference)
        save()
        print(json.dumps(reference), flush=True)
        for config in configs:
            imputation, priority = config.split("/")
            # The job's policy: plans carry both to the workers.
            r = run(a, config, "resize", ["1:2"],
                    dict(POLICY, imputation=imputation, priority=priority), [], seed)
            r["accuracy_minus_none"] = r["test_accuracy"] - reference["test_accuracy"]
            r["loss_minus_none"] = r["test_loss"] - reference["test_loss"]
            results.append(r)
            save()
            print(json.dumps(r), flush=True)
    runs = list(results)
    for config in configs:
        mine = [r for r in runs if r["config"] == config]
        summary = {"summary": config}
        for key in ("accuracy_minus_none", "loss_minus_none", "pruned_fraction"):
            values = sorted(r[key] for r in mine)
            summary[key] = {"min": values[0], "median": harness.median(values), "max": values[-1]}
        print(json.dumps(summary), flush=True)
        results.append(summary)
    save()
    print(f"[resize] wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    try:
        main()
    except harness.LaunchError as e:
        print(f"resize_policies: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
