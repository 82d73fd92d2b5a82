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

On a GPU (``--device cuda``, one rank on NCCL) it compares the Ballast layers with the
same layers in plain torch on the same GPU at a Llama-like shape by default (hidden 4096,
32 query heads in 8 KV groups, causal with RoPE, SwiGLU 11008, 4,096 tokens): plain torch
is ``nn.Linear``, ``F.scaled_dot_product_attention`` and SwiGLU, and ``--precision bf16``
runs Ballast's GEMMs in bf16 (``gemm_precision``) against plain torch under bf16
autocast. Times are CUDA-synchronized forward + backward per repeat, interleaved.

    scripts/bench torch_layer --device cuda [--precision bf16] [--repeats 21]

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


class PlainSwiGLU(nn.Module):
    def __init__(self, hidden: int, ffn: int) -> None:
        super().__init__()
        self.gate, self.up = nn.Linear(hidden, ffn), nn.Linear(hidden, ffn)
        self.down = nn.Linear(ffn, hidden)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class PlainGqa(nn.Module):
    """Causal grouped-query attention with RoPE on [s, b, h], by sdpa."""

    def __init__(self, hidden: int, heads: int, groups: int) -> None:
        super().__init__()
        self.heads, self.groups, self.d = heads, groups, hidden // heads
        self.q = nn.Linear(hidden, heads * self.d)
        self.k = nn.Linear(hidden, groups * self.d)
        self.v = nn.Linear(hidden, groups * self.d)
        self.proj = nn.Linear(heads * self.d, hidden)

    def forward(self, x):
        s, b, _ = x.shape

        def split(t, n):
            return t.view(s, b, n, self.d).permute(1, 2, 0, 3)

        inv = 10000.0 ** (-torch.arange(0, self.d // 2, device=x.device) * 2.0 / self.d)
        angle = torch.arange(s, device=x.device)[:, None] * inv[None, :]
        cos, sin = angle.cos(), angle.sin()

        def rope(t):
            a, c = t[..., :self.d // 2], t[..., self.d // 2:]
            return torch.cat([a * cos - c * sin, c * cos + a * sin], dim=-1)

        q, k = rope(split(self.q(x), self.heads)), rope(split(self.k(x), self.groups))
        v = split(self.v(x), self.groups)
        per = self.heads // self.groups
        k, v = k.repeat_interleave(per, dim=1), v.repeat_interleave(per, dim=1)
        ctx = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(ctx.permute(2, 0, 1, 3).reshape(s, b, -1))


def gpu_worker(rank: int, args, path: str) -> None:
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", init_method=f"file://{path}", rank=0, world_size=1)
    bt.init(job="bench-gpu", compute_device=dev, gemm_precision=args.precision)
    torch.manual_seed(0)
    h, s, b = args.hidden, args.seq, args.batch
    layers = {
        "mlp_swiglu": (bt.ParallelMLP(h, args.ffn, unit_size=64, activation="swiglu"),
                       PlainSwiGLU(h, args.ffn)),
        "attention_gqa": (bt.ParallelSelfAttention(h, args.heads, num_query_groups=args.groups,
                                                   causal=True, rotary=True),
                          PlainGqa(h, args.heads, args.groups)),
    }
    x = torch.randn(s, b, h, device=dev)
    dy = torch.randn(s, b, h, device=dev)
    autocast = args.precision == "bf16"
    for name, (ballast, plain) in layers.items():
        plain.to(dev)

        def run(layer, is_ballast: bool) -> float:
            torch.cuda.synchronize()
            start = time.perf_counter()
            with bt.step():
                with torch.autocast("cuda", dtype=torch.bfloat16,
                                    enabled=autocast and not is_ballast):
                    out = layer(x.detach().requires_grad_())
                    out = out[0] if is_ballast else out
                out.float().backward(dy)
            torch.cuda.synchronize()
            return time.perf_counter() - start

        ratios, times = [], {"ballast": [], "torch": []}
        for r in range(args.warmup + args.repeats):
            order = [("ballast", ballast), ("torch", plain)]
            if r % 2:
                order.reverse()
            got = {variant: run(layer, variant == "ballast") for variant, layer in order}
            ballast.zero_grad()
            plain.zero_grad()
            if r >= args.warmup:
                for variant, t in got.items():
                    times[variant].append(t)
                ratios.append(got["ballast"] / got["torch"])
        ratios.sort()
        print(json.dumps({
            "bench": "torch_layer", "layer": name, "device": torch.cuda.get_device_name(dev),
            "precision": args.precision, "hidden": h, "tokens": s * b, "repeats": args.repeats,
            "ballast_median_s": round(statistics.median(times["ballast"]), 6),
            "torch_median_s": round(statistics.median(times["torch"]), 6),
            "overhead_min": round(ratios[0] - 1, 4),
            "overhead_median": round(statistics.median(ratios) - 1, 4),
            "overhead_max": round(ratios[-1] - 1, 4),
            "target_overhead": 0.03}), flush=True)
    bt.shutdown()
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
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cuda: one rank on NCCL against plain torch on the GPU")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                   help="--device cuda: Ballast's GEMM precision (plain torch: autocast)")
    p.add_argument("--groups", type=int, default=8, help="--device cuda: KV groups")
    args = p.parse_args()
    if args.device == "cuda":
        # The Llama-like shape unless the shape was given.
        defaults = dict(hidden=768, heads=12, ffn=3072, seq=197, batch=4)
        llama = dict(hidden=4096, heads=32, ffn=11008, seq=4096, batch=1)
        for key, value in llama.items():
            if getattr(args, key) == defaults[key]:
                setattr(args, key, value)
        with tempfile.TemporaryDirectory() as tmp:
            mp.spawn(gpu_worker, args=(args, os.path.join(tmp, "rendezvous")), nprocs=1)
        return
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(args, os.path.join(tmp, "rendezvous")), nprocs=args.ranks)


if __name__ == "__main__":
    sys.exit(main())
