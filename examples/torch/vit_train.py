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
import gzip
import math
import os
import sys
import time
from typing import List, Tuple

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one core per rank

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import ballast.torch as bt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import training  # noqa: E402

PIXEL_MEAN, PIXEL_STD = 0.2860, 0.3530  # Fashion-MNIST, of value / 255


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


def layer(a) -> training.PreNormLayer:
    """A pre-norm transformer layer; the attention and the MLP are Ballast's TP blocks."""
    return training.PreNormLayer(
        a.hidden,
        bt.ParallelSelfAttention(a.hidden, a.heads, batch_first=True, seed=a.seed,
                                 priority=a.priority),
        bt.ParallelMLP(a.hidden, 4 * a.hidden, unit_size=a.mlp_unit_size, batch_first=True,
                       skip_bias_add=True, seed=a.seed, priority=a.priority))


class ViT(nn.Module):
    """Patches -> linear embedding + positions -> layers -> LayerNorm -> mean -> classes."""

    def __init__(self, a) -> None:
        super().__init__()
        torch.manual_seed(a.seed)  # replicated parameters start alike on every rank
        self.patch = a.patch
        tokens, pixels = (28 // a.patch) ** 2, a.patch * a.patch
        self.embed = nn.Linear(pixels, a.hidden)
        self.pos = nn.Parameter(torch.randn(tokens, a.hidden).clamp_(-2, 2) * 0.02)
        self.layers = nn.ModuleList(layer(a) for _ in range(a.layers))
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
    session = training.init(a)
    train_x, train_y = load_split(a.data_dir, "train")
    test_x, test_y = load_split(a.data_dir, "t10k")
    test_x, test_y = test_x[:a.eval_images], test_y[:a.eval_images]

    model = ViT(a)
    opt, sched, start, out = training.start_training(a, model, session)
    out.event(f"ViT (PyTorch + ballast.torch) {a.layers} layers x {a.hidden} wide, {a.heads} "
              f"heads, {a.mlp_unit_size}-neuron MLP units; {a.world} ranks; batch {a.batch}; "
              f"{'balanced by Ballast' if a.agent_socket else 'plain TP (no agent)'}"
              f"{f'; resumed at step {start}' if start else ''}")
    generator = torch.Generator()
    order, epoch = None, -1
    step = start
    while step < a.steps and training.keep_going():
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
        out.step(step, time.perf_counter() - begin, loss.item(), lr, {
            "batch_accuracy": (logits.argmax(1) == y).float().mean().item()})
        step += 1
    def evaluate_all() -> dict:
        accuracy, test_loss = evaluate(model, test_x, test_y, 250)
        out.event(f"finished {step} steps: test accuracy {100 * accuracy:.2f}% on "
                  f"{len(test_x)} images (loss {test_loss:.3f})")
        return dict(test_accuracy=accuracy, test_loss=test_loss, test_images=len(test_x))

    training.finish(a, out, model, opt, sched, step, evaluate_all)


def parse(argv: List[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    training.common_flags(p, job="vit", steps=600, batch=64, lr=2e-3, warmup=50)
    p.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--patch", type=int, default=7)
    p.add_argument("--hidden", type=int, default=192)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--mlp_unit_size", type=int, default=32)
    p.add_argument("--eval_images", type=int, default=10000)
    return training.parse(p, argv, lambda a: [
        (a.patch > 0 and 28 % a.patch == 0, f"--patch={a.patch} must divide 28"),
        (a.eval_images >= 1, "--eval_images must be >= 1"),
    ])


if __name__ == "__main__":
    sys.exit(training.main("vit_train.py", parse, train))
