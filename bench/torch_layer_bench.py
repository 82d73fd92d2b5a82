"""ballast.torch layers with an empty plan vs plain Megatron-style TP in torch ops.

Same group (torch.distributed Gloo, one process per rank), same shapes (ViT-Base by
default: hidden 768, 12 heads, MLP 3072, 197 tokens), same input. The plain layers are
Megatron's column-parallel / row-parallel pair written in torch ops, with the all-reduce
of the output in forward and of the input gradient in backward. Each repeat times the
forward + backward of every variant, in alternating order (interleaved, so drift on a
shared machine hits both), as the slowest rank's time; the ratio is taken per repeat
and reported as min / median / max. One JSON object per line on stdout.

    scripts/bench torch_layer [--ranks 2] [--batch 4] [--repeats 21] [--collectives ballast]

With ``--collectives torch`` (the default) both variants all-reduce on the process group
itself, so the ratio is the layers' own overhead; with ``ballast`` the Ballast layers use
Ballast's own mesh over the same ranks.

A last line times gradient clipping's norm over ``--clip_layers`` small decoder layers
(the GPT example's: hidden 128, 8 heads, SwiGLU 384; an attention and an MLP block
each): one all-reduce for every block (``clip_grad_norm_``) against one per block (each
block's own ``grad_squared_norm``, what clipping did before), interleaved the same way.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one core per rank, as in the tests

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import ballast.torch as bt  # noqa: E402


class _ReduceForward(torch.autograd.Function):  # Megatron's g: all-reduce, then identity
    @staticmethod
    def forward(ctx, x):
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, dy):
        return dy


class _ReduceBackward(torch.autograd.Function):  # Megatron's f: identity, then all-reduce
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, dy):
        dy = dy.clone()
        dist.all_reduce(dy)
        return dy


class PlainMLP(nn.Module):
    def __init__(self, hidden: int, ffn: int, size: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(hidden, ffn // size)
        self.fc2 = nn.Linear(ffn // size, hidden, bias=False)
        self.bias = nn.Parameter(torch.zeros(hidden))

    def forward(self, x):  # [s, b, h]
        h = F.gelu(self.fc1(_ReduceBackward.apply(x)), approximate="tanh")
        return _ReduceForward.apply(self.fc2(h)) + self.bias


class PlainAttention(nn.Module):
    def __init__(self, hidden: int, heads: int, size: int) -> None:
        super().__init__()
        self.heads, self.d = heads // size, hidden // heads
        self.qkv = nn.Linear(hidden, 3 * self.heads * self.d)
        self.proj = nn.Linear(self.heads * self.d, hidden, bias=False)
        self.bias = nn.Parameter(torch.zeros(hidden))

    def forward(self, x):  # [s, b, h]
        s, b, _ = x.shape
        qkv = self.qkv(_ReduceBackward.apply(x)).view(s, b, self.heads, 3, self.d)
        q, k, v = (qkv[:, :, :, i].permute(1, 2, 0, 3) for i in range(3))
        p = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(self.d), dim=-1)
        ctx = (p @ v).permute(2, 0, 1, 3).reshape(s, b, -1)
        return _ReduceForward.apply(self.proj(ctx)) + self.bias


def timed_call(call) -> float:
    dist.barrier()
    start = time.perf_counter()
    call()
    elapsed = torch.tensor([time.perf_counter() - start])
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # the group runs at its slowest rank
    return elapsed.item()


def timed(layer, x, dy, ballast: bool) -> float:
    def forward_backward() -> None:
        out = layer(x.detach().requires_grad_())
        (out[0] if ballast else out).backward(dy)
    return timed_call(forward_backward)


def clip_norms(args) -> dict:
    """One collective for all blocks' norm vs one per block; both give the same norm."""
    torch.manual_seed(1)
    layers = []
    for _ in range(args.clip_layers):
        layers += [bt.ParallelSelfAttention(128, 8, num_query_groups=4, causal=True,
                                            rotary=True),
                   bt.ParallelMLP(128, 384, unit_size=32, activation="swiglu")]
    x = torch.randn(128, 2, 128)
    times = {"one": [], "per_block": []}
    with bt.step():  # the norms read this step's gradients
        for layer in layers:
            out = layer(x)[0]
            out.backward(torch.ones_like(out))
        blocks = [layer._block for layer in layers]
        variants = {"one": lambda: bt._C.group_grad_squared_norm(blocks),
                    "per_block": lambda: sum(b.grad_squared_norm() for b in blocks)}
        one, per_block = variants["one"](), variants["per_block"]()
        assert math.isclose(one, per_block, rel_tol=1e-5), (one, per_block)
        for r in range(args.warmup + args.repeats):
            order = ["one", "per_block"] if r % 2 == 0 else ["per_block", "one"]
            got = {name: timed_call(variants[name]) for name in order}
            if r >= args.warmup:
                for name, t in got.items():
                    times[name].append(t)
    ratios = sorted(a / b for a, b in zip(times["one"], times["per_block"]))
    return {"bench": "torch_layer", "layer": "clip_norm", "collectives": args.collectives,
            "ranks": args.ranks, "blocks": len(layers), "repeats": args.repeats,
            "one_collective_median_s": round(statistics.median(times["one"]), 6),
            "per_block_median_s": round(statistics.median(times["per_block"]), 6),
            "ratio_min": round(ratios[0], 3), "ratio_median": round(statistics.median(ratios), 3),
            "ratio_max": round(ratios[-1], 3)}


def worker(rank: int, args, path: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank,
                            world_size=args.ranks)
    bt.init(job="bench", collectives=args.collectives)
    torch.manual_seed(0)
    h, s, b = args.hidden, args.seq, args.batch
    layers = {
        "mlp": (bt.ParallelMLP(h, args.ffn), PlainMLP(h, args.ffn, args.ranks)),
        "attention": (bt.ParallelSelfAttention(h, args.heads),
                      PlainAttention(h, args.heads, args.ranks)),
    }
    x = torch.randn(s, b, h)
    dy = torch.randn(s, b, h)
    for name, (ballast, plain) in layers.items():
        ratios, times = [], {"ballast": [], "torch": []}
        for r in range(args.warmup + args.repeats):
            order = [("ballast", ballast), ("torch", plain)]
            if r % 2:
                order.reverse()
            got = {}
            for variant, layer in order:
                with bt.step():  # one plan agreement per step, amortised over the layers
                    got[variant] = timed(layer, x, dy, variant == "ballast")
            if r >= args.warmup:
                for variant, t in got.items():
                    times[variant].append(t)
                ratios.append(got["ballast"] / got["torch"])
        if rank == 0:
            ratios.sort()
            print(json.dumps({
                "bench": "torch_layer", "layer": name, "collectives": args.collectives,
                "ranks": args.ranks, "hidden": h,
                "tokens": s * b, "repeats": args.repeats,
                "ballast_median_s": round(statistics.median(times["ballast"]), 5),
                "torch_median_s": round(statistics.median(times["torch"]), 5),
                "overhead_min": round(ratios[0] - 1, 4),
                "overhead_median": round(statistics.median(ratios) - 1, 4),
                "overhead_max": round(ratios[-1] - 1, 4),
                "agreement_s": round(bt.session().last_step_timings["agreement_seconds"], 6),
            }), flush=True)
    if args.clip_layers > 0:
        line = clip_norms(args)
        if rank == 0:
            print(json.dumps(line), flush=True)
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--hidden", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--ffn", type=int, default=3072)
    p.add_argument("--seq", type=int, default=197)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--repeats", type=int, default=21)
    p.add_argument("--collectives", choices=("torch", "ballast"), default="torch",
                   help="where the Ballast layers' collectives run (ballast.torch.init)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--clip_layers", type=int, default=4,
                   help="decoder layers whose gradient norm is timed (0: none)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(args, os.path.join(tmp, "rendezvous")), nprocs=args.ranks)


if __name__ == "__main__":
    sys.exit(main())
