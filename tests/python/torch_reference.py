"""Plain-PyTorch references for ballast.torch tests: the same model, dense, one process.

``Model`` mixes torch layers (LayerNorm, residuals, a head) with an attention and an MLP
layer given to it; built with Ballast layers it is the model under test, built with
``DenseAttention`` and ``DenseMLP`` / ``DenseSwiGLU`` it is the reference, and the
state-dict keys agree so one loads the other. ``unit_mask`` removes pruned units from the
reference, the way ZERO-resizing with zero imputation does, and ``restore_pruned`` undoes
what torch's AdamW did to them.
"""
from __future__ import annotations

import math
from typing import Dict, Optional, Set

import torch
from torch import nn
from torch.nn import functional as F


class DenseMLP(nn.Module):
    def __init__(self, hidden: int, ffn: int, unit_size: int, skip_bias_add: bool) -> None:
        super().__init__()
        self.linear_fc1 = nn.Linear(hidden, ffn)
        self.linear_fc2 = nn.Linear(ffn, hidden)
        self.unit_size = unit_size
        self.skip_bias_add = skip_bias_add
        self.pruned: Set[int] = set()

    def forward(self, x):
        h = F.gelu(self.linear_fc1(x), approximate="tanh")
        if self.pruned:
            h = h * unit_mask(h.shape[-1], self.unit_size, self.pruned).to(h.device)
        if self.skip_bias_add:
            return F.linear(h, self.linear_fc2.weight), self.linear_fc2.bias
        return self.linear_fc2(h), None

    def unit_slices(self, u: int):
        """(parameter, dimension, slice) of everything unit u owns."""
        rows = slice(u * self.unit_size, (u + 1) * self.unit_size)
        return [("linear_fc1.weight", 0, rows), ("linear_fc1.bias", 0, rows),
                ("linear_fc2.weight", 1, rows)]


def unit_mask(n: int, unit_size: int, pruned: Set[int]) -> torch.Tensor:
    mask = torch.ones(n)
    for u in pruned:
        mask[u * unit_size:(u + 1) * unit_size] = 0
    return mask


class Model(nn.Module):
    """Pre-LN transformer layer on [s, b, h] and a classifier head: on the mean token, or
    with ``per_token`` on every position (a language-model head without the embedding)."""

    def __init__(self, attn: nn.Module, mlp: nn.Module, hidden: int, classes: int,
                 per_token: bool = False) -> None:
        super().__init__()
        torch.manual_seed(7)  # the torch layers start alike on every rank and reference
        self.ln1 = nn.LayerNorm(hidden)
        self.attn = attn
        self.ln2 = nn.LayerNorm(hidden)
        self.mlp = mlp
        self.head = nn.Linear(hidden, classes)
        self.per_token = per_token

    def forward(self, x):
        a, bias = self.attn(self.ln1(x))
        x = x + (a if bias is None else a + bias)
        m, bias = self.mlp(self.ln2(x))
        x = x + (m if bias is None else m + bias)
        return self.head(x if self.per_token else x.mean(0))


# --- Decoder-LLM pieces: SwiGLU, and RoPE for DenseAttention. ---

class DenseSwiGLU(nn.Module):
    """``linear_fc2(silu(linear_fc1(x)) * linear_fc1_up(x))``; a unit is a tile of
    ``unit_size`` neurons of fc1 and fc1_up and the matching columns of fc2."""

    def __init__(self, hidden: int, ffn: int, unit_size: int) -> None:
        super().__init__()
        self.linear_fc1 = nn.Linear(hidden, ffn)
        self.linear_fc1_up = nn.Linear(hidden, ffn)
        self.linear_fc2 = nn.Linear(ffn, hidden)
        self.unit_size = unit_size
        self.pruned: Set[int] = set()

    def forward(self, x):
        h = F.silu(self.linear_fc1(x)) * self.linear_fc1_up(x)
        if self.pruned:
            h = h * unit_mask(h.shape[-1], self.unit_size, self.pruned).to(h.device)
        return self.linear_fc2(h), None

    def unit_slices(self, u: int):
        """(parameter, dimension, slice) of everything unit u owns."""
        rows = slice(u * self.unit_size, (u + 1) * self.unit_size)
        return [("linear_fc1.weight", 0, rows), ("linear_fc1.bias", 0, rows),
                ("linear_fc1_up.weight", 0, rows), ("linear_fc1_up.bias", 0, rows),
                ("linear_fc2.weight", 1, rows)]


def rotary_tables(seq: int, d: int, base: float):
    """cos and sin [seq, d/2], computed in double like worker_lib's tables."""
    inv = base ** (-torch.arange(0, d // 2, dtype=torch.float64) * 2.0 / d)
    angle = torch.arange(seq, dtype=torch.float64)[:, None] * inv[None, :]
    return angle.cos().float(), angle.sin().float()


def apply_rotary(t: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE on [..., s, d]."""
    half = t.shape[-1] // 2
    a, b = t[..., :half], t[..., half:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)


class DenseAttention(nn.Module):
    """Self-attention on [s, b, h] with biases: multi-head by default; with ``groups``
    (< heads), grouped-query (query head i uses K/V head i // (heads / groups), as Hugging
    Face's repeat_kv); optional causal mask and RoPE. A unit is one K/V group."""

    def __init__(self, hidden: int, heads: int, groups: Optional[int] = None,
                 d: Optional[int] = None, causal: bool = False, rotary: bool = False,
                 rotary_base: float = 10000.0) -> None:
        super().__init__()
        groups = heads if groups is None else groups
        d = hidden // heads if d is None else d
        self.heads, self.groups, self.d = heads, groups, d
        self.causal, self.rotary, self.base = causal, rotary, rotary_base
        self.linear_q = nn.Linear(hidden, heads * d)
        self.linear_k = nn.Linear(hidden, groups * d)
        self.linear_v = nn.Linear(hidden, groups * d)
        self.linear_proj = nn.Linear(heads * d, hidden)
        self.pruned: Set[int] = set()

    def forward(self, x):  # [s, b, h]
        s, b, _ = x.shape
        per = self.heads // self.groups

        def split(t, n):  # [s, b, n*d] -> [b, n, s, d]
            return t.view(s, b, n, self.d).permute(1, 2, 0, 3)

        q = split(self.linear_q(x), self.heads)
        k = split(self.linear_k(x), self.groups)
        v = split(self.linear_v(x), self.groups)
        if self.rotary:
            cos, sin = (t.to(x.device) for t in rotary_tables(s, self.d, self.base))
            q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        k = k.repeat_interleave(per, dim=1)  # Hugging Face's repeat_kv
        v = v.repeat_interleave(per, dim=1)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.d)
        if self.causal:
            future = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
        ctx = torch.softmax(scores, dim=-1) @ v
        if self.pruned:
            ctx = ctx * unit_mask(self.heads, per, self.pruned).to(x.device).view(1, -1, 1, 1)
        ctx = ctx.permute(2, 0, 1, 3).reshape(s, b, -1)
        return self.linear_proj(ctx), None

    def unit_slices(self, g: int):
        per = self.heads // self.groups
        q_rows = slice(g * per * self.d, (g + 1) * per * self.d)
        kv_rows = slice(g * self.d, (g + 1) * self.d)
        return ([(f"linear_q.{p}", 0, q_rows) for p in ("weight", "bias")] +
                [(f"linear_{n}.{p}", 0, kv_rows) for n in "kv" for p in ("weight", "bias")] +
                [("linear_proj.weight", 1, q_rows)])


def restore_pruned(model: nn.Module, before: Dict[str, torch.Tensor]) -> None:
    """Puts the pruned units' parameters of a Model's attn and mlp back after a torch
    AdamW step.

    Their gradients are zero, so only the moments left from earlier steps and the weight
    decay moved them; Ballast leaves pruned units alone, and so, after this, does the
    reference.
    """
    with torch.no_grad():
        for name in ("attn", "mlp"):
            layer = getattr(model, name)
            for u in layer.pruned:
                for param, dim, rows in layer.unit_slices(u):
                    t = layer.get_parameter(param)
                    old = before[f"{name}.{param}"]
                    if dim == 0:
                        t[rows] = old[rows]
                    else:
                        t[:, rows] = old[:, rows]
