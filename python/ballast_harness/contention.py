"""Slowing the stragglers down, on their schedules in training steps. Two families:

Contention for the rank's core (kinds quota, cotenant; auto picks): a co-tenant process
(examples/vit/cotenant.cc) competes for the core; where cgroups are writable the rank is
also held to 1/slowdown of it by a CPU quota (cgroups.py); otherwise the co-tenant's nice
value sets the rank's share. Real, but it slows everything the rank does, its collectives
and their wake-ups included, which no plan can move off it.

An emulated slower device (kind device): the rank's block compute alone runs `slowdown`
times longer, as on an older GPU, its collectives untouched. The harness writes the factor
to the rank's slowdown file, named to it by $BALLAST_EMULATED_SLOWDOWN_FILE (rank_env); the
worker library re-reads it every step and burns the extra time in redundant arithmetic
inside the blocks' compute timers (worker_lib/internal/emulated_slowdown.h). The harness
learns of a step once rank 0 has begun it, so it writes the file a step ahead, naming the
step it takes effect from ("2@120", "1@180"): a window starts and ends at its own steps
(written as it began, every device window ran a step late). CPU backend only.

    contention = Contention(cfg, [w.pid for w in workers], run_dir)
    contention.update(step)  # as rank 0 advances: co-tenants start and stop, files change
    contention.record()      # the kind and mechanism, for the run's records
    contention.close()       # co-tenants stopped, cgroups and slowdown files removed
"""

from __future__ import annotations

import math
import os
import subprocess

from .cgroups import CgroupQuota
from typing import Any

from .config import CONTENTION_KINDS, JobConfig, LaunchError, Straggler, log
from .processes import die_with_launcher, stop_process

# Names a rank's slowdown file (worker_lib/internal/emulated_slowdown.h reads it).
SLOWDOWN_FILE_ENV = "BALLAST_EMULATED_SLOWDOWN_FILE"


def slowdown_file(run_dir: str, rank: int) -> str:
    """Where the device kind writes rank `rank`'s slowdown factor."""
    return os.path.join(run_dir, f"rank-{rank}.slowdown")


def rank_env(cfg: JobConfig, run_dir: str, rank: int) -> dict[str, str]:
    """What rank `rank`'s environment needs from the contention: under the device kind, a
    straggler's slowdown file (absent until its window opens: full speed)."""
    if cfg.contention == "device" and any(s.rank == rank for s in cfg.stragglers):
        return {SLOWDOWN_FILE_ENV: slowdown_file(run_dir, rank)}
    return {}


def check_contention(cfg: JobConfig) -> None:
    """LaunchError for a contention this job cannot have, before anything starts."""
    if cfg.contention not in CONTENTION_KINDS:
        raise LaunchError(f"contention {cfg.contention!r} is not one of {CONTENTION_KINDS}")
    if cfg.contention == "device" and cfg.backend != "cpu":
        raise LaunchError(f"--contention device needs the cpu backend, not {cfg.backend}: it "
                          f"burns host time, which does not slow a GPU")


def write_factor(path: str, factor: float, from_step: int) -> None:
    """Replaces the file at once (a rank never reads half a setting): `factor`, from step
    `from_step` on (worker_lib/internal/emulated_slowdown.h)."""
    temporary = f"{path}.tmp"
    with open(temporary, "w") as f:
        f.write(f"{factor:g}@{from_step}\n")
    os.replace(temporary, path)


def cotenant_nice(slowdown: float) -> int:
    """The co-tenant's nice value that leaves the rank 1/slowdown of its core, without a quota.

    CFS splits the core by weight: nice n weighs ~1024 / 1.25^n, so the rank keeps
    1/slowdown of it when the co-tenant weighs (slowdown - 1) as much."""
    nice = 0 if slowdown == 2 else round(-math.log(slowdown - 1) / math.log(1.25))
    return max(-20, min(19, nice))


def quota_period_us(cfg: JobConfig, straggler: Straggler) -> int:
    """The configured period, raised where 1/slowdown of it would be under the kernel's 1 ms
    least quota (the slowdown would be less)."""
    return max(cfg.quota_period_us, math.ceil(CgroupQuota.MIN_QUOTA_US * straggler.slowdown))


class Contention:
    """Applies the stragglers' schedules as training advances (driven by rank 0's steps)."""

    def __init__(self, cfg: JobConfig, worker_pids: list[int], run_dir: str = "") -> None:
        self.cfg = cfg
        self.worker_pids = worker_pids
        self.run_dir = run_dir
        self.cotenants: dict[int, subprocess.Popen] = {}  # rank -> co-tenant
        self.quotas: dict[int, CgroupQuota] = {}
        self.slowed: set[int] = set()  # device kind: ranks slowed from the step in their file
        self.kind = "cotenant"
        self.mechanism = "cotenant (nice)"
        self.cotenant_bin = os.path.join(cfg.build, "examples", "cotenant")
        check_contention(cfg)
        if cfg.contention == "device":
            if not run_dir:
                raise LaunchError("--contention device: no run directory for the slowdown files")
            self.kind = "device"
            self.mechanism = "emulated slower device (block compute only)"
        elif cfg.contention in ("auto", "quota") and cfg.stragglers:
            for s in cfg.stragglers:
                period = quota_period_us(cfg, s)
                if period != cfg.quota_period_us:
                    log(cfg, f"rank {s.rank}: quota period {period} us, not {cfg.quota_period_us}: "
                             f"a 1/{s.slowdown:g} share must be at least the kernel's 1 ms")
                q = CgroupQuota(f"ballast-{os.getpid()}-rank{s.rank}", period)
                if not q.available:
                    if cfg.contention == "quota":
                        raise LaunchError("--contention=quota: cgroup CPU controller not writable")
                    log(cfg, "cgroups not writable here: co-tenant only, share set by nice")
                    break
                q.add(worker_pids[s.rank])
                self.quotas[s.rank] = q
            if len(self.quotas) == len(cfg.stragglers):
                version = self.quotas[cfg.stragglers[0].rank].version
                self.kind = "quota"
                self.mechanism = f"co-tenant + cgroup v{version} quota"
            else:
                for q in self.quotas.values():
                    q.remove()
                self.quotas = {}

    def record(self) -> dict[str, Any]:
        """The contention this run ran under, for its records (records.py): the kind applied
        ("none" without stragglers), the kind asked for, and how it was applied."""
        return {"kind": self.kind if self.cfg.stragglers else "none",
                "requested": self.cfg.contention,
                "mechanism": self.mechanism if self.cfg.stragglers else "",
                "stragglers": [{"rank": s.rank, "slowdown": s.slowdown}
                               for s in self.cfg.stragglers]}

    def update(self, step: int) -> None:
        """`step`: the step rank 0 runs now (begun)."""
        for s in self.cfg.stragglers:
            if self.kind == "device":
                # A step ahead, so that the next step's start reads it (see the module's
                # docstring); the step now only where the schedule is behind (the first
                # call, a late poll).
                for at in (step, step + 1):
                    if s.active(at) != (s.rank in self.slowed):
                        self._set_device(s, s.active(at), at)
                continue
            on = s.active(step)
            running = s.rank in self.cotenants
            if on and not running:
                self._start(s, step)
            elif not on and running:
                self._stop(s, step)

    def _set_device(self, s: Straggler, on: bool, step: int) -> None:
        write_factor(slowdown_file(self.run_dir, s.rank), s.slowdown if on else 1.0, step)
        if on:
            self.slowed.add(s.rank)
            log(self.cfg, f"step {step}: contention ON  - rank {s.rank}'s block compute slowed "
                          f"{s.slowdown:g}x (an emulated slower device)")
        else:
            self.slowed.discard(s.rank)
            log(self.cfg, f"step {step}: contention OFF - rank {s.rank}'s block compute at full "
                          f"speed")

    def _start(self, s: Straggler, step: int) -> None:
        core = s.rank % (os.cpu_count() or 1)
        nice = cotenant_nice(s.slowdown)

        def pin() -> None:
            die_with_launcher()
            os.sched_setaffinity(0, {core})
            if not self.quotas:
                os.setpriority(os.PRIO_PROCESS, 0, nice)

        proc = subprocess.Popen([self.cotenant_bin], preexec_fn=pin, start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.cotenants[s.rank] = proc
        if s.rank in self.quotas:
            self.quotas[s.rank].set_share(1.0 / s.slowdown)
        log(self.cfg, f"step {step}: contention ON  - rank {s.rank} slowed {s.slowdown:g}x on core "
                      f"{core} ({self.mechanism})")

    def _stop(self, s: Straggler, step: int) -> None:
        stop_process(self.cotenants.pop(s.rank))
        if s.rank in self.quotas:
            self.quotas[s.rank].set_share(None)
        log(self.cfg, f"step {step}: contention OFF - rank {s.rank} has its core back")

    def close(self) -> None:
        if self.kind == "device":
            for s in self.cfg.stragglers:  # written once a window came near, "1@E" after it
                try:
                    os.remove(slowdown_file(self.run_dir, s.rank))
                except FileNotFoundError:
                    pass
            self.slowed = set()
        for rank in list(self.cotenants):
            stop_process(self.cotenants.pop(rank))
        for q in self.quotas.values():
            q.remove()
        self.quotas = {}
