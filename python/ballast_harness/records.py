"""The trainers' per-step records (one JSON line per step, then a final line, in
<out>/rank-R.jsonl) and what the launcher prints from them.

    ranks = load_ranks(out, world)
    median([r["wall_s"] for r in ranks[0]["steps"]])
"""

from __future__ import annotations

import json
import os
from typing import Any, Iterable, Optional

from .config import JobConfig

# {"steps": [step record, ...], "final": the final record or None}
RankRecords = dict[str, Any]


def load_ranks(out: str, world: int) -> list[RankRecords]:
    """Per-rank step records and final record from a run's --out directory."""
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
        ranks.append({"steps": steps, "final": final})
    return ranks


def median(values: Iterable[float]) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])


def summarize(cfg: JobConfig, ranks: list[RankRecords]) -> None:
    """Step-time phases for the demo: before contention, contended before the first plan,
    and contended under Ballast's plan; plus the final accuracy."""
    steps = ranks[0]["steps"]

    def contended(step: int) -> bool:
        return any(st.active(step) for st in cfg.stragglers)

    calm = [r["wall_s"] for r in steps if not contended(r["step"]) and r["step"] >= 10]
    first_plan = None
    for r in steps:
        if contended(r["step"]) and (r["pruned_fraction"] > 0 or r["offloaded_fraction"] > 0
                                     or len(set(r["owned_units"])) > 1):
            first_plan = r["step"]
            break
    before = [r["wall_s"] for r in steps if contended(r["step"]) and
              (first_plan is None or r["step"] < first_plan) and r["step"] >= 3]
    after = [r["wall_s"] for r in steps if contended(r["step"]) and first_plan is not None and
             r["step"] >= first_plan + 5]
    print()
    print("Step time (rank 0, median):")
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
    final = ranks[0]["final"]
    if final and not final.get("interrupted"):
        if "val_loss" in final:  # the GPT: held-out loss is its quality figure
            print(f"Validation loss: {final['val_loss']:.3f} nats/char (next-character accuracy "
                  f"{100 * final['test_accuracy']:.2f}%) after {final['steps']} steps")
        else:
            print(f"Test accuracy: {100 * final['test_accuracy']:.2f}% after {final['steps']} "
                  f"steps")
