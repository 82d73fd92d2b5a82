"""The interleaved benchmark's judgement (bench/e2e_interleaved.py): one cycle's ratios
from its segments' figures (the ideal, the static plans' oracle), and the summary over
the cycles against issues 14's and 39's targets, with their spread and verdicts
(bench/verdicts.py). Pure arithmetic on dicts, tested on made-up cycles."""

import statistics

import e2e  # bench/e2e.py: steps_to_within, the recovery rule both benchmarks share
from verdicts import judged, spread

# Issue 14's targets for each balancing mode against plain TP and the ideal.
TARGET_VS_IDEAL = 1.05
TARGET_PLAIN_OVER_MODE = 1.4
# Issue 39's targets against the best static plan of the cycle (the oracle).
TARGET_VS_ORACLE = 1.05
TARGET_CAPTURED_SHARE = 0.90
# Issue 39: with contention starting mid-run, within 10% of the best static step in at
# most this many steps (e2e.steps_to_within's running median).
TARGET_ONSET_STEPS = 5
# The coordinator's default straggler_threshold (coordinator/policy.h): calm segments
# whose ranks ran within 1 + this of each other are judged apart (reaction_summary).
CALM_LEVEL_THRESHOLD = 0.10


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


def steps_to(walls, target):
    """e2e.steps_to_within over a segment's step seconds (`walls`, from its first step)."""
    return e2e.steps_to_within(dict(enumerate(walls)), 0, len(walls), target)


def reaction_summary(cycles, fixed):
    """Over the cycles with an onset: the steps to within 10% of the cycle's oracle and of
    the fixed oracle `fixed` (None: none), judged against TARGET_ONSET_STEPS, a cycle that
    never came within counted as its whole segment as scheduled (and in *_never); the
    calm segments' plan changes per 1,000 steps and their share of all-local steps. {}
    without them."""
    out = {}
    with_onset = [c for c in cycles if "onset_walls" in c and "oracle_seconds" in c]
    targets = [("onset_steps_to_oracle", lambda c: c["oracle_seconds"])]
    if fixed is not None:
        targets.append(("onset_steps_to_fixed_oracle", lambda c: c["static_seconds"].get(fixed)))
    for name, target_of in targets:
        steps = [(steps_to(c["onset_walls"], target_of(c)),
                  c.get("onset_segment_steps", len(c["onset_walls"])))
                 for c in with_onset if target_of(c) is not None]
        if steps:
            out[name] = judged([n if n is not None else whole for n, whole in steps],
                               TARGET_ONSET_STEPS, at_most=True)
            out[f"{name}_never"] = sum(n is None for n, _ in steps)
    calm = [c for c in cycles if "calm_steps" in c]
    out.update(calm_figures(calm, "calm"))
    # The same over the cycles whose ranks ran level in none's held minute just before
    # (within the coordinator's default straggler threshold), where a calm change answers
    # no straggler that was there already. (Judged by none alone: calm's own spread may
    # move with the plans it judges.)
    measured = [c for c in calm if c.get("none_rank_spread") is not None]
    if measured:
        level = [c for c in measured if c["none_rank_spread"] <= 1 + CALM_LEVEL_THRESHOLD]
        out["calm_level_cycles"] = len(level)
        out["calm_spread_measured_cycles"] = len(measured)
        out.update(calm_figures(level, "calm_level"))
    return out


def calm_figures(calm, prefix):
    """Calm segments' plan changes per 1,000 steps and share of all-local steps, as
    PREFIX_plan_changes_per_1000_steps and PREFIX_all_local_fraction ({} without steps)."""
    total = sum(c["calm_steps"] for c in calm)
    if not total:
        return {}
    return {
        f"{prefix}_plan_changes_per_1000_steps": round(
            1000 * sum(c["calm_plan_changes"] for c in calm) / total, 2),
        f"{prefix}_all_local_fraction": round(
            sum(c["calm_all_local_fraction"] * c["calm_steps"] for c in calm) / total, 4),
    }


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
    out.update(reaction_summary(cycles, out.get("fixed_oracle")))
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
    best = min(relative, key=lambda name: statistics.median(relative[name]))
    out = {"fixed_oracle": best,
           "static_over_plain_median": {n: round(statistics.median(v), 4)
                                        for n, v in relative.items()}}
    for mode in modes:
        out.update({f"{mode}_{k}": v for k, v in against_fixed(cycles, mode, best).items()})
    return out
