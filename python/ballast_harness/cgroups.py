"""A CPU quota for one process, through cgroup v2 (cpu.max) or v1 (cpu.cfs_quota_us),
whichever this machine has and lets us write; `available` is False where neither does.

    q = CgroupQuota(f"ballast-{os.getpid()}-rank1", period_us=10000)
    if q.available:
        q.add(pid)
        q.set_share(0.5)   # half a core
        q.set_share(None)  # no limit
        q.remove()         # its processes back to the parent group, the group removed
"""

from __future__ import annotations

import os
from typing import Optional

CGROUP_V2_ROOT = "/sys/fs/cgroup"
CGROUP_V1_CPU_ROOT = "/sys/fs/cgroup/cpu"


class CgroupQuota:
    """Short periods (JobConfig.quota_period_us) throttle the process smoothly, not in
    100 ms gulps. The kernel's smallest quota is 1 ms: a share below 1 ms / period gets 1 ms."""

    MIN_QUOTA_US = 1000

    def __init__(self, name: str, period_us: int = 10000, v2_root: str = CGROUP_V2_ROOT,
                 v1_root: str = CGROUP_V1_CPU_ROOT) -> None:
        self.period_us = period_us
        self.path: Optional[str] = None
        self.version: Optional[int] = None
        try:
            if os.path.exists(os.path.join(v2_root, "cgroup.controllers")):
                with open(os.path.join(v2_root, "cgroup.subtree_control")) as f:
                    controllers = f.read()
                if "cpu" in controllers.split():
                    self.path, self.version = os.path.join(v2_root, name), 2
            elif os.path.exists(os.path.join(v1_root, "cpu.cfs_quota_us")):
                self.path, self.version = os.path.join(v1_root, name), 1
            if self.path:
                os.makedirs(self.path, exist_ok=True)
                self.set_share(None)  # probe that we may write
        except OSError:
            self.remove()
            self.path = None

    @property
    def available(self) -> bool:
        return self.path is not None

    def set_share(self, share: Optional[float]) -> None:
        """share of one core in (0, 1], or None for no limit."""
        if self.version == 2:
            quota = "max" if share is None else str(self.quota_us(share))
            self._write("cpu.max", f"{quota} {self.period_us}")
        else:
            self._write("cpu.cfs_period_us", str(self.period_us))
            self._write("cpu.cfs_quota_us", str(-1 if share is None else self.quota_us(share)))

    def quota_us(self, share: float) -> int:
        return max(self.MIN_QUOTA_US, int(self.period_us * share))

    def add(self, pid: int) -> None:
        self._write("cgroup.procs", str(pid))

    def _write(self, name: str, value: str) -> None:
        assert self.path is not None
        with open(os.path.join(self.path, name), "w") as f:
            f.write(value)

    def remove(self) -> None:
        if not self.path:
            return
        # Move anything left back to the parent, then remove the group.
        parent = os.path.dirname(self.path)
        try:
            with open(os.path.join(self.path, "cgroup.procs")) as f:
                pids = f.read().split()
            for pid in pids:
                try:
                    with open(os.path.join(parent, "cgroup.procs"), "w") as f:
                        f.write(pid)
                except OSError:
                    pass
            os.rmdir(self.path)
        except OSError:
            pass
