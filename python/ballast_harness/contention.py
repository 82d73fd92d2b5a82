"""Real contention on the stragglers' cores, on their schedules in training steps.

A co-tenant process (examples/vit/cotenant.cc) competes for the rank's core; where cgroups
are writable the rank is also held to 1/slowdown of its core by a CPU quota (cgroups.py);
otherwise the co-tenant's nice value sets the rank's share.

    contention = Contention(cfg, [w.pid for w in workers])
    contention.update(step)  # as rank 0 advances: co-tenants start and stop
    contention.close()       # co-tenants stopped, cgroups removed
"""

from __future__ import annotations

import math
import os
import subprocess

from .cgroups import CgroupQuota
from .config import JobConfig, LaunchError, Straggler, log
from .processes import die_with_launcher, stop_process


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

    def __init__(self, cfg: JobConfig, worker_pids: list[int]) -> None:
        self.cfg = cfg
        self.worker_pids = worker_pids
        self.cotenants: dict[int, subprocess.Popen] = {}  # rank -> co-tenant
        self.quotas: dict[int, CgroupQuota] = {}
        self.mechanism = "cotenant (nice)"
        self.cotenant_bin = os.path.join(cfg.build, "examples", "cotenant")
        if cfg.contention in ("auto", "quota") and cfg.stragglers:
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
                self.mechanism = f"co-tenant + cgroup v{version} quota"
            else:
                for q in self.quotas.values():
                    q.remove()
                self.quotas = {}

    def update(self, step: int) -> None:
        for s in self.cfg.stragglers:
            on = s.active(step)
            if on and s.rank not in self.cotenants:
                self._start(s, step)
            elif not on and s.rank in self.cotenants:
                self._stop(s, step)

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
        for rank in list(self.cotenants):
            stop_process(self.cotenants.pop(rank))
        for q in self.quotas.values():
            q.remove()
        self.quotas = {}
