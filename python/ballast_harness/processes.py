"""The job's processes: started in their own sessions with their logs in one folder,
stopped in reverse start order, and never left behind.

Every part gets SIGTERM from the kernel when the launcher dies, even by SIGKILL
(`die_with_launcher`), and every part stops cleanly on SIGTERM. A part runs in its own
session, so a Ctrl-C reaches only the launcher, which stops the parts in order.

    parts = Processes(out_dir, threading.Event())
    proc = parts.start("coordinator", [binary(build, "coordinator", "ballast-coordinator")])
    wait_until(lambda: ready(), 20, "the coordinator", parts.procs, parts.stopping)
    parts.close()
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import threading
import time
from typing import Any, Callable, Iterable, Optional

from .config import LaunchError

# (name, process, log path) of one started part.
Part = tuple[str, subprocess.Popen, str]

_libc = ctypes.CDLL(None, use_errno=True)
_PR_SET_PDEATHSIG = 1


def die_with_launcher() -> None:
    """In a child before exec: get SIGTERM if the launcher dies, even by SIGKILL, so no part
    outlives it (every part stops cleanly on SIGTERM)."""
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def binary(build: str, *parts: str) -> str:
    """The path of a built executable in the build tree; LaunchError if it is not built."""
    path = os.path.join(build, *parts)
    if not os.access(path, os.X_OK):
        raise LaunchError(f"{path} not found: build first (scripts/demo does)")
    return path


def stop_process(proc: Optional[subprocess.Popen], timeout: float = 5.0) -> None:
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


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with {code}"


def tail(path: str, lines: int = 15) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def wait_until(predicate: Callable[[], bool], timeout: float, what: str,
               procs: Iterable[Part] = (), stopping: Optional[threading.Event] = None) -> None:
    """Polls `predicate` until it holds. LaunchError when one of `procs` exits first or
    `timeout` passes; KeyboardInterrupt when `stopping` is set."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if stopping is not None and stopping.is_set():
            raise KeyboardInterrupt
        for name, p, logf in procs:
            if p.poll() is not None:
                raise LaunchError(f"{name} {describe_exit(p.returncode)} while waiting for "
                                  f"{what}:\n{tail(logf)}")
        if predicate():
            return
        time.sleep(0.1)
    raise LaunchError(f"timed out after {timeout:.0f}s waiting for {what}")


def describe_failures(failed: list[Part]) -> str:
    """The failed parts, each with the tail of its log; one killed by a signal first (it is
    usually the cause; its peers fail after it)."""
    failed = sorted(failed, key=lambda f: f[1].returncode >= 0)
    return "\n".join(f"{name} {describe_exit(p.returncode)}:\n{tail(logf)}"
                     for name, p, logf in failed)


class Processes:
    """The parts of one job, in start order, each logging to <out>/<name>.log."""

    def __init__(self, out: str, stopping: threading.Event) -> None:
        self.out = out
        self.stopping = stopping
        self.procs: list[Part] = []
        # name -> (argv, to_terminal, Popen kwargs), for restarts
        self.commands: dict[str, tuple[list[str], bool, dict[str, Any]]] = {}

    def start(self, name: str, argv: list[str], to_terminal: bool = False, append: bool = False,
              **kwargs: Any) -> subprocess.Popen:
        """Starts a part with stderr (and stdout, unless to_terminal) in <out>/<name>.log."""
        if self.stopping.is_set():
            raise KeyboardInterrupt
        self.commands[name] = (argv, to_terminal, dict(kwargs))
        logf = os.path.join(self.out, f"{name}.log")
        handle = open(logf, "a" if append else "w")
        setup = kwargs.pop("preexec_fn", None)

        def preexec() -> None:
            die_with_launcher()
            if setup:
                setup()

        proc = subprocess.Popen(argv, stdout=None if to_terminal else handle, stderr=handle,
                                start_new_session=True, preexec_fn=preexec, **kwargs)
        handle.close()
        self.procs.append((name, proc, logf))
        return proc

    def kill_and_restart(self, name: str) -> subprocess.Popen:
        """SIGKILLs a running part and starts it again with the same command, its log
        appended, in its place in the stop order."""
        index = next(i for i, (n, _, _) in enumerate(self.procs) if n == name)
        proc = self.procs[index][1]
        proc.kill()
        proc.wait()
        argv, to_terminal, kwargs = self.commands[name]
        restarted = self.start(name, argv, to_terminal=to_terminal, append=True, **kwargs)
        self.procs[index] = self.procs.pop()
        return restarted

    def kill_all(self) -> None:
        for _, p, _ in self.procs:
            if p.poll() is None:
                p.kill()

    def close(self) -> None:
        """Stops every part still running, in reverse start order."""
        for _, p, _ in reversed(self.procs):
            stop_process(p)
