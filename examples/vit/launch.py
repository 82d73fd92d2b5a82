#!/usr/bin/python3
"""Runs the ViT job under Ballast on this machine, with real contention.

Starts a coordinator, an agent and one vit_train process per rank on loopback, pins rank
r to CPU core r, and slows the chosen ranks down with the machine itself: a co-tenant
process (examples/vit/cotenant.cc) competes for the rank's core, and where cgroups are
writable the rank is also held to a CPU quota of 1/slowdown of its core (detected;
otherwise the co-tenant's nice value sets the share). Contention follows a schedule in
training steps: from the start, from a step on, or on and off.

Everything it starts is stopped at the end, when any part fails, and on Ctrl-C / SIGTERM
(workers first, so they stop at the same step and write their checkpoint), and the run
directory, cgroups and sockets are removed.

  launch.py --build build --mode auto --straggler 1:2            # the demo
  launch.py --build build --mode off --straggler 1:2@100-300 --out /tmp/run-b
  launch.py --build build --trainer torch --straggler 1:2@100-   # the PyTorch trainer
  launch.py --build build --netns 0:nodea:10.213.0.1 --netns 1:nodeb:10.213.0.2 ...
                                            # ranks on emulated nodes (namespaces made before)

Used as a module by bench/e2e.py (run_job).
"""

import argparse
import ctypes
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

MODES = ("auto", "resize", "migrate", "observe", "off")
# The trainers, with the same flags and per-step records: the ViT in C++ on worker_lib's
# API and in PyTorch on ballast.torch (examples/torch/vit_train.py), and a character-level
# GPT in PyTorch (examples/torch/gpt_train.py). Each trainer's job name, for its policy.
TRAINERS = ("cpp", "torch", "gpt")
JOB_OF_TRAINER = {"cpp": "vit", "torch": "vit", "gpt": "gpt"}
TORCH_SCRIPT = {"torch": "vit_train.py", "gpt": "gpt_train.py"}
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class LaunchError(Exception):
    """A part of the job could not start or failed; the message names it."""


@dataclass
class Straggler:
    rank: int
    slowdown: float
    # (first_step, end_step) windows; end None = until the end of the run.
    windows: list = field(default_factory=lambda: [(0, None)])

    def active(self, step):
        return any(lo <= step and (hi is None or step < hi) for lo, hi in self.windows)

    @staticmethod
    def parse(text):
        """RANK:SLOWDOWN[@START-[END][,START-[END]...]], e.g. 1:2, 1:2@150-, 1:3@100-200,300-400."""
        m = re.fullmatch(r"(\d+):([0-9.]+)(?:@(.+))?", text)
        if not m:
            raise ValueError(f"--straggler {text!r} is not RANK:SLOWDOWN[@START-[END],...]")
        rank, slowdown = int(m.group(1)), float(m.group(2))
        if not (1.0 < slowdown <= 16.0):
            raise ValueError(f"--straggler {text!r}: slowdown {slowdown} out of range (1, 16]")
        windows = []
        for part in (m.group(3) or "0-").split(","):
            w = re.fullmatch(r"(\d+)-(\d*)", part)
            if not w:
                raise ValueError(f"--straggler {text!r}: window {part!r} is not START-[END]")
            lo, hi = int(w.group(1)), (int(w.group(2)) if w.group(2) else None)
            if hi is not None and hi <= lo:
                raise ValueError(f"--straggler {text!r}: window {part!r} ends before it starts")
            windows.append((lo, hi))
        return Straggler(rank, slowdown, windows)


@dataclass
class JobConfig:
    build: str
    world: int = 2
    steps: int = 700
    batch: int = 64
    mode: str = "auto"
    stragglers: list = field(default_factory=list)
    contention: str = "auto"  # auto | quota | cotenant
    # The CPU quota's period. A rank's throttled time lands where it runs out of quota; when
    # its block compute is under ~3 periods, that is mostly outside the compute, and the
    # compute timings the coordinator judges by barely show the slowdown (measured here
    # with a 3x quota: 1.0-1.2x at 8 ms of compute a step with 10 ms periods, 2x with 3 ms).
    quota_period_us: int = 10000
    out: str = ""  # keep per-rank metrics and logs here
    metrics_port: int = 0  # coordinator /metrics; 0 = a free port
    agent_metrics_port: int = 0
    trainer_args: list = field(default_factory=list)
    policy: dict = field(default_factory=dict)  # extra policy KEY=VALUE
    coordinator_flags: list = field(default_factory=list)  # extra ballast-coordinator flags
    verbose: bool = True
    progress: str = "auto"
    trainer: str = "cpp"
    # rank -> (network namespace, address): the rank runs in that namespace (an emulated
    # node, e.g. tests/integration/shaped_link.sh's) with its Gloo transport on that address.
    netns: dict = field(default_factory=dict)
    backend: str = "cpu"  # cpu | cuda (C++ trainer; one process per GPU)


_libc = ctypes.CDLL(None, use_errno=True)
_PR_SET_PDEATHSIG = 1


def die_with_launcher():
    """In a child before exec: get SIGTERM if the launcher dies, even by SIGKILL, so no part
    outlives it (every part stops cleanly on SIGTERM)."""
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def log(cfg, text):
    if cfg.verbose:
        print(f"[launch] {text}", flush=True)


# --- Contention -------------------------------------------------------------------------


class CgroupQuota:
    """CPU quota for one process via cgroup v2 (cpu.max) or v1 (cpu.cfs_quota_us).

    Short periods (JobConfig.quota_period_us) throttle the rank smoothly, not in 100 ms
    gulps. The kernel's smallest quota is 1 ms: a share below 1 ms / period gets 1 ms."""

    MIN_QUOTA_US = 1000

    def __init__(self, name, period_us=10000):
        self.period_us = period_us
        self.path = None
        self.version = None
        v2 = "/sys/fs/cgroup"
        v1 = "/sys/fs/cgroup/cpu"
        try:
            if os.path.exists(os.path.join(v2, "cgroup.controllers")):
                controllers = open(os.path.join(v2, "cgroup.subtree_control")).read()
                if "cpu" in controllers.split():
                    self.path, self.version = os.path.join(v2, name), 2
            elif os.path.exists(os.path.join(v1, "cpu.cfs_quota_us")):
                self.path, self.version = os.path.join(v1, name), 1
            if self.path:
                os.makedirs(self.path, exist_ok=True)
                self.set_share(None)  # probe that we may write
        except OSError:
            self.remove()
            self.path = None

    @property
    def available(self):
        return self.path is not None

    def set_share(self, share):
        """share of one core in (0, 1], or None for no limit."""
        if self.version == 2:
            quota = "max" if share is None else str(self._quota_us(share))
            self._write("cpu.max", f"{quota} {self.period_us}")
        else:
            self._write("cpu.cfs_period_us", str(self.period_us))
            quota = -1 if share is None else self._quota_us(share)
            self._write("cpu.cfs_quota_us", str(quota))

    def _quota_us(self, share):
        return max(self.MIN_QUOTA_US, int(self.period_us * share))

    def add(self, pid):
        self._write("cgroup.procs", str(pid))

    def _write(self, name, value):
        with open(os.path.join(self.path, name), "w") as f:
            f.write(value)

    def remove(self):
        if not self.path:
            return
        # Move anything left back to the parent, then remove the group.
        parent = os.path.dirname(self.path)
        try:
            for pid in open(os.path.join(self.path, "cgroup.procs")).read().split():
                try:
                    with open(os.path.join(parent, "cgroup.procs"), "w") as f:
                        f.write(pid)
                except OSError:
                    pass
            os.rmdir(self.path)
        except OSError:
            pass


class Contention:
    """Applies the stragglers' schedules as training advances (driven by rank 0's steps)."""

    def __init__(self, cfg, worker_pids):
        self.cfg = cfg
        self.worker_pids = worker_pids
        self.cotenants = {}  # rank -> Popen
        self.quotas = {}
        self.mechanism = "cotenant (nice)"
        self.cotenant_bin = os.path.join(cfg.build, "examples", "cotenant")
        if cfg.contention in ("auto", "quota") and cfg.stragglers:
            for s in cfg.stragglers:
                # Below the kernel's least quota (1 ms) the slowdown would be less.
                period = max(cfg.quota_period_us, math.ceil(CgroupQuota.MIN_QUOTA_US * s.slowdown))
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
                self.mechanism = f"co-tenant + cgroup v{self.quotas[cfg.stragglers[0].rank].version} quota"
            else:
                for q in self.quotas.values():
                    q.remove()
                self.quotas = {}

    def update(self, step):
        for s in self.cfg.stragglers:
            on = s.active(step)
            if on and s.rank not in self.cotenants:
                self._start(s, step)
            elif not on and s.rank in self.cotenants:
                self._stop(s, step)

    def _start(self, s, step):
        core = s.rank % os.cpu_count()
        # Without a quota, CFS splits the core by weight: nice n weighs ~1024 / 1.25^n, so
        # the rank keeps 1/slowdown of it when the co-tenant weighs (slowdown - 1) as much.
        nice = 0 if s.slowdown == 2 else round(-math.log(s.slowdown - 1) / math.log(1.25))
        nice = max(-20, min(19, nice))

        def pin():
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

    def _stop(self, s, step):
        proc = self.cotenants.pop(s.rank)
        stop_process(proc)
        if s.rank in self.quotas:
            self.quotas[s.rank].set_share(None)
        log(self.cfg, f"step {step}: contention OFF - rank {s.rank} has its core back")

    def close(self):
        for rank in list(self.cotenants):
            stop_process(self.cotenants.pop(rank))
        for q in self.quotas.values():
            q.remove()
        self.quotas = {}


# --- Processes --------------------------------------------------------------------------


def stop_process(proc, timeout=5.0):
    """SIGTERM, then SIGKILL after `timeout`; always reaps."""
    if proc is None or proc.poll() is not None:
        return
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    except ProcessLookupError:
        pass


def describe_exit(code):
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with {code}"


def tail(path, lines=15):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def wait_until(predicate, timeout, what, procs=(), stopping=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if stopping is not None and stopping.is_set():
            raise KeyboardInterrupt
        for name, p, logf in procs:
            if p.poll() is not None:
                raise LaunchError(f"{name} {describe_exit(p.returncode)} while waiting for {what}:\n"
                                  f"{tail(logf)}")
        if predicate():
            return
        time.sleep(0.1)
    raise LaunchError(f"timed out after {timeout:.0f}s waiting for {what}")


class Job:
    def __init__(self, cfg):
        self.cfg = cfg
        self.procs = []  # (name, Popen, log path), in start order
        self.commands = {}  # name -> (argv, to_terminal, Popen kwargs), for restarts
        self.workers = []
        self.contention = None
        self.run_dir = tempfile.mkdtemp(prefix="ballast-vit-")
        self.out = cfg.out or self.run_dir
        os.makedirs(self.out, exist_ok=True)
        self.stopping = threading.Event()
        self.coordinator_addr = f"127.0.0.1:{free_port()}"
        self.metrics_port = cfg.metrics_port or free_port()
        self.agent_metrics_port = cfg.agent_metrics_port or free_port()
        self.socket = os.path.join(self.run_dir, "agent.sock")

    def binary(self, *parts):
        path = os.path.join(self.cfg.build, *parts)
        if not os.access(path, os.X_OK):
            raise LaunchError(f"{path} not found: build first (scripts/demo does)")
        return path

    def start(self, name, argv, to_terminal=False, append=False, **kwargs):
        """Starts a part with stderr (and stdout, unless to_terminal) in <out>/<name>.log."""
        if self.stopping.is_set():
            raise KeyboardInterrupt
        self.commands[name] = (argv, to_terminal, dict(kwargs))
        logf = os.path.join(self.out, f"{name}.log")
        handle = open(logf, "a" if append else "w")
        # Own session: a Ctrl-C reaches only the launcher, which stops the parts in order.
        setup = kwargs.pop("preexec_fn", None)

        def preexec():
            die_with_launcher()
            if setup:
                setup()

        proc = subprocess.Popen(argv, stdout=None if to_terminal else handle, stderr=handle,
                                start_new_session=True, preexec_fn=preexec, **kwargs)
        handle.close()
        self.procs.append((name, proc, logf))
        return proc

    def kill_and_restart(self, name):
        """SIGKILLs a running part (the coordinator, the agent) and starts it again with the
        same command, its log appended, in its place in the stop order. For chaos runs."""
        index = next(i for i, (n, _, _) in enumerate(self.procs) if n == name)
        proc = self.procs[index][1]
        proc.kill()
        proc.wait()
        argv, to_terminal, kwargs = self.commands[name]
        self.start(name, argv, to_terminal=to_terminal, append=True, **kwargs)
        self.procs[index] = self.procs.pop()

    def on_step(self, step):
        """Called as rank 0 advances (step = steps done); a subclass hooks in here."""

    def trainer(self):
        """The trainer's command (without its flags) and environment."""
        if self.cfg.trainer == "cpp":
            return [self.binary("examples", "vit_train")], None
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

    def ctl(self, *args):
        ctl = self.binary("ctl", "ballastctl")
        return subprocess.run([ctl, f"--coordinator={self.coordinator_addr}", *args],
                              capture_output=True, text=True, timeout=15)

    def run(self):
        cfg = self.cfg
        coordinator = self.binary("coordinator", "ballast-coordinator")
        agent = self.binary("agent", "ballast-agent")
        trainer, trainer_env = self.trainer()
        self.start("coordinator", [coordinator, f"--listen={self.coordinator_addr}",
                                   f"--metrics=127.0.0.1:{self.metrics_port}",
                                   f"--store={os.path.join(self.run_dir, 'coordinator.db')}",
                                   *cfg.coordinator_flags])
        wait_until(lambda: self.ctl("status").returncode == 0, 20, "the coordinator",
                   self.procs, self.stopping)
        # Steps here take ~0.2 s: with the default one decision per second a new straggler
        # would cost 5+ steps before the first plan, so decide four times a second.
        policy = {"mode": cfg.mode, "report_period_ms": "250", **cfg.policy}
        # The job starts below: its policy is set ahead, which ballastctl must be told.
        r = self.ctl("--preconfigure", "policy", "set", JOB_OF_TRAINER[cfg.trainer],
                     *[f"{k}={v}" for k, v in policy.items()])
        if r.returncode != 0:
            raise LaunchError(f"ballastctl policy set failed: {r.stderr.strip()}")
        self.start("agent", [agent, f"--coordinator={self.coordinator_addr}",
                             f"--socket={self.socket}", "--node=demo",
                             f"--metrics=127.0.0.1:{self.agent_metrics_port}"])
        wait_until(lambda: os.path.exists(self.socket), 20, "the agent's socket", self.procs,
                   self.stopping)
        log(cfg, f"coordinator {self.coordinator_addr}, metrics http://127.0.0.1:"
                 f"{self.metrics_port}/metrics; agent metrics http://127.0.0.1:"
                 f"{self.agent_metrics_port}/metrics; policy mode={cfg.mode}")

        rendezvous = os.path.join(self.run_dir, "rendezvous")
        ncpu = os.cpu_count()
        for r in range(cfg.world):
            metrics = os.path.join(self.out, f"rank-{r}.jsonl")
            if os.path.exists(metrics):
                os.remove(metrics)
            argv = ["vit_train", f"--rank={r}", f"--world={cfg.world}", f"--rendezvous={rendezvous}",
                    f"--steps={cfg.steps}", f"--batch={cfg.batch}", "--node=demo",
                    f"--agent_socket={self.socket}", f"--metrics_out={metrics}",
                    f"--progress={cfg.progress if r == 0 else 'none'}",
                    *([f"--backend={cfg.backend}"] if cfg.backend != "cpu" else []),
                    *cfg.trainer_args]
            command = trainer + argv[1:]
            if r in cfg.netns:  # `ip netns exec` execs: the pid is still the trainer's
                namespace, address = cfg.netns[r]
                command = ["ip", "netns", "exec", namespace, *command,
                           f"--gloo_host={address}", f"--node={namespace}"]
            core = r % ncpu
            # One process per GPU: the CUDA backend takes its device from LOCAL_RANK.
            rank_env = dict(trainer_env if trainer_env is not None else os.environ,
                            LOCAL_RANK=str(r))
            proc = self.start(f"rank-{r}", command, to_terminal=(r == 0 and cfg.verbose),
                              preexec_fn=lambda core=core: os.sched_setaffinity(0, {core}),
                              env=rank_env)
            self.workers.append(proc)
        self.contention = Contention(cfg, [w.pid for w in self.workers])
        self.contention.update(0)

        rank0 = os.path.join(self.out, "rank-0.jsonl")
        position = 0
        step = 0
        while True:
            # Follow rank 0's progress to drive the contention schedule.
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
                break
            failed = [(name, p, logf) for name, p, logf in self.procs
                      if p.poll() is not None and (p not in self.workers or p.returncode != 0)
                      and not (self.stopping.is_set() and p in self.workers)]
            if failed:
                # A part killed by a signal is usually the cause; its peers fail after it.
                failed.sort(key=lambda f: f[1].returncode >= 0)
                raise LaunchError("\n".join(f"{name} {describe_exit(p.returncode)}:\n{tail(logf)}"
                                             for name, p, logf in failed))
            if self.stopping.is_set() and all(c is not None for c in codes):
                break
            time.sleep(0.05)
        return self.collect()

    def collect(self):
        return Job.load(self.out, self.cfg.world)

    @staticmethod
    def load(out, world):
        """Per-rank step records and final record from a run's --out directory."""
        ranks = []
        for r in range(world):
            steps, final = [], None
            with open(os.path.join(out, f"rank-{r}.jsonl")) as f:
                for line in f:
                    rec = json.loads(line)
                    if rec.get("final"):
                        final = rec
                    else:
                        steps.append(rec)
            ranks.append({"steps": steps, "final": final})
        return ranks

    def interrupt(self):
        """First Ctrl-C: workers stop together at the next step. Second: everything dies."""
        if self.stopping.is_set():
            for _, p, _ in self.procs:
                if p.poll() is None:
                    p.kill()
            return
        self.stopping.set()
        log(self.cfg, "stopping: workers finish their step (Ctrl-C again to kill)")
        for w in self.workers:
            if w.poll() is None:
                w.send_signal(signal.SIGTERM)

    def close(self):
        """Stops everything still running, in reverse start order, and removes what we made."""
        if self.contention:
            self.contention.close()
        for w in self.workers:  # workers first, then the agent, then the coordinator
            stop_process(w, timeout=15)
        for _, p, _ in reversed(self.procs):
            stop_process(p)
        shutil.rmtree(self.run_dir, ignore_errors=True)


def run_job(cfg, on_step=None):
    """Runs one job to completion; returns per-rank step records. Raises LaunchError.
    on_step(job, step), if given, is called from the launcher's loop with the step reached."""
    job = Job(cfg)
    if on_step is not None:
        job.on_step = lambda step: on_step(job, step)
    previous = {}

    def on_signal(signum, frame):
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


# --- Summary ----------------------------------------------------------------------------


def median(values):
    values = sorted(values)
    if not values:
        return float("nan")
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else 0.5 * (values[mid - 1] + values[mid])


def summarize(cfg, ranks):
    """Step-time phases for the demo: before contention, contended before the first plan,
    and contended under Ballast's plan; plus the final accuracy."""
    steps = ranks[0]["steps"]
    contended = lambda s: any(st.active(s) for st in cfg.stragglers)
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
        print(f"  no contention                     {1e3 * median(calm):7.1f} ms  ({len(calm)} steps)")
    if before:
        print(f"  contention, before rebalancing    {1e3 * median(before):7.1f} ms  ({len(before)} steps)")
    if after:
        last = steps[-1]
        print(f"  contention, under Ballast's plan  {1e3 * median(after):7.1f} ms  ({len(after)} steps; "
              f"plan at step {first_plan}: pruned {100 * last['pruned_fraction']:.0f}%, "
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


def parse_netns(specs, world, trainer):
    """--netns RANK:NAMESPACE:ADDRESS values -> {rank: (namespace, address)}."""
    netns = {}
    for spec in specs:
        parts = spec.split(":")
        if len(parts) != 3 or not parts[0].isdigit() or not parts[1] or not parts[2]:
            raise ValueError(f"--netns {spec!r}: expected RANK:NAMESPACE:ADDRESS")
        rank = int(parts[0])
        if not 0 <= rank < world or rank in netns:
            raise ValueError(f"--netns rank {rank} out of range [0, {world}) or given twice")
        netns[rank] = (parts[1], parts[2])
    if netns and trainer != "cpp":
        raise ValueError("--netns needs --trainer cpp (the PyTorch trainers bind Gloo to loopback)")
    return netns


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build", help="CMake build directory with the binaries")
    p.add_argument("--world", type=int, default=2, help="TP ranks (processes)")
    p.add_argument("--steps", type=int, default=700)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--mode", choices=MODES, default="auto", help="Ballast's balancing mode")
    p.add_argument("--trainer", choices=TRAINERS, default="cpp",
                   help="cpp: examples/vit/vit_train; torch: examples/torch/vit_train.py; "
                        "gpt: examples/torch/gpt_train.py")
    p.add_argument("--straggler", action="append", default=[], metavar="RANK:SLOWDOWN[@START-END,...]",
                   help="slow RANK down SLOWDOWN times during the step windows (default: whole run)")
    p.add_argument("--contention", choices=("auto", "quota", "cotenant"), default="auto")
    p.add_argument("--quota-period-us", type=int, default=JobConfig.quota_period_us,
                   help="the CPU quota's period (1000-1000000; shorter shows the slowdown in "
                        "shorter compute, see JobConfig; raised where 1/SLOWDOWN of it would "
                        "be under the kernel's 1 ms least quota)")
    p.add_argument("--out", default="", help="keep per-rank metrics (JSONL) and logs here")
    p.add_argument("--metrics-port", type=int, default=0)
    p.add_argument("--agent-metrics-port", type=int, default=0)
    p.add_argument("--policy", action="append", default=[], metavar="KEY=VALUE",
                   help="extra policy settings (see ballastctl policy set)")
    p.add_argument("--coordinator-flag", action="append", default=[], metavar="--FLAG=VALUE",
                   help="extra ballast-coordinator flag, e.g. --coordinator-flag=--fixed_costs=false")
    p.add_argument("--progress", default="auto", choices=("auto", "bar", "lines", "none"))
    p.add_argument("--netns", action="append", default=[], metavar="RANK:NAMESPACE:ADDRESS",
                   help="run RANK in an existing network namespace, its Gloo transport on "
                        "ADDRESS (C++ trainer only)")
    p.add_argument("--backend", choices=("cpu", "cuda"), default="cpu",
                   help="cuda: one process per GPU, rank r on the GPU of LOCAL_RANK=r (C++ "
                        "trainer only; --straggler throttles CPU time, not a GPU)")
    p.add_argument("trainer_args", nargs="*", help="extra vit_train flags (after --)")
    a = p.parse_args(argv)
    try:
        stragglers = [Straggler.parse(s) for s in a.straggler]
        for s in stragglers:
            if not 0 <= s.rank < a.world:
                raise ValueError(f"--straggler rank {s.rank} out of range [0, {a.world})")
        policy = dict(kv.split("=", 1) for kv in a.policy if "=" in kv)
        if len(policy) != len(a.policy):
            raise ValueError("--policy takes KEY=VALUE")
        for flag in a.coordinator_flag:
            if not flag.startswith("--"):
                raise ValueError(f"--coordinator-flag {flag!r} must start with --")
        if a.world < 1 or a.steps < 1:
            raise ValueError("--world and --steps must be >= 1")
        if not 1000 <= a.quota_period_us <= 1000000:  # the kernel's cfs_period_us range
            raise ValueError(f"--quota-period-us {a.quota_period_us} out of range [1000, 1000000]")
        netns = parse_netns(a.netns, a.world, a.trainer)
        if a.backend == "cuda" and a.trainer != "cpp":
            raise ValueError("--backend cuda needs --trainer cpp")
    except ValueError as e:
        print(f"launch.py: {e}", file=sys.stderr)
        return 2
    cfg = JobConfig(build=a.build, world=a.world, steps=a.steps, batch=a.batch, mode=a.mode,
                    stragglers=stragglers, contention=a.contention,
                    quota_period_us=a.quota_period_us, out=a.out,
                    metrics_port=a.metrics_port, agent_metrics_port=a.agent_metrics_port,
                    trainer_args=a.trainer_args, policy=policy, progress=a.progress,
                    trainer=a.trainer, netns=netns, backend=a.backend,
                    coordinator_flags=a.coordinator_flag)
    try:
        ranks = run_job(cfg)
    except LaunchError as e:
        print(f"launch.py: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("launch.py: interrupted; everything it started has been stopped", file=sys.stderr)
        return 130
    summarize(cfg, ranks)
    return 0


if __name__ == "__main__":
    sys.exit(main())
