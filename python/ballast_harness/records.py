"""The trainers' per-step records (one JSON line per step, then a final line, in
<out>/rank-R.jsonl), the contention the run ran under (<out>/contention.json, written by
the harness), and what the launcher prints from them.

    ranks = load_ranks(out, world)
    median([r["wall_s"] for r in ranks[0]["steps"]])
    ranks[0]["contention"]["kind"]  # "quota", "cotenant", "device" or "none"
"""

from __future__ import annotations

import json
import os
from typing import Any, Iterable, Optional

from .config import JobConfig

# {"steps": [step record, ...], "final": the final record or None, "contention": the run's
# contention (Contention.record(), the same for every rank) or None for a run from before
# it was recorded}
RankRecords = dict[str, Any]

CONTENTION_RECORD = "contention.json"


def write_contention(out: str, record: dict[str, Any]) -> None:
    with open(os.path.join(out, CONTENTION_RECORD), "w") as f:
        json.dump(record, f)
        f.write("\n")


def load_contention(out: str) -> Optional[dict[str, Any]]:
    try:
        with open(os.path.join(out, CONTENTION_RECORD)) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def load_ranks(out: str, world: int) -> list[RankRecords]:
    """Per-rank step records and final record from a run's --out directory."""
    contention = load_contention(out)
    ranks = []
    for r in range(world):
        steps: list[dict[str, Any]] = []
        final: Optional[dict[str, Any]] = None
        with open(os.path.join(out, f"rank-{r}.jsonl")) as f:
            for line in f:
                rec = json.loads(line)
                if rec.get("final"):
                    final = rec
                else:
                    steps.append(rec)
        ranks.append({"steps": steps, "final": final, "contention": contention})
    return ranks


def median(values: Iterable[float]) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])


def summarize(cfg: JobConfig, ranks: list[RankRecords]) -> None:
    """Step-time phases for the demo: before contention, contended before the first plan,
    and contended under Ballast's plan; each rank's block compute and collective time in
    those phases; plus the final accuracy."""
    steps = ranks[0]["steps"]

    def contended(step: int) -> bool:
        return any(st.active(step) for st in cfg.stragglers)

    first_plan = None
    for r in steps:
        if contended(r["step"]) and (r["pruned_fraction"] > 0 or r["offloaded_fraction"] > 0
                                     or len(set(r["owned_units"])) > 1):
            first_plan = r["step"]
            break
    # The phases, as tests on a step number.
    phases = {
        "calm": lambda s: not contended(s) and s >= 10,
        "before": lambda s: contended(s) and (first_plan is None or s < first_plan) and s >= 3,
        "after": lambda s: contended(s) and first_plan is not None and s >= first_plan + 5,
    }
    calm, before, after = ([r["wall_s"] for r in steps if keep(r["step"])]
                           for keep in phases.values())
    print()
    kind = (ranks[0].get("contention") or {}).get("kind")
    print(f"Step time (rank 0, median{f'; contention: {kind}' if kind else ''}):")
    if calm:
        print(f"  no contention                     {1e3 * median(calm):7.1f} ms  "
              f"({len(calm)} steps)")
    if before:
        print(f"  contention, before rebalancing    {1e3 * median(before):7.1f} ms  "
              f"({len(before)} steps)")
    if after:
        last = steps[-1]
        print(f"  contention, under Ballast's plan  {1e3 * median(after):7.1f} ms  "
              f"({len(after)} steps; plan at step {first_plan}: pruned {100 * last['pruned_fraction']:.0f}%, "
              f"offloaded {100 * last['offloaded_fraction']:.0f}%, units per rank "
              f"{':'.join(map(str, last['owned_units']))})")
    # Where the time goes: each rank's block compute and collective seconds a step.
    labels = {"calm": "no contention", "before": "contention, before rebalancing",
              "after": "contention, under Ballast's plan"}
    rows = []
    for phase, keep in phases.items():
        per_rank = [[r for r in rank["steps"] if keep(r["step"]) and "compute_s" in r]
                    for rank in ranks]
        if all(per_rank):
            cells = "  ".join(f"{1e3 * median(r['compute_s'] for r in recs):6.1f} / "
                              f"{1e3 * median(r['comm_s'] for r in recs):6.1f}"
                              for recs in per_rank)
            rows.append(f"  {labels[phase]:<34}{cells}")
    if rows:
        print("Block compute / collective ms a step (median), rank "
              + ", ".join(str(r) for r in range(len(ranks))) + ":")
        print("\n".join(rows))
    final = ranks[0]["final"]
    if final and not final.get("interrupted"):
        if "val_loss" in final:  # the GPT: held-out loss is its quality figure
            print(f"Validation loss: {final['val_loss']:.3f} nats/char (next-character accuracy "
                  f"{100 * final['test_accuracy']:.2f}%) after {final['steps']} steps")
        else:
            print(f"Test accuracy: {100 * final['test_accuracy']:.2f}% after {final['steps']} "
                  f"steps")
