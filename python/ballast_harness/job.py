"""One training job under Ballast on this machine: the control plane (control_plane.py),
one trainer process per rank pinned to core rank % cores, contention on the stragglers'
schedules (contention.py), followed through rank 0's per-step records until every rank
has finished.

Everything it starts is stopped at the end, when any part fails, and on Ctrl-C / SIGTERM
(workers first, so they stop at the same step and write their checkpoint), and the run
directory, cgroups and sockets are removed.

    ranks = run_job(JobConfig(build="build", stragglers=[Straggler.parse("1:2@100-")]))
    ranks[0]["steps"][-1]["wall_s"], ranks[0]["final"]["test_accuracy"]

A subclass of `Job` hooks into training through `on_step` (examples/vit/chaos.py kills and
restarts the daemons there); `run_job(cfg, on_step=...)` does the same without one.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from typing import Any, Callable, Optional

from .config import TORCH_SCRIPT, TRAINER_FLAGS, JobConfig, LaunchError, log
from .contention import Contention, check_contention, rank_env
from .control_plane import NODE, ControlPlane
from .processes import Part, Processes, binary, describe_failures, stop_process
from .records import RankRecords, load_ranks, write_contention

# The repository root: the PyTorch trainers and the ballast package live in it.
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Job:
    def __init__(self, cfg: JobConfig) -> None:
        self.cfg = cfg
        self.run_dir = tempfile.mkdtemp(prefix="ballast-vit-")
        self.out = cfg.out or self.run_dir
        os.makedirs(self.out, exist_ok=True)
        self.stopping = threading.Event()
        self.parts = Processes(self.out, self.stopping)
        self.control = ControlPlane(cfg, self.parts, self.run_dir)
        self.workers: list[subprocess.Popen] = []
        self.contention: Optional[Contention] = None

    # The control plane's addresses, for hooks that read its metrics or call ballastctl.
    @property
    def coordinator_addr(self) -> str:
        return self.control.coordinator_addr

    @property
    def metrics_port(self) -> int:
        return self.control.metrics_port

    @property
    def agent_metrics_port(self) -> int:
        return self.control.agent_metrics_port

    @property
    def procs(self) -> list[Part]:
        return self.parts.procs

    def ctl(self, *args: str) -> subprocess.CompletedProcess:
        return self.control.ctl(*args)

    def kill_and_restart(self, name: str) -> None:
        """SIGKILLs a running part (the coordinator, the agent) and starts it again with the
        same command, its log appended, in its place in the stop order. For chaos runs."""
        self.parts.kill_and_restart(name)

    def on_step(self, step: int) -> None:
        """Called as rank 0 advances (step = steps done); a subclass hooks in here."""

    def trainer(self) -> tuple[list[str], Optional[dict[str, str]]]:
        """The trainer's command (without its flags) and environment (None: the launcher's)."""
        if self.cfg.trainer == "cpp":
            return [binary(self.cfg.build, "examples", "vit_train")], None
        extension = os.path.join(self.cfg.build, "python", "ballast", "torch")
        built = os.path.isdir(extension) and any(f.startswith("_C.") for f in os.listdir(extension))
        if not built:
            raise LaunchError(f"ballast.torch's extension is not built in {extension}: "
                              f"ninja -C {self.cfg.build} ballast_torch_ext (scripts/demo "
                              f"--trainer torch does)")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [
            os.path.join(REPO, "python"), os.path.join(os.path.abspath(self.cfg.build), "python"),
            env.get("PYTHONPATH")]))
        script = os.path.join(REPO, "examples", "torch", TORCH_SCRIPT[self.cfg.trainer])
        return ["/usr/bin/python3", script], env

    def rank_flags(self, r: int) -> list[str]:
        """Rank r's trainer flags. --batch only when the config names one: each trainer has
        its own default (the GPT's 16 sequences in 2 micro-batches are not the ViT's 64).
        The trainer's own flags (TRAINER_FLAGS) come before the caller's, which win."""
        cfg = self.cfg
        return [f"--rank={r}", f"--world={cfg.world}",
                f"--rendezvous={os.path.join(self.run_dir, 'rendezvous')}",
                f"--steps={cfg.steps}",
                *([f"--batch={cfg.batch}"] if cfg.batch is not None else []),
                f"--node={NODE}", f"--agent_socket={self.control.socket}",
                f"--metrics_out={os.path.join(self.out, f'rank-{r}.jsonl')}",
                f"--progress={cfg.progress if r == 0 else 'none'}",
                *([f"--backend={cfg.backend}"] if cfg.backend != "cpu" else []),
                *TRAINER_FLAGS.get(cfg.trainer, []), *cfg.trainer_args]

    def start_ranks(self, trainer: list[str], trainer_env: Optional[dict[str, str]]) -> None:
        cfg = self.cfg
        ncpu = os.cpu_count() or 1
        for r in range(cfg.world):
            metrics = os.path.join(self.out, f"rank-{r}.jsonl")
            if os.path.exists(metrics):
                os.remove(metrics)
            command = trainer + self.rank_flags(r)
            if r in cfg.netns:  # `ip netns exec` execs: the pid is still the trainer's
                namespace, address = cfg.netns[r]
                command = ["ip", "netns", "exec", namespace, *command,
                           f"--gloo_host={address}", f"--node={namespace}"]
            core = r % ncpu
            # One process per GPU: the CUDA backend takes its device from LOCAL_RANK.
            environment = dict(trainer_env if trainer_env is not None else os.environ,
                               LOCAL_RANK=str(r), **rank_env(cfg, self.run_dir, r))
            proc = self.parts.start(f"rank-{r}", command, to_terminal=(r == 0 and cfg.verbose),
                                    preexec_fn=lambda core=core: os.sched_setaffinity(0, {core}),
                                    env=environment)
            self.workers.append(proc)

    def run(self) -> list[RankRecords]:
        check_contention(self.cfg)
        self.control.check_built()
        trainer, trainer_env = self.trainer()
        self.control.start()
        self.start_ranks(trainer, trainer_env)
        self.contention = Contention(self.cfg, [w.pid for w in self.workers], self.run_dir)
        write_contention(self.out, self.contention.record())
        self.contention.update(0)
        self.follow()
        return self.collect()

    def follow(self) -> None:
        """Follows rank 0's progress, driving the contention schedule and `on_step`, until
        every worker has finished; LaunchError naming the parts that failed."""
        assert self.contention is not None
        rank0 = os.path.join(self.out, "rank-0.jsonl")
        position = 0
        step = 0
        while True:
            try:
                with open(rank0) as f:
                    f.seek(position)
                    for line in f:
                        if not line.endswith("\n"):
                            break
                        position += len(line)
                        rec = json.loads(line)
                        if "step" in rec:
                            step = rec["step"] + 1
                            self.contention.update(step)
            except FileNotFoundError:
                pass
            self.on_step(step)
            codes = [w.poll() for w in self.workers]
            if all(c == 0 for c in codes):
                return
            failed = [(name, p, logf) for name, p, logf in self.parts.procs
                      if p.poll() is not None and (p not in self.workers or p.returncode != 0)
                      and not (self.stopping.is_set() and p in self.workers)]
            if failed:
                raise LaunchError(describe_failures(failed))
            if self.stopping.is_set() and all(c is not None for c in codes):
                return
            time.sleep(0.05)

    def collect(self) -> list[RankRecords]:
        return load_ranks(self.out, self.cfg.world)

    def interrupt(self) -> None:
        """First Ctrl-C: workers stop together at the next step. Second: everything dies."""
        if self.stopping.is_set():
            self.parts.kill_all()
            return
        self.stopping.set()
        log(self.cfg, "stopping: workers finish their step (Ctrl-C again to kill)")
        for w in self.workers:
            if w.poll() is None:
                w.send_signal(signal.SIGTERM)

    def close(self) -> None:
        """Stops everything still running, in reverse start order, and removes what we made."""
        if self.contention:
            self.contention.close()
        for w in self.workers:  # workers first, then the agent, then the coordinator
            stop_process(w, timeout=15)
        self.parts.close()
        shutil.rmtree(self.run_dir, ignore_errors=True)


def run_job(cfg: JobConfig,
            on_step: Optional[Callable[[Job, int], Any]] = None) -> list[RankRecords]:
    """Runs one job to completion; returns per-rank step records. Raises LaunchError.
    on_step(job, step), if given, is called from the launcher's loop with the step reached."""
    job = Job(cfg)
    if on_step is not None:
        job.on_step = lambda step: on_step(job, step)  # type: ignore[method-assign]
    previous: dict[int, Any] = {}

    def on_signal(signum: int, frame: Any) -> None:
        job.interrupt()

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, on_signal)
    try:
        result = job.run()
        if job.stopping.is_set():
            raise KeyboardInterrupt
        return result
    finally:
        job.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
