#!/usr/bin/python3
"""gpt_train.py: one rank of a tensor-parallel character-level GPT, written in PyTorch with
Ballast's decoder blocks (ballast.torch): causal grouped-query attention with RoPE and a
SwiGLU MLP, trained with micro-batches (gradient accumulation) on the English text of
Debian's `fortunes` package, held-out validation loss as the quality figure.

It speaks launch.py's trainer protocol (the same flags and per-step JSON records as
vit_train.py), so the launcher runs it under real contention and bench/e2e.py measures
it::

  examples/vit/launch.py --build build --trainer gpt --straggler 1:2 --steps 400
  examples/vit/launch.py --build build --trainer gpt-moe ...   # 8 experts, top-2

With ``--moe_experts E`` every decoder layer's MLP is a mixture of E SwiGLU experts
(``ballast.torch.ParallelMoE``, top-``--moe_topk`` routing, the Switch load-balancing loss
at ``--moe_aux_coeff``); the experts are the block's units, which Ballast's plans move,
offload and prune as they do the dense MLP's columns.

With ``--device cuda`` the same model trains on GPUs (scripts/gpu-check compares its
losses with the CPU's).

The corpus is every plain-text fortune file, in name order, as bytes (non-ASCII bytes map
to '?'); the last 5% is held out for validation. Every rank reads the same batches.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from typing import List, Tuple

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one core per rank

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import ballast.torch as bt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import training  # noqa: E402

VOCAB = 128  # ASCII


def load_corpus(data_dir: str) -> torch.Tensor:
    """Every plain-text fortune file under data_dir (not the .dat/.u8 indexes), as ASCII
    codes; errors say what to install."""
    if not os.path.isdir(data_dir):
        raise FileNotFoundError(f"{data_dir} not found (apt-get install fortunes)")
    parts = []
    for name in sorted(os.listdir(data_dir)):
        path = os.path.join(data_dir, name)
        if name.endswith((".dat", ".u8")) or os.path.islink(path) or not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            parts.append(f.read())
    text = b"".join(parts)
    if len(text) < 100_000:
        raise ValueError(f"{data_dir}: only {len(text)} bytes of text; the fortunes package "
                         f"has a few MB (apt-get install fortunes)")
    codes = torch.frombuffer(bytearray(text), dtype=torch.uint8).long()
    return torch.where(codes < VOCAB, codes, torch.full_like(codes, ord("?")))


def moe_ffn(a) -> int:
    """Each expert's SwiGLU size: --moe_ffn, else --ffn / --moe_topk rounded up, so that a
    token's top-k experts cost what the dense MLP does (the same step time, with E/k times
    the MLP parameters)."""
    return a.moe_ffn or -(-a.ffn // a.moe_topk)


def decoder_layer(a) -> training.PreNormLayer:
    """A pre-norm decoder layer; attention and MLP (dense, or a mixture of experts) are
    Ballast's TP blocks."""
    if a.moe_experts:
        mlp = bt.ParallelMoE(a.hidden, moe_ffn(a), a.moe_experts, moe_router_topk=a.moe_topk,
                             moe_aux_loss_coeff=a.moe_aux_coeff, recompute=a.recompute,
                             batch_first=True, skip_bias_add=True, seed=a.seed,
                             priority=a.priority)
    else:
        mlp = bt.ParallelMLP(a.hidden, a.ffn, unit_size=a.mlp_unit_size, activation="swiglu",
                             recompute=a.recompute, batch_first=True, skip_bias_add=True,
                             seed=a.seed, priority=a.priority)
    return training.PreNormLayer(
        a.hidden,
        bt.ParallelSelfAttention(a.hidden, a.heads, num_query_groups=a.kv_groups, causal=True,
                                 rotary=True, recompute=a.recompute, batch_first=True,
                                 seed=a.seed, priority=a.priority),
        mlp)


class GPT(nn.Module):
    """Characters -> embedding -> decoder layers (RoPE inside attention) -> norm -> logits."""

    def __init__(self, a) -> None:
        super().__init__()
        torch.manual_seed(a.seed)  # replicated parameters start alike on every rank
        self.embed = nn.Embedding(VOCAB, a.hidden)
        nn.init.normal_(self.embed.weight, std=0.02)
        self.layers = nn.ModuleList(decoder_layer(a) for _ in range(a.layers))
        self.norm = nn.LayerNorm(a.hidden)
        self.head = nn.Linear(a.hidden, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:  # [b, s] -> [b, s, vocab]
        h = self.embed(tokens)
        for layer in self.layers:
            h = layer(h)
        return self.head(self.norm(h))


def batch_at(corpus: torch.Tensor, starts: torch.Tensor, seq: int) -> Tuple[torch.Tensor,
                                                                            torch.Tensor]:
    """Inputs and next-character targets for windows starting at `starts`."""
    index = starts[:, None] + torch.arange(seq + 1)[None, :]
    window = corpus[index]
    return window[:, :-1], window[:, 1:]


@torch.no_grad()
def validate(model: GPT, corpus: torch.Tensor, a) -> Tuple[float, float]:
    """Mean loss (nats per character) and next-character accuracy on --val_windows evenly
    spaced windows of the held-out text; the same windows every run."""
    last = len(corpus) - a.seq - 1
    starts = torch.linspace(0, last, a.val_windows).long()
    loss, correct, count = 0.0, 0, 0
    for first in range(0, len(starts), a.micro_batch):
        x, y = (t.to(a.torch_device) for t in batch_at(
            corpus, starts[first:first + a.micro_batch], a.seq))
        logits = model(x)
        loss += F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1), reduction="sum").item()
        correct += (logits.argmax(-1) == y).sum().item()
        count += y.numel()
    bt.end_step()  # validation is a step of its own
    return loss / count, correct / count


def train(a) -> None:
    session = training.init(a)
    corpus = load_corpus(a.data_dir)
    split = int(0.95 * len(corpus))
    train_text, val_text = corpus[:split], corpus[split:]

    model = GPT(a).to(a.torch_device)
    opt, sched, start, out = training.start_training(a, model, session)
    micro_batches = a.batch // a.micro_batch
    moes = [layer.mlp for layer in model.layers] if a.moe_experts else []
    for moe in moes:  # the main loss is averaged over the micro-batches; so is the aux loss
        moe.set_aux_loss_scale(1.0 / micro_batches)
    mlp = (f"{a.moe_experts} SwiGLU experts of {moe_ffn(a)}, top-{a.moe_topk}, aux loss "
           f"x{a.moe_aux_coeff:g}" if a.moe_experts else f"SwiGLU {a.ffn}")
    out.event(f"GPT (PyTorch + ballast.torch) {a.layers} layers x {a.hidden} wide, {a.heads} "
              f"heads in {a.kv_groups} KV groups, {mlp}; {len(train_text) / 1e6:.1f} "
              f"MB of fortunes; {a.world} ranks; {micro_batches} micro-batches of "
              f"{a.micro_batch} x {a.seq} characters{'; recompute' if a.recompute else ''}; "
              f"{'balanced by Ballast' if a.agent_socket else 'plain TP (no agent)'}"
              f"{f'; resumed at step {start}' if start else ''}")
    generator = torch.Generator()
    aux_ema = load_ema = 0.0
    step = start
    while step < a.steps and training.keep_going():
        begin = time.perf_counter()
        generator.manual_seed(a.seed * 1000003 + step)  # the same windows on every rank
        starts = torch.randint(0, len(train_text) - a.seq - 1, (a.batch,), generator=generator)
        total, aux = 0.0, 0.0
        routed = [0] * a.moe_experts  # the last layer's tokens per expert over the step
        # (token, expert) pairs over every MoE layer, and those a capacity cap dropped: the
        # same on every rank (routing is replicated, the cap applied before any split).
        pairs, dropped = 0, 0
        for i in range(micro_batches):  # forward and backward per micro-batch; grads add up
            x, y = (t.to(a.torch_device) for t in batch_at(
                train_text, starts[i * a.micro_batch:(i + 1) * a.micro_batch], a.seq))
            # The MoE blocks add their aux loss's gradient themselves: not part of `loss`.
            loss = F.cross_entropy(model(x).reshape(-1, VOCAB), y.reshape(-1)) / micro_batches
            loss.backward()
            total += loss.item()
            if moes:
                aux += sum(m.aux_loss for m in moes) / (len(moes) * micro_batches)
                routed = [r + t for r, t in zip(routed, moes[-1].tokens_per_expert)]
                pairs += sum(sum(m.tokens_per_expert) for m in moes)
                dropped += sum(m.dropped_tokens for m in moes)
        bt.clip_grad_norm_(model.parameters(), 1.0)
        lr = opt.param_groups[0]["lr"]
        opt.step()
        opt.zero_grad(set_to_none=True)
        sched.step()
        extra, note = None, ""
        if moes:
            # Load imbalance: the busiest expert's tokens over the mean (1 = even).
            load = max(routed) * a.moe_experts / max(sum(routed), 1)
            extra = {"aux_loss": aux, "expert_load_ratio": load,
                     "dropped_fraction": dropped / max(pairs, 1)}
            # Smoothed as the loss on the log line is.
            aux_ema = aux if aux_ema == 0 else 0.95 * aux_ema + 0.05 * aux
            load_ema = load if load_ema == 0 else 0.95 * load_ema + 0.05 * load
            note = f"aux {aux_ema:.4f}  experts max/mean {load_ema:.2f}"
            if dropped:
                note += f"  dropped {100 * dropped / max(pairs, 1):.1f}%"
        out.step(step, time.perf_counter() - begin, total, lr, extra=extra, note=note)
        step += 1
    def validate_all() -> dict:
        val_loss, accuracy = validate(model, val_text, a)
        out.event(f"finished {step} steps: validation loss {val_loss:.3f} nats/char, "
                  f"next-character accuracy {100 * accuracy:.2f}% on {a.val_windows} windows")
        # test_* are the names launch.py and bench/e2e.py report for every trainer.
        return dict(val_loss=val_loss, test_loss=val_loss, test_accuracy=accuracy)

    training.finish(a, out, model, opt, sched, step, validate_all)


def parse(argv: List[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    training.common_flags(p, job="gpt", steps=400, batch=16, lr=3e-3, warmup=30)
    p.add_argument("--data_dir", default="/usr/share/games/fortunes")
    p.add_argument("--seq", type=int, default=128, help="characters per sequence")
    p.add_argument("--micro_batch", type=int, default=8,
                   help="sequences per micro-batch; --batch / --micro_batch micro-batches "
                        "accumulate into each optimizer step")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv_groups", type=int, default=4, help="K/V heads (GQA groups)")
    p.add_argument("--ffn", type=int, default=384, help="SwiGLU intermediate size")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--mlp_unit_size", type=int, default=32)
    p.add_argument("--recompute", action="store_true",
                   help="recompute the blocks' activations in backward instead of keeping them")
    p.add_argument("--val_windows", type=int, default=256)
    p.add_argument("--moe_experts", type=int, default=0,
                   help="experts per MoE MLP (ballast.torch.ParallelMoE); 0 = the dense "
                        "SwiGLU MLP")
    p.add_argument("--moe_topk", type=int, default=2, help="experts each token is routed to")
    p.add_argument("--moe_aux_coeff", type=float, default=0.01,
                   help="the load-balancing (aux) loss's coefficient; 0 = none")
    p.add_argument("--moe_ffn", type=int, default=0,
                   help="each expert's SwiGLU intermediate size (default: --ffn / --moe_topk "
                        "rounded up: a token's experts then cost what the dense MLP does)")
    return training.parse(p, argv, lambda a: [
        (2 <= a.seq <= 4096, f"--seq={a.seq} out of range [2, 4096]"),
        (a.micro_batch >= 1 and a.batch % a.micro_batch == 0,
         f"--micro_batch={a.micro_batch} must divide --batch={a.batch}"),
        (a.heads >= 1 and a.hidden % a.heads == 0,
         f"--hidden={a.hidden} must be a multiple of --heads={a.heads}"),
        (a.kv_groups >= 1 and a.heads % a.kv_groups == 0,
         f"--kv_groups={a.kv_groups} must divide --heads={a.heads}"),
        ((a.hidden // max(a.heads, 1)) % 2 == 0, "--hidden / --heads must be even for RoPE"),
        (a.mlp_unit_size >= 1 and a.ffn % a.mlp_unit_size == 0,
         f"--mlp_unit_size={a.mlp_unit_size} must divide --ffn={a.ffn}"),
        (a.val_windows >= 1, "--val_windows must be >= 1"),
        (0 <= a.moe_experts <= 1024, f"--moe_experts={a.moe_experts} out of range [0, 1024] "
                                     f"(0 = dense MLP)"),
        (not a.moe_experts or 1 <= a.moe_topk <= a.moe_experts,
         f"--moe_topk={a.moe_topk} out of range [1, --moe_experts={a.moe_experts}]"),
        (a.moe_aux_coeff >= 0 and math.isfinite(a.moe_aux_coeff),
         f"--moe_aux_coeff={a.moe_aux_coeff} must be finite and >= 0"),
        (a.moe_ffn >= 0, f"--moe_ffn={a.moe_ffn} < 0 (0 = --ffn / --moe_topk)"),
    ])


if __name__ == "__main__":
    sys.exit(training.main("gpt_train.py", parse, train))
