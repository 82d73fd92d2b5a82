"""Decoder-LLM blocks against plain PyTorch, on 2 and 3 real ranks (processes, Gloo).

Ballast's grouped-query attention (units of 1, 2 and 4 query heads per K/V head), causal
mask, RoPE and SwiGLU MLP, trained with 1 to 4 micro-batches per optimizer step (with
and without activation recompute), against the same decoder layer built from plain torch
modules that takes each step's whole batch at once: so every step also checks that
accumulating k micro-batches equals one batch of k times the size. Each case runs under
an empty plan, offloads, a reshard, and pruning (against the reference with the pruned
units removed); each compares, per micro-batch, the output and the input gradient, then
every accumulated Ballast gradient, and after two optimizer steps every parameter.
A separate check shows that under the causal mask position t never sees tokens after t.
"""
from __future__ import annotations

import os
import sys
import tempfile
import unittest
from typing import NamedTuple

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(__file__))
import torch_reference as ref_lib  # noqa: E402
from torch_testing import pruned_units  # noqa: E402

import ballast.torch as bt  # noqa: E402

# 12 query heads of dimension 4 over hidden 16: groups of 1, 2 and 4 heads are 12, 6 and 3
# units, so 3 ranks own some of every kind. heads * d (48) differs from hidden on purpose.
HIDDEN, HEADS, D, FFN, UNIT, CLASSES, SEQ, MICRO_BATCH = 16, 12, 4, 48, 8, 7, 5, 2
ADAMW = dict(lr=1e-2, betas=(0.9, 0.99), eps=1e-3, weight_decay=0.05)
TOL = dict(rtol=1e-4, atol=2e-5)
# Where the models and data live: torch_cuda_test.py runs the same cases on a GPU.
DEVICE = torch.device("cpu")


class Case(NamedTuple):
    heads_per_group: int
    causal: bool
    rotary: bool
    mlp: str  # "gelu" or "swiglu"
    micro_batches: int
    recompute: bool


CASES = [
    Case(1, True, False, "gelu", 1, False),    # causal multi-head attention alone
    Case(2, True, True, "swiglu", 2, True),    # Llama's block, recomputed
    Case(4, False, True, "swiglu", 3, False),  # RoPE without the mask
    Case(4, True, True, "swiglu", 4, True),
]
PLANS = ("empty", "offload", "reshard", "prune")


def close(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    torch.testing.assert_close(got.cpu(), want.cpu(), **TOL, msg=lambda m: f"{what}: {m}")


def build(case: Case):
    groups = HEADS // case.heads_per_group
    attn = bt.ParallelSelfAttention(HIDDEN, HEADS, kv_channels=D, num_query_groups=groups,
                                    causal=case.causal, rotary=case.rotary,
                                    recompute=case.recompute, seed=11)
    mlp = bt.ParallelMLP(HIDDEN, FFN, unit_size=UNIT, activation=case.mlp,
                         recompute=case.recompute, seed=12)
    model = ref_lib.Model(attn, mlp, HIDDEN, CLASSES, per_token=True)
    dense_mlp = (ref_lib.DenseSwiGLU(HIDDEN, FFN, UNIT) if case.mlp == "swiglu"
                 else ref_lib.DenseMLP(HIDDEN, FFN, UNIT, skip_bias_add=False))
    dense_attn = ref_lib.DenseAttention(HIDDEN, HEADS, groups, D, case.causal, case.rotary)
    dense = ref_lib.Model(dense_attn, dense_mlp, HIDDEN, CLASSES, per_token=True)
    dense.load_state_dict(model.state_dict())
    return model.to(DEVICE), dense.to(DEVICE)


def data(step: int, batch: int):
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(SEQ, batch, HIDDEN, generator=g)
    y = torch.randint(0, CLASSES, (SEQ, batch), generator=g)
    return x.to(DEVICE), y.to(DEVICE)


def plan_blocks(plan: str, model, size: int):
    last = size - 1
    attn, mlp = model.attn, model.mlp
    if plan == "offload":  # the last rank's work partly done by rank 0
        return [{"block": attn.block_id, "offloads": [(last, 0, 1)]},
                {"block": mlp.block_id, "offloads": [(last, 0, 2)]}]
    if plan == "prune":
        return [{"block": attn.block_id, "pruned_units": [0] * last + [1]},
                {"block": mlp.block_id, "pruned_units": [1] + [0] * (last - 1) + [2]}]
    if plan == "reshard":  # uneven ownership, and an offload on top
        units = attn.num_units
        return [{"block": attn.block_id, "owner_of_unit": [0] * (units - 1) + [last]},
                {"block": mlp.block_id, "owner_of_unit": [0] * (FFN // UNIT - 2) + [last] * 2,
                 "offloads": [(0, last, 2)]}]
    return None


def train_case(case: Case, plan: str, version: int, group, size: int) -> None:
    model, dense = build(case)
    blocks = plan_blocks(plan, model, size)
    if blocks is not None:
        bt.session().offer_plan(version, blocks, "zero")
    opt = bt.AdamW(model.parameters(), **ADAMW)
    ref_opt = torch.optim.AdamW(dense.parameters(), **ADAMW)
    k = case.micro_batches
    for step in range(2):
        x, y = data(step, k * MICRO_BATCH)
        outs, input_grads = [], []
        for i in range(k):  # micro-batches: forward and backward each, gradients add up
            cols = slice(i * MICRO_BATCH, (i + 1) * MICRO_BATCH)
            xb = x[:, cols].clone().requires_grad_()
            out = model(xb)
            (F.cross_entropy(out.reshape(-1, CLASSES), y[:, cols].reshape(-1)) / k).backward()
            outs.append(out.detach())
            input_grads.append(xb.grad)
            held = model.attn.activation_bytes + model.mlp.activation_bytes
            computes = "local" in model.attn.local_fates + model.mlp.local_fates
            if case.recompute or computes:
                assert (held == 0) == case.recompute, f"{held} activation bytes held"
        dense.attn.pruned = pruned_units(model.attn, group)
        dense.mlp.pruned = pruned_units(model.mlp, group)
        if plan == "prune":
            assert dense.attn.pruned and dense.mlp.pruned, "the prune plan pruned nothing"
        # The reference takes the step's whole batch at once.
        xr = x.clone().requires_grad_()
        ref_out = dense(xr)
        F.cross_entropy(ref_out.reshape(-1, CLASSES), y.reshape(-1)).backward()
        what = f"step {step}"
        close(torch.cat(outs, dim=1), ref_out.detach(), f"{what} output")
        close(torch.cat(input_grads, dim=1), xr.grad, f"{what} input gradient")
        for name in ("attn", "mlp"):
            layer = getattr(model, name)
            for key, g in layer._to_named(layer.dense("grad")):
                close(g, getattr(dense, name).get_parameter(key).grad, f"{what} {name}.{key} grad")
        before = {key: v.clone() for key, v in dense.state_dict().items()}
        opt.step()  # ends the step: its timings count the micro-batches (the offload price)
        counted = [b["micro_batches"] for b in bt.session().last_step_timings["blocks"]]
        assert counted == [k, k], f"{k} micro-batches reported as {counted}"
        opt.zero_grad()
        ref_opt.step()
        ref_opt.zero_grad()
        ref_lib.restore_pruned(dense, before)
    got = model.state_dict()
    for key, want in dense.state_dict().items():
        close(got[key], want, f"after 2 steps: {key}")
    if blocks is not None:
        assert bt.session().applied_version == version, bt.session().last_rejection


def check_causality() -> None:
    """Position t's output does not move when tokens after t change; later ones do."""
    attn = bt.ParallelSelfAttention(HIDDEN, HEADS, kv_channels=D, num_query_groups=HEADS // 2,
                                    causal=True, rotary=True, seed=21)
    x = torch.randn(SEQ, 2, HIDDEN, generator=torch.Generator().manual_seed(5)).to(DEVICE)
    with torch.no_grad():
        base, _ = attn(x)
        for t in range(SEQ - 1):
            changed = x.clone()
            changed[t + 1:] += 1.0
            out, _ = attn(changed)
            assert torch.equal(out[:t + 1], base[:t + 1]), f"position <= {t} saw later tokens"
            assert not torch.allclose(out[t + 1:], base[t + 1:]), "later positions ignored x"
    bt.session().end_step()


def worker(rank: int, size: int, path: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=size)
    bt.init(job="llm")
    version = 0
    for case in CASES:
        for plan in PLANS:
            version += 1
            try:
                train_case(case, plan, version, dist.group.WORLD, size)
            except AssertionError as e:
                raise AssertionError(f"{size} ranks, {case}, {plan} plan: {e}") from e
    check_causality()
    dist.barrier()
    bt.shutdown()
    dist.destroy_process_group()


class TorchLlmBlocksTest(unittest.TestCase):
    def run_ranks(self, size: int) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            mp.spawn(worker, args=(size, os.path.join(tmp, "rendezvous")), nprocs=size)

    def test_two_ranks_match_plain_pytorch(self) -> None:
        self.run_ranks(2)

    def test_three_ranks_match_plain_pytorch(self) -> None:
        self.run_ranks(3)


if __name__ == "__main__":
    unittest.main()
