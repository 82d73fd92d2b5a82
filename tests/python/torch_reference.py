"""Plain-PyTorch references for ballast.torch tests: the same model, dense, one process.

``Model`` mixes torch layers (LayerNorm, residuals, a head) with an attention and an MLP
layer given to it; built with Ballast layers it is the model under test, built with
``DenseAttention`` / ``DenseMLP`` it is the reference, and the state-dict keys agree so
one loads the other. ``UnitMask`` removes pruned units from the reference, the way
ZERO-resizing with zero imputation does.
"""
from __future__ import annotations

import math
from typing import Dict, Set

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
            h = h * unit_mask(h.shape[-1], self.unit_size, self.pruned)
        if self.skip_bias_add:
            return F.linear(h, self.linear_fc2.weight), self.linear_fc2.bias
        return self.linear_fc2(h), None


class DenseAttention(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads, self.d = heads, hidden // heads
        self.linear_q = nn.Linear(hidden, hidden)
        self.linear_k = nn.Linear(hidden, hidden)
        self.linear_v = nn.Linear(hidden, hidden)
        self.linear_proj = nn.Linear(hidden, hidden)
        self.pruned: Set[int] = set()

    def forward(self, x):  # [s, b, h]
        s, b, _ = x.shape

        def split(t):  # [s, b, heads*d] -> [b, heads, s, d]
            return t.view(s, b, self.heads, self.d).permute(1, 2, 0, 3)

        q, k, v = split(self.linear_q(x)), split(self.linear_k(x)), split(self.linear_v(x))
        p = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(self.d), dim=-1)
        ctx = p @ v
        if self.pruned:
            ctx = ctx * unit_mask(self.heads, 1, self.pruned).view(1, -1, 1, 1)
        ctx = ctx.permute(2, 0, 1, 3).reshape(s, b, -1)
        return self.linear_proj(ctx), None


def unit_mask(n: int, unit_size: int, pruned: Set[int]) -> torch.Tensor:
    mask = torch.ones(n)
    for u in pruned:
        mask[u * unit_size:(u + 1) * unit_size] = 0
    return mask


class Model(nn.Module):
    """Pre-LN transformer layer on [s, b, h] and a classifier head on the mean token."""

    def __init__(self, attn: nn.Module, mlp: nn.Module, hidden: int, classes: int) -> None:
        super().__init__()
        torch.manual_seed(7)  # the torch layers start alike on every rank and reference
        self.ln1 = nn.LayerNorm(hidden)
        self.attn = attn
        self.ln2 = nn.LayerNorm(hidden)
        self.mlp = mlp
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):
        a, bias = self.attn(self.ln1(x))
        x = x + (a if bias is None else a + bias)
        m, bias = self.mlp(self.ln2(x))
        x = x + (m if bias is None else m + bias)
        return self.head(x.mean(0))


def restore_pruned(ref: Model, before: Dict[str, torch.Tensor], unit_size: int) -> None:
    """Puts the pruned units' parameters back after a torch AdamW step.

    Their gradients are zero, so their moments stay zero and only the weight decay moved
    them; Ballast leaves pruned units alone, and so, after this, does the reference.
    """
    with torch.no_grad():
        mlp, attn = ref.mlp, ref.attn
        for u in mlp.pruned:
            rows = slice(u * unit_size, (u + 1) * unit_size)
            mlp.linear_fc1.weight[rows] = before["mlp.linear_fc1.weight"][rows]
            mlp.linear_fc1.bias[rows] = before["mlp.linear_fc1.bias"][rows]
            mlp.linear_fc2.weight[:, rows] = before["mlp.linear_fc2.weight"][:, rows]
        for h in attn.pruned:
            rows = slice(h * attn.d, (h + 1) * attn.d)
            for name in ("linear_q", "linear_k", "linear_v"):
                getattr(attn, name).weight[rows] = before[f"attn.{name}.weight"][rows]
                getattr(attn, name).bias[rows] = before[f"attn.{name}.bias"][rows]
            attn.linear_proj.weight[:, rows] = before["attn.linear_proj.weight"][:, rows]
