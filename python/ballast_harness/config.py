"""What a job is: its configuration, its stragglers' schedules, and the launcher's error.

The CLI (examples/vit/launch.py) and the benchmarks build a `JobConfig` and hand it to
`run_job` (job.py); nothing here starts a process.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

MODES = ("auto", "resize", "migrate", "observe", "off")
# The trainers, with the same flags and per-step records: the ViT in C++ on worker_lib's
# API and in PyTorch on ballast.torch (examples/torch/vit_train.py), a character-level GPT
# in PyTorch (examples/torch/gpt_train.py), and the same GPT with mixture-of-experts MLPs
# (8 experts, top-2). Each trainer's job name, for its policy; its script; and the flags it
# always gets (before the caller's trainer_args, which win).
TRAINERS = ("cpp", "torch", "gpt", "gpt-moe")
JOB_OF_TRAINER = {"cpp": "vit", "torch": "vit", "gpt": "gpt", "gpt-moe": "gpt-moe"}
TORCH_SCRIPT = {"torch": "vit_train.py", "gpt": "gpt_train.py", "gpt-moe": "gpt_train.py"}
TRAINER_FLAGS = {"gpt-moe": ["--job=gpt-moe", "--moe_experts=8", "--moe_topk=2"]}
# How a straggler is slowed (contention.py): auto = quota where cgroups are writable, else
# cotenant; quota = a co-tenant process plus a CPU quota; cotenant = a co-tenant alone;
# device = an emulated slower device, the rank's block compute only (CPU backend).
CONTENTION_KINDS = ("auto", "quota", "cotenant", "device")

# A step window: [first_step, end_step); end None = until the end of the run.
Window = tuple[int, Optional[int]]


class LaunchError(Exception):
    """A part of the job could not start or failed; the message names it."""


@dataclass
class Straggler:
    rank: int
    slowdown: float
    windows: list[Window] = field(default_factory=lambda: [(0, None)])

    def active(self, step: int) -> bool:
        return any(lo <= step and (hi is None or step < hi) for lo, hi in self.windows)

    @staticmethod
    def parse(text: str) -> Straggler:
        """RANK:SLOWDOWN[@START-[END][,START-[END]...]], e.g. 1:2, 1:2@150-, 1:3@100-200,300-400."""
        m = re.fullmatch(r"(\d+):([0-9.]+)(?:@(.+))?", text)
        if not m:
            raise ValueError(f"--straggler {text!r} is not RANK:SLOWDOWN[@START-[END],...]")
        rank, slowdown = int(m.group(1)), float(m.group(2))
        if not (1.0 < slowdown <= 16.0):
            raise ValueError(f"--straggler {text!r}: slowdown {slowdown} out of range (1, 16]")
        windows: list[Window] = []
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
    # Per step; None = the trainer's own default (the ViTs 64 images, the GPT 16 sequences
    # as 2 micro-batches of 8).
    batch: Optional[int] = None
    mode: str = "auto"
    stragglers: list[Straggler] = field(default_factory=list)
    contention: str = "auto"  # one of CONTENTION_KINDS
    # The CPU quota's period. A rank's throttled time lands where it runs out of quota; when
    # its block compute is under ~3 periods, that is mostly outside the compute, and the
    # compute timings the coordinator judges by barely show the slowdown (measured here
    # with a 3x quota: 1.0-1.2x at 8 ms of compute a step with 10 ms periods, 2x with 3 ms).
    quota_period_us: int = 10000
    out: str = ""  # keep per-rank metrics and logs here
    metrics_port: int = 0  # coordinator /metrics; 0 = a free port
    agent_metrics_port: int = 0
    trainer_args: list[str] = field(default_factory=list)
    policy: dict[str, str] = field(default_factory=dict)  # extra policy KEY=VALUE
    coordinator_flags: list[str] = field(default_factory=list)  # extra ballast-coordinator flags
    verbose: bool = True
    progress: str = "auto"
    trainer: str = "cpp"
    # rank -> (network namespace, address): the rank runs in that namespace (an emulated
    # node, e.g. tests/integration/shaped_link.sh's) with its Gloo transport on that address.
    netns: dict[int, tuple[str, str]] = field(default_factory=dict)
    backend: str = "cpu"  # cpu | cuda (C++ trainer; one process per GPU)


def parse_netns(specs: list[str], world: int, trainer: str) -> dict[int, tuple[str, str]]:
    """--netns RANK:NAMESPACE:ADDRESS values -> {rank: (namespace, address)}."""
    netns: dict[int, tuple[str, str]] = {}
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


def log(cfg: JobConfig, text: str) -> None:
    """One line for the operator, when the job is verbose."""
    if cfg.verbose:
        print(f"[launch] {text}", flush=True)
