"""What the PyTorch example trainers (vit_train.py, gpt_train.py) share: the flags that
examples/vit/launch.py passes to every trainer, process-group and Ballast setup, the
learning-rate schedule, the plan summary, progress output, per-step JSON records, the
agreed stop on SIGINT/SIGTERM, and checkpoints.

A trainer supplies its model and data, and calls these in its loop::

    a = parse(parser, argv, checks)       # trainer flags + common_flags()
    session = init(a)
    opt, sched, step, out = start_training(a, model, session)
    while step < a.steps and keep_going():
        ...forward, backward, opt.step()...
        out.step(step, wall, loss, lr, extra={...}, note="...")
    finish(a, out, model, opt, sched, step, evaluate)
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import signal
import socket
import sys
import time
from typing import Callable, Dict, List, Optional

import torch
import torch.distributed as dist
from torch import nn

import ballast.torch as bt

_stop_requested = False


def common_flags(p: argparse.ArgumentParser, job: str, steps: int, batch: int, lr: float,
                 warmup: int) -> None:
    """The flags every trainer takes (launch.py passes the first group)."""
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--world", type=int, default=1)
    p.add_argument("--rendezvous", required=True, help="fresh directory shared by all ranks")
    p.add_argument("--steps", type=int, default=steps)
    p.add_argument("--batch", type=int, default=batch)
    p.add_argument("--agent_socket", default="")
    p.add_argument("--node", default="")
    p.add_argument("--metrics_out", default="")
    p.add_argument("--progress", default="auto", choices=("auto", "bar", "lines", "none"))
    p.add_argument("--job", default=job)
    p.add_argument("--lr", type=float, default=lr, help="peak AdamW learning rate")
    p.add_argument("--warmup", type=int, default=warmup)
    p.add_argument("--weight_decay", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--priority", default="change",
                   choices=("change", "magnitude", "random", "round-robin"),
                   help="which units go first when pruning, until a plan carries the job's")
    p.add_argument("--checkpoint", default="")
    p.add_argument("--resume", action="store_true")
    p.add_argument("--log_every", type=int, default=25)
    p.add_argument("--collectives", default="torch", choices=("torch", "ballast"),
                   help="where the Ballast layers' collectives run (ballast.torch.init): on "
                        "the process group, or on Ballast's own Gloo mesh over its ranks")
    p.add_argument("--collective_timeout", type=float, default=60,
                   help="seconds a collective waits for a missing peer before failing")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                   help="where the model trains: cuda puts rank r on GPU r mod the GPUs, "
                        "over NCCL with a GPU per rank, else ranks share GPUs over Ballast's "
                        "host-staged collectives (a Gloo group)")


def parse(p: argparse.ArgumentParser, argv: List[str], checks: Callable[[argparse.Namespace],
          List[tuple]]) -> argparse.Namespace:
    """Parses argv; the common checks and the trainer's (ok, message) pairs name the flag."""
    a = p.parse_args(argv)
    common = [
        (1 <= a.world <= 64, f"--world={a.world} out of range [1, 64]"),
        (0 <= a.rank < a.world, f"--rank={a.rank} out of range [0, --world={a.world})"),
        (a.steps >= 1, f"--steps={a.steps} < 1"),
        (1 <= a.batch <= 4096, f"--batch={a.batch} out of range [1, 4096]"),
        (0 < a.lr < 1, f"--lr={a.lr} out of range (0, 1)"),
        (a.warmup >= 1, f"--warmup={a.warmup} < 1"),
        (0 <= a.weight_decay < 1, f"--weight_decay={a.weight_decay} out of range [0, 1)"),
        (not a.resume or a.checkpoint, "--resume needs --checkpoint"),
        (a.log_every >= 1, "--log_every must be >= 1"),
        (a.collective_timeout > 0, "--collective_timeout must be > 0"),
    ]
    for ok, message in common + checks(a):
        if not ok:
            p.error(message)
    return a


def init(a: argparse.Namespace) -> bt.Session:
    """The Gloo process group over the ranks, and the Ballast session on it."""
    # torch's FileStore waits for a missing directory forever; the C++ store makes it.
    os.makedirs(a.rendezvous, exist_ok=True)
    backend = "gloo"
    a.torch_device = torch.device("cpu")
    if a.device == "cuda":
        gpus = torch.cuda.device_count()
        if gpus == 0:
            raise SystemExit("--device=cuda: torch sees no CUDA device here")
        a.torch_device = torch.device("cuda", a.rank % gpus)
        torch.cuda.set_device(a.torch_device)
        backend = "nccl" if gpus >= a.world else "gloo"  # NCCL takes one rank per GPU
    dist.init_process_group(backend, init_method=f"file://{os.path.join(a.rendezvous, 'torch')}",
                            rank=a.rank, world_size=a.world,
                            timeout=datetime.timedelta(seconds=a.collective_timeout))
    torch.set_num_threads(1)
    node = a.node or socket.gethostname()
    if a.device == "cuda":
        return bt.init(job=a.job, group=f"{a.job}/tp0", agent_socket=a.agent_socket or None,
                       node=node, device=f"{node}/cuda{a.torch_device.index}",
                       compute_device=a.torch_device, timeout=a.collective_timeout)
    return bt.init(job=a.job, group=f"{a.job}/tp0", agent_socket=a.agent_socket or None,
                   node=node, device=f"{node}/cpu{a.rank}", collectives=a.collectives,
                   timeout=a.collective_timeout)


class PreNormLayer(nn.Module):
    """A pre-norm transformer layer around two Ballast blocks: the attention, and the MLP
    built with ``skip_bias_add=True`` (its bias joins the residual add)."""

    def __init__(self, hidden: int, attn: nn.Module, mlp: nn.Module) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(hidden)
        self.attn = attn
        self.ln2 = nn.LayerNorm(hidden)
        self.mlp = mlp

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h = h + self.attn(self.ln1(h))[0]
        out, bias = self.mlp(self.ln2(h))
        return h + out + bias


def param_groups(model: torch.nn.Module, weight_decay: float) -> List[dict]:
    """Weight decay on matrices (and Ballast's blocks, whose biases decay too), not on
    biases, norms and positions."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (decay if p.dim() == 2 or name.endswith("ballast_handle") else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def lr_schedule(a: argparse.Namespace) -> Callable[[int], float]:
    """Linear warm-up, then cosine decay to a tenth of the peak."""
    def factor(step: int) -> float:
        if step < a.warmup:
            return (step + 1) / a.warmup
        t = min(1.0, (step - a.warmup) / max(1, a.steps - a.warmup))
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t))
    return factor


def plan_view(blocks: list, session: bt.Session) -> dict:
    """The plan in force as fractions of all units, and units owned per rank."""
    total = sum(b.num_units for b in blocks)
    owned = [0] * session.size
    for b in blocks:
        for r in b.owner_of_unit:
            owned[r] += 1
    pruned = offloaded = 0
    for bp in session.applied_plan_blocks:
        pruned += sum(bp["pruned_units"])
        offloaded += sum(units for _, _, units in bp["offloads"])
    return {"pruned_fraction": pruned / total, "offloaded_fraction": offloaded / total,
            "owned_units": owned}


def describe(view: dict) -> str:
    units = ":".join(map(str, view["owned_units"]))
    if view["pruned_fraction"] == 0 and view["offloaded_fraction"] == 0:
        return f"all local, units {units}"
    return (f"pruned {100 * view['pruned_fraction']:.0f}% offloaded "
            f"{100 * view['offloaded_fraction']:.0f}%, units {units}")


class Reporter:
    """Progress on rank 0's terminal and the per-step JSON records launch.py reads."""

    def __init__(self, a: argparse.Namespace, blocks: list, session: bt.Session) -> None:
        self.a, self.blocks, self.session = a, blocks, session
        progress = a.progress if a.rank == 0 else "none"
        if progress == "auto":
            progress = "bar" if sys.stdout.isatty() else "lines"
        self.progress = progress
        self.metrics = open(a.metrics_out, "a") if a.metrics_out else None
        self.shown_version, self.view, self.ema, self.loss_ema = -1, None, 0.0, 0.0

    def event(self, text: str) -> None:
        if self.progress != "none":
            print(("\r\033[K" if self.progress == "bar" else "") + text, flush=True)

    def step(self, step: int, wall: float, loss: float, lr: float,
             extra: Optional[Dict[str, float]] = None, note: str = "") -> None:
        """One step's record; `extra` joins the JSON record, `note` the progress line."""
        a, session = self.a, self.session
        version, number = session.applied_version, session.applied_plan_number
        if version != self.shown_version:
            self.view = plan_view(self.blocks, session)
            if self.shown_version >= 0:
                self.event(f"step {step}: plan #{number} applied: {describe(self.view)}")
            self.shown_version = version
        self.ema = wall if self.ema == 0 else 0.9 * self.ema + 0.1 * wall
        self.loss_ema = loss if self.loss_ema == 0 else 0.95 * self.loss_ema + 0.05 * loss
        line = (f"{1e3 * self.ema:6.1f} ms/step  loss {self.loss_ema:.3f}  "
                f"{note + '  ' if note else ''}plan #{number}: {describe(self.view)}")
        if self.progress == "bar":
            filled = 24 * (step + 1) // a.steps
            print(f"\r[{'#' * filled}{'.' * (24 - filled)}] {step + 1:5d}/{a.steps}  {line}\033[K",
                  end="", flush=True)
        elif self.progress == "lines" and ((step + 1) % a.log_every == 0 or step + 1 == a.steps):
            print(f"step {step + 1:5d}/{a.steps}  {line}", flush=True)
        if self.metrics:
            t = session.last_step_timings
            units = sum(b["units_computed"] for b in t["blocks"])
            self.metrics.write(json.dumps({
                "rank": a.rank, "step": step, "time": time.time(), "wall_s": wall,
                "compute_s": t["compute_seconds"], "comm_s": t["comm_seconds"],
                "units_computed": units,
                "seconds_per_unit": t["compute_seconds"] / units if units else 0.0,
                "loss": loss, "lr": lr, "plan_version": version, "plan_number": number,
                **(extra or {}),
                **self.view}) + "\n")
            self.metrics.flush()

    def finish(self, final: dict) -> None:
        if self.progress == "bar":
            print()
        if self.metrics:
            self.metrics.write(json.dumps({"rank": self.a.rank, "final": True, **final}) + "\n")
            self.metrics.close()
        stats = self.session.agent_stats
        if stats:
            self.event(f"agent: {stats['reports_sent']} reports sent, "
                       f"{stats['reports_dropped']} dropped, {stats['plans_received']} plans "
                       f"received")


def start_training(a: argparse.Namespace, model: nn.Module, session: bt.Session):
    """The optimizer (``bt.AdamW``, decay on matrices), the warm-up + cosine schedule, the
    step to start at (after ``--resume``) and the Reporter over the model's Ballast layers
    (``model.layers[i].attn`` and ``.mlp``)."""
    opt = bt.AdamW(param_groups(model, a.weight_decay), lr=a.lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_schedule(a))
    start = load_checkpoint(a, model, opt, sched)
    blocks = [m for layer in model.layers for m in (layer.attn, layer.mlp)]
    return opt, sched, start, Reporter(a, blocks, session)


def keep_going() -> bool:
    """Collective: ranks leave together, by a min-reduce of "keep going" every step."""
    flag = torch.tensor([0.0 if _stop_requested else 1.0])
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return flag.item() != 0


def load_checkpoint(a: argparse.Namespace, model, opt, sched) -> int:
    """The step to start at: 0, or the checkpoint's after --resume."""
    if not (a.resume and a.checkpoint and os.path.exists(a.checkpoint)):
        return 0
    state = torch.load(a.checkpoint)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    sched.load_state_dict(state["scheduler"])
    return state["step"]


def save_checkpoint(a: argparse.Namespace, model, opt, sched, step: int) -> None:
    """Collective (the Ballast layers gather their dense state); rank 0 writes it."""
    state = {"model": model.state_dict(), "optimizer": opt.state_dict(),
             "scheduler": sched.state_dict(), "step": step}
    if a.rank == 0:
        torch.save(state, a.checkpoint + ".tmp")
        os.replace(a.checkpoint + ".tmp", a.checkpoint)


def finish(a: argparse.Namespace, out: Reporter, model, opt, sched, step: int,
           evaluate: Callable[[], dict]) -> None:
    """The end of a run: the checkpoint (if asked), the evaluation (unless stopped early,
    `evaluate` reports and returns the final record's figures), the final record, and the
    process group's teardown."""
    interrupted = step < a.steps
    if a.checkpoint:
        save_checkpoint(a, model, opt, sched, step)
        out.event(f"checkpoint at step {step} written to {a.checkpoint}")
    final = {"steps": step, "interrupted": interrupted}
    if interrupted:
        out.event(f"stopped after {step} steps")
    else:
        final.update(evaluate())
    out.finish(final)
    dist.barrier()
    dist.destroy_process_group()


def main(name: str, parse_args: Callable[[List[str]], argparse.Namespace],
         train: Callable[[argparse.Namespace], None]) -> int:
    """Runs `train` with the agreed stop on SIGINT/SIGTERM; errors become exit status 1."""
    a = parse_args(sys.argv[1:])

    def on_signal(signum, frame):
        global _stop_requested
        _stop_requested = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        train(a)
    except (ValueError, RuntimeError, OSError) as e:
        print(f"{name} rank {a.rank}: {e}", file=sys.stderr)
        return 1
    return 0
