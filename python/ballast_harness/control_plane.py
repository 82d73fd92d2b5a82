"""Ballast's control plane for one job on loopback: a coordinator with its store in the run
directory, the job's policy set ahead of it with ballastctl, and an agent whose socket the
ranks connect to.

    plane = ControlPlane(cfg, parts, run_dir)
    plane.start()                    # returns once the agent's socket exists
    plane.ctl("policy", "get", "vit")
"""

from __future__ import annotations

import os
import subprocess

from .config import JOB_OF_TRAINER, JobConfig, LaunchError, log
from .processes import Processes, binary, free_port, wait_until

# Steps here take ~0.2 s: with the default one decision per second a new straggler would
# cost 5+ steps before the first plan, so the job reports (and is decided on) four times a
# second.
REPORT_PERIOD_MS = 250
NODE = "demo"


class ControlPlane:
    """The coordinator and the agent of one job, started as parts of `parts`."""

    def __init__(self, cfg: JobConfig, parts: Processes, run_dir: str) -> None:
        self.cfg = cfg
        self.parts = parts
        self.run_dir = run_dir
        self.coordinator_addr = f"127.0.0.1:{free_port()}"
        self.metrics_port = cfg.metrics_port or free_port()
        self.agent_metrics_port = cfg.agent_metrics_port or free_port()
        self.socket = os.path.join(run_dir, "agent.sock")

    def check_built(self) -> None:
        """LaunchError now, before anything starts, if a binary is missing."""
        for parts in (("coordinator", "ballast-coordinator"), ("agent", "ballast-agent"),
                      ("ctl", "ballastctl")):
            binary(self.cfg.build, *parts)

    def ctl(self, *args: str) -> subprocess.CompletedProcess:
        """ballastctl against this job's coordinator."""
        ctl = binary(self.cfg.build, "ctl", "ballastctl")
        return subprocess.run([ctl, f"--coordinator={self.coordinator_addr}", *args],
                              capture_output=True, text=True, timeout=15)

    def start(self) -> None:
        cfg = self.cfg
        coordinator = binary(cfg.build, "coordinator", "ballast-coordinator")
        agent = binary(cfg.build, "agent", "ballast-agent")
        self.parts.start("coordinator", [coordinator, f"--listen={self.coordinator_addr}",
                                         f"--metrics=127.0.0.1:{self.metrics_port}",
                                         f"--store={os.path.join(self.run_dir, 'coordinator.db')}",
                                         *cfg.coordinator_flags])
        self.wait_for_coordinator("the coordinator")
        policy = {"mode": cfg.mode, "report_period_ms": str(REPORT_PERIOD_MS), **cfg.policy}
        # The job starts after this: its policy is set ahead, which ballastctl must be told.
        r = self.ctl("--preconfigure", "policy", "set", JOB_OF_TRAINER[cfg.trainer],
                     *[f"{k}={v}" for k, v in policy.items()])
        if r.returncode != 0:
            raise LaunchError(f"ballastctl policy set failed: {r.stderr.strip()}")
        self.parts.start("agent", [agent, f"--coordinator={self.coordinator_addr}",
                                   f"--socket={self.socket}", f"--node={NODE}",
                                   f"--metrics=127.0.0.1:{self.agent_metrics_port}"])
        wait_until(lambda: os.path.exists(self.socket), 20, "the agent's socket",
                   self.parts.procs, self.parts.stopping)
        log(cfg, f"coordinator {self.coordinator_addr}, metrics http://127.0.0.1:"
                 f"{self.metrics_port}/metrics; agent metrics http://127.0.0.1:"
                 f"{self.agent_metrics_port}/metrics; policy mode={cfg.mode}")

    def wait_for_coordinator(self, what: str) -> None:
        """Until the coordinator answers `ballastctl status` (at most 20 s)."""
        wait_until(lambda: self.ctl("status").returncode == 0, 20, what, self.parts.procs,
                   self.parts.stopping)
