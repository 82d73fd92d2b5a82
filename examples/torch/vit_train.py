#!/usr/bin/python3
"""vit_train.py: one rank of a tensor-parallel ViT on Fashion-MNIST, written in PyTorch
with Ballast's layers (ballast.torch). It is the C++ example (examples/vit/vit_train.cc)
as a PyTorch user would write it: torch modules for the embedding, LayerNorms and head,
ParallelSelfAttention and ParallelMLP for the TP blocks, ballast.torch.AdamW with two
param groups (weight decay on matrices only) and a LambdaLR warm-up + cosine schedule.

Same flags and the same per-step JSON records as the C++ trainer, so examples/vit/launch.py
runs it (``--trainer torch``) under the same contention, and bench/e2e.py measures it:

  launch.py --build build --trainer torch --straggler 1:2@100-

Every rank reads the same data in the same order. With --agent_socket, timings go to the
node's agent and plans come back; without it the run is plain TP. SIGINT/SIGTERM stop all
ranks at the same step (agreed by an all-reduce), after writing the checkpoint if asked.
"""
from __future__ import annotations

import argparse
import datetime
import gzip
import json
import math
import os
import signal
import socket
import sys
import time
from typing import List, Tuple

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one core per rank

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import ballast.torch as bt  # noqa: E402

PIXEL_MEAN, PIXEL_STD = 0.2860, 0.3530  # Fashion-MNIST, of value / 255
_stop_requested = False


def load_idx(path: str) -> np.ndarray:
    """One IDX file (gzip or plain); errors name the file and what is wrong."""
    for candidate in (path + ".gz", path):
        if os.path.exists(candidate):
            opener = gzip.open if candidate.endswith(".gz") else open
            with opener(candidate, "rb") as f:
                data = f.read()
            break
    else:
        raise FileNotFoundError(f"{path}[.gz] not found (apt-get install dataset-fashion-mnist)")
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 8:
        raise ValueError(f"{candidate}: not an IDX file of unsigned bytes")
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims)
    if body.size != math.prod(shape):
        raise ValueError(f"{candidate}: {body.size} bytes of data, shape {shape} needs "
                         f"{math.prod(shape)}")
    return body.reshape(shape)


def load_split(data_dir: str, prefix: str) -> Tuple[torch.Tensor, torch.Tensor]:
    images = load_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte"))
    labels = load_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte"))
    if images.shape[0] != labels.shape[0]:
        raise ValueError(f"{prefix}: {images.shape[0]} images but {labels.shape[0]} labels")
    return torch.from_numpy(images.copy()), torch.from_numpy(labels.astype(np.int64))


class Layer(nn.Module):
    """Pre-norm transformer layer; the attention and the MLP are Ballast's TP blocks."""

    def __init__(self, a) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(a.hidden)
        self.attn = bt.ParallelSelfAttention(a.hidden, a.heads, batch_first=True, seed=a.seed,
                                             priority=a.priority)
        self.ln2 = nn.LayerNorm(a.hidden)
        self.mlp = bt.ParallelMLP(a.hidden, 4 * a.hidden, unit_size=a.mlp_unit_size,
                                  batch_first=True, skip_bias_add=True, seed=a.seed,
                                  priority=a.priority)

    def forward(self, h: torch.Tensor) -> torch.Tensor:  # [b, s, h]
        h = h + self.attn(self.ln1(h))[0]
        out, bias = self.mlp(self.ln2(h))
        return h + out + bias


class ViT(nn.Module):
    """Patches -> linear embedding + positions -> layers -> LayerNorm -> mean -> classes."""

    def __init__(self, a) -> None:
        super().__init__()
        torch.manual_seed(a.seed)  # replicated parameters start alike on every rank
        self.patch = a.patch
        tokens, pixels = (28 // a.patch) ** 2, a.patch * a.patch
        self.embed = nn.Linear(pixels, a.hidden)
        self.pos = nn.Parameter(torch.randn(tokens, a.hidden).clamp_(-2, 2) * 0.02)
        self.layers = nn.ModuleList(Layer(a) for _ in range(a.layers))
        self.norm = nn.LayerNorm(a.hidden)
        self.head = nn.Linear(a.hidden, 10)

    def forward(self, images: torch.Tensor) -> torch.Tensor:  # uint8 [b, 28, 28]
        x = (images.float() / 255 - PIXEL_MEAN) / PIXEL_STD
        b, p = x.shape[0], self.patch
        x = x.view(b, 28 // p, p, 28 // p, p).permute(0, 1, 3, 2, 4).reshape(b, -1, p * p)
        h = self.embed(x) + self.pos
        for layer in self.layers:
            h = layer(h)
        return self.head(self.norm(h).mean(1))


def param_groups(model: ViT, weight_decay: float):
    """Weight decay on matrices (and Ballast's blocks, whose biases decay too), not on
    biases, LayerNorms and positions: the C++ example's choice."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (decay if p.dim() == 2 or name.endswith("ballast_handle") else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def plan_view(model: ViT, session: bt.Session) -> dict:
    blocks = [m for layer in model.layers for m in (layer.attn, layer.mlp)]
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


@torch.no_grad()
def evaluate(model: ViT, images: torch.Tensor, labels: torch.Tensor, batch: int):
    correct, loss = 0, 0.0
    for first in range(0, len(images), batch):
        x, y = images[first:first + batch], labels[first:first + batch]
        logits = model(x)
        loss += F.cross_entropy(logits, y, reduction="sum").item()
        correct += (logits.argmax(1) == y).sum().item()
    bt.end_step()  # evaluation is a step of its own
    return correct / len(images), loss / len(images)


def train(a) -> None:
    # torch's FileStore waits for a missing directory forever; the C++ store makes it.
    os.makedirs(a.rendezvous, exist_ok=True)
    dist.init_process_group("gloo", init_method=f"file://{os.path.join(a.rendezvous, 'torch')}",
                            rank=a.rank, world_size=a.world,
                            timeout=datetime.timedelta(seconds=a.collective_timeout))
    torch.set_num_threads(1)
    node = a.node or socket.gethostname()
    session = bt.init(job=a.job, group=f"{a.job}/tp0", agent_socket=a.agent_socket or None,
                      node=node, device=f"{node}/cpu{a.rank}",
                      collectives=a.collectives,
                      timeout=a.collective_timeout)
    train_x, train_y = load_split(a.data_dir, "train")
    test_x, test_y = load_split(a.data_dir, "t10k")
    test_x, test_y = test_x[:a.eval_images], test_y[:a.eval_images]

    model = ViT(a)
    opt = bt.AdamW(param_groups(model, a.weight_decay), lr=a.lr)

    def lr_factor(step: int) -> float:  # linear warm-up, cosine decay to a tenth
        if step < a.warmup:
            return (step + 1) / a.warmup
        t = min(1.0, (step - a.warmup) / max(1, a.steps - a.warmup))
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor)
    start = 0
    if a.resume and a.checkpoint and os.path.exists(a.checkpoint):
        state = torch.load(a.checkpoint)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        start = state["step"]

    leader = a.rank == 0
    progress = a.progress if leader else "none"
    if progress == "auto":
        progress = "bar" if sys.stdout.isatty() else "lines"

    def event(text: str) -> None:
        if progress != "none":
            print(("\r\033[K" if progress == "bar" else "") + text, flush=True)

    event(f"ViT (PyTorch + ballast.torch) {a.layers} layers x {a.hidden} wide, {a.heads} heads, "
          f"{a.mlp_unit_size}-neuron MLP units; {a.world} ranks; batch {a.batch}; "
          f"{'balanced by Ballast' if a.agent_socket else 'plain TP (no agent)'}"
          f"{f'; resumed at step {start}' if start else ''}")
    metrics = open(a.metrics_out, "a") if a.metrics_out else None
    generator = torch.Generator()
    order, epoch = None, -1
    shown_version, view, ema, loss_ema = -1, None, 0.0, 0.0
    stop = torch.ones(1)
    step = start
    while step < a.steps:
        # Ranks leave together: a min-reduce of "keep going" at every step.
        stop.fill_(0.0 if _stop_requested else 1.0)
        dist.all_reduce(stop, op=dist.ReduceOp.MIN)
        if stop.item() == 0:
            break
        begin = time.perf_counter()
        positions = torch.arange(step * a.batch, (step + 1) * a.batch)
        if positions[-1] // len(train_x) != epoch or order is None:  # a seeded order per epoch
            epoch = int(positions[0] // len(train_x))
            generator.manual_seed(a.seed * 1000003 + epoch)
            order = torch.randperm(len(train_x), generator=generator)
        index = order[positions % len(train_x)]
        x, y = train_x[index], train_y[index]
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        loss.backward()
        lr = opt.param_groups[0]["lr"]
        opt.step()
        opt.zero_grad(set_to_none=True)
        sched.step()
        wall = time.perf_counter() - begin

        version = session.applied_version
        if version != shown_version:
            view = plan_view(model, session)
            if shown_version >= 0:
                event(f"step {step}: plan v{version % 100000} applied: {describe(view)}")
            shown_version = version
        ema = wall if ema == 0 else 0.9 * ema + 0.1 * wall
        loss_ema = loss.item() if loss_ema == 0 else 0.95 * loss_ema + 0.05 * loss.item()
        if progress == "bar":
            filled = 24 * (step + 1) // a.steps
            print(f"\r[{'#' * filled}{'.' * (24 - filled)}] {step + 1:5d}/{a.steps}  "
                  f"{1e3 * ema:6.1f} ms/step  loss {loss_ema:.3f}  plan v{version % 100000}: "
                  f"{describe(view)}\033[K", end="", flush=True)
        elif progress == "lines" and ((step + 1) % a.log_every == 0 or step + 1 == a.steps):
            print(f"step {step + 1:5d}/{a.steps}  {1e3 * ema:6.1f} ms/step  loss {loss_ema:.3f}  "
                  f"plan v{version % 100000}: {describe(view)}", flush=True)
        if metrics:
            t = session.last_step_timings
            units = sum(b["units_computed"] for b in t["blocks"])
            metrics.write(json.dumps({
                "rank": a.rank, "step": step, "time": time.time(), "wall_s": wall,
                "compute_s": t["compute_seconds"], "comm_s": t["comm_seconds"],
                "units_computed": units,
                "seconds_per_unit": t["compute_seconds"] / units if units else 0.0,
                "loss": loss.item(),
                "batch_accuracy": (logits.argmax(1) == y).float().mean().item(), "lr": lr,
                "plan_version": version, **view}) + "\n")
            metrics.flush()
        step += 1
    if progress == "bar":
        print()
    interrupted = step < a.steps
    if a.checkpoint:
        # Collective (the Ballast layers gather their dense state); every rank writes the
        # same content, rank 0 keeps it.
        state = {"model": model.state_dict(), "optimizer": opt.state_dict(),
                 "scheduler": sched.state_dict(), "step": step}
        if leader:
            torch.save(state, a.checkpoint + ".tmp")
            os.replace(a.checkpoint + ".tmp", a.checkpoint)
        event(f"checkpoint at step {step} written to {a.checkpoint}")
    final = {"rank": a.rank, "final": True, "steps": step, "interrupted": interrupted}
    if interrupted:
        event(f"stopped after {step} steps")
    else:
        accuracy, test_loss = evaluate(model, test_x, test_y, 250)
        event(f"finished {step} steps: test accuracy {100 * accuracy:.2f}% on {len(test_x)} "
              f"images (loss {test_loss:.3f})")
        final.update(test_accuracy=accuracy, test_loss=test_loss, test_images=len(test_x))
    if metrics:
        metrics.write(json.dumps(final) + "\n")
        metrics.close()
    stats = session.agent_stats
    if stats:
        event(f"agent: {stats['reports_sent']} reports sent, {stats['reports_dropped']} dropped, "
              f"{stats['plans_received']} plans received")
    dist.barrier()
    dist.destroy_process_group()


def parse(argv: List[str]):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--world", type=int, default=1)
    p.add_argument("--rendezvous", required=True, help="fresh directory shared by all ranks")
    p.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=2e-3, help="peak AdamW learning rate")
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--weight_decay", type=float, default=0.05)
    p.add_argument("--patch", type=int, default=7)
    p.add_argument("--hidden", type=int, default=192)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--mlp_unit_size", type=int, default=32)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--priority", default="change",
                   choices=("change", "magnitude", "random", "round-robin"))
    p.add_argument("--eval_images", type=int, default=10000)
    p.add_argument("--checkpoint", default="")
    p.add_argument("--resume", action="store_true")
    p.add_argument("--agent_socket", default="")
    p.add_argument("--job", default="vit")
    p.add_argument("--node", default="")
    p.add_argument("--metrics_out", default="")
    p.add_argument("--progress", default="auto", choices=("auto", "bar", "lines", "none"))
    p.add_argument("--log_every", type=int, default=25)
    p.add_argument("--collectives", default="torch", choices=("torch", "ballast"),
                   help="where the Ballast layers' collectives run (ballast.torch.init): on "
                        "the process group, or on Ballast's own Gloo mesh over its ranks")
    p.add_argument("--collective_timeout", type=float, default=60,
                   help="seconds a collective waits for a missing peer before failing")
    a = p.parse_args(argv)
    checks = [
        (1 <= a.world <= 64, f"--world={a.world} out of range [1, 64]"),
        (0 <= a.rank < a.world, f"--rank={a.rank} out of range [0, --world={a.world})"),
        (a.steps >= 1, f"--steps={a.steps} < 1"),
        (1 <= a.batch <= 4096, f"--batch={a.batch} out of range [1, 4096]"),
        (0 < a.lr < 1, f"--lr={a.lr} out of range (0, 1)"),
        (a.warmup >= 1, f"--warmup={a.warmup} < 1"),
        (0 <= a.weight_decay < 1, f"--weight_decay={a.weight_decay} out of range [0, 1)"),
        (a.patch > 0 and 28 % a.patch == 0, f"--patch={a.patch} must divide 28"),
        (a.eval_images >= 1, "--eval_images must be >= 1"),
        (not a.resume or a.checkpoint, "--resume needs --checkpoint"),
        (a.log_every >= 1, "--log_every must be >= 1"),
        (a.collective_timeout > 0, "--collective_timeout must be > 0"),
    ]
    for ok, message in checks:
        if not ok:
            p.error(message)
    return a


def main(argv: List[str]) -> int:
    a = parse(argv)

    def on_signal(signum, frame):
        global _stop_requested
        _stop_requested = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        train(a)
    except (ValueError, RuntimeError, OSError) as e:
        print(f"vit_train.py rank {a.rank}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
