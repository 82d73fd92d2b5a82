"""ballast.torch.ParallelMoE against a plain-PyTorch MoE, on 1, 2 and 3 real ranks.

The reference is Megatron-core's MoELayer written in plain torch: a bias-free nn.Linear
router, top-k with Megatron's two gate conventions (post-softmax: softmax over the top-k
logits; pre-softmax: the top-k of the full softmax), SwiGLU experts as nn.Linear fc1
[2*ffn, h] (gate rows, then up rows) and fc2 [h, ffn] without biases, an output bias, and
the Switch load-balancing loss added to the loss and differentiated by torch autograd.
Ballast's layer adds the aux loss's gradient itself (scaled by set_aux_loss_scale), so its
loss leaves the aux loss out.

Each case trains a small model (LayerNorm, the MoE with a residual, a classifier head) for
2 optimizer steps of 2 micro-batches each, the loss averaged over them (aux-loss scale
1/2), and compares per micro-batch the output, the input gradient, the aux loss, the
tokens per expert and every MoE gradient; after the steps, ballast.torch.AdamW against
torch.optim.AdamW through the state dicts. Cases: top-1 pre-softmax and top-2
post-softmax (the latter with recompute on 3 ranks), an expert offloaded from rank 1 to
rank 0 (2 ranks), replicas splitting an expert's tokens between ranks (2 and 3 ranks), a
plan's capacity cap with replicas (2 ranks; the reference drops the same tokens), an
exact state-dict round trip onto another ownership, bad configs, and the layer built by
spec.moe_spec() from a Megatron config.
"""
from __future__ import annotations

import math
import os
import sys
import tempfile
import types
import unittest
from dataclasses import dataclass
from typing import Dict, List, Optional

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(__file__))
import ballast.torch as bt  # noqa: E402
from ballast.torch import spec as bspec  # noqa: E402

HIDDEN, FFN, EXPERTS, CLASSES, SEQ, BATCH, MICRO = 16, 8, 4, 5, 6, 3, 2
AUX = 0.01
ADAMW = dict(lr=1e-2, betas=(0.9, 0.99), eps=1e-3, weight_decay=0.05)
TOL = dict(rtol=1e-4, atol=2e-5)


class Errors:
    """The largest differences seen: absolute, and relative to the reference's largest
    magnitude in the same tensor."""

    abs_err = 0.0
    rel_err = 0.0


def close(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    got, want = got.detach().cpu().float(), want.detach().cpu().float()
    torch.testing.assert_close(got, want, **TOL, msg=lambda m: f"{what}: {m}")
    diff = (got - want).abs().max().item() if want.numel() else 0.0
    Errors.abs_err = max(Errors.abs_err, diff)
    Errors.rel_err = max(Errors.rel_err, diff / max(want.abs().max().item(), 1e-30))


# --- The plain-torch reference. ---

class Expert(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear_fc1 = nn.Linear(HIDDEN, 2 * FFN, bias=False)
        self.linear_fc2 = nn.Linear(FFN, HIDDEN, bias=False)

    def forward(self, x):
        gate, up = self.linear_fc1(x).chunk(2, dim=-1)  # Megatron's gated linear unit
        return self.linear_fc2(F.silu(gate) * up)


class Experts(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.local_experts = nn.ModuleList(Expert() for _ in range(EXPERTS))


class DenseMoE(nn.Module):
    """Returns (output, bias) as ParallelMoE, and keeps the latest aux loss (a tensor in
    the graph), tokens per expert and the pairs the capacity cap dropped. A capacity
    factor above 0 keeps each expert's first max(1, ceil(factor * T * k / E)) tokens in
    token order (Megatron's "position" drop policy) without renormalising the gates; the
    aux loss counts the tokens routed before the drop."""

    def __init__(self, top_k: int, pre_softmax: bool, aux_coeff: float,
                 capacity_factor: float = 0.0) -> None:
        super().__init__()
        self.router = nn.Linear(HIDDEN, EXPERTS, bias=False)
        self.experts = Experts()
        self.bias = nn.Parameter(torch.zeros(HIDDEN))
        self.top_k, self.pre_softmax, self.aux_coeff = top_k, pre_softmax, aux_coeff
        self.capacity_factor = capacity_factor
        self.aux_loss: Optional[torch.Tensor] = None
        self.tokens_per_expert: List[int] = []
        self.dropped = 0

    def forward(self, x):
        tokens = x.reshape(-1, HIDDEN)
        t = tokens.shape[0]
        logits = self.router(tokens)
        probs = torch.softmax(logits, dim=-1)
        if self.pre_softmax:
            gates, chosen = torch.topk(probs, self.top_k, dim=-1)
        else:
            top, chosen = torch.topk(logits, self.top_k, dim=-1)
            gates = torch.softmax(top, dim=-1)
        out = torch.zeros_like(tokens)
        counts = []
        cap = t
        if self.capacity_factor > 0:
            cap = max(1, math.ceil(self.capacity_factor * t * self.top_k / EXPERTS))
        self.dropped = 0
        for e, expert in enumerate(self.experts.local_experts):
            rows, slot = (chosen == e).nonzero(as_tuple=True)  # rows ascending
            counts.append(rows.numel())
            self.dropped += max(0, rows.numel() - cap)
            rows, slot = rows[:cap], slot[:cap]
            if rows.numel():
                out = out.index_add(0, rows, gates[rows, slot, None] * expert(tokens[rows]))
        c = torch.tensor(counts, dtype=probs.dtype)
        self.aux_loss = (self.aux_coeff * EXPERTS / (t * t * self.top_k) *
                         (probs.sum(0) * c).sum())
        self.tokens_per_expert = counts
        return (out + self.bias).view_as(x), None


class Net(nn.Module):
    def __init__(self, moe: nn.Module) -> None:
        super().__init__()
        torch.manual_seed(7)  # the torch layers start alike on every rank and reference
        self.ln = nn.LayerNorm(HIDDEN)
        self.moe = moe
        self.head = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x):
        m, bias = self.moe(self.ln(x))
        x = x + (m if bias is None else m + bias)
        return self.head(x.mean(0))


@dataclass
class Case:
    name: str
    top_k: int
    pre_softmax: bool
    recompute: bool = False
    offload: bool = False
    # A plan's "replicas" ({unit, helper, share}): expert tokens split between ranks.
    replicas: Optional[List[Dict[str, float]]] = None
    # A plan's "capacity_factor" (0: none).
    capacity: float = 0.0


def build(case: Case, owner_of_unit=None):
    moe = bt.ParallelMoE(HIDDEN, FFN, EXPERTS, moe_router_topk=case.top_k,
                         moe_router_pre_softmax=case.pre_softmax, moe_aux_loss_coeff=AUX,
                         recompute=case.recompute, owner_of_unit=owner_of_unit, seed=13)
    model = Net(moe)
    dense = Net(DenseMoE(case.top_k, case.pre_softmax, AUX, case.capacity))
    dense.load_state_dict(model.state_dict())
    return model, dense


def data(step: int, micro: int):
    g = torch.Generator().manual_seed(1000 + 10 * step + micro)
    return torch.randn(SEQ, BATCH, HIDDEN, generator=g), torch.randint(0, CLASSES, (BATCH,),
                                                                         generator=g)


def train_case(case: Case, version: int) -> None:
    model, dense = build(case)
    block = {"block": model.moe.block_id}
    if case.offload:  # one of rank 1's experts computed by rank 0
        block["offloads"] = [(1, 0, 1)]
    if case.replicas:
        block["replicas"] = case.replicas
    if case.capacity:
        block["capacity_factor"] = case.capacity
    planned = len(block) > 1
    if planned:
        bt.session().offer_plan(version, [block])
    dropped = 0
    model.moe.set_aux_loss_scale(1.0 / MICRO)  # the loss is averaged over micro-batches
    opt = bt.AdamW(model.parameters(), **ADAMW)
    ref_opt = torch.optim.AdamW(dense.parameters(), **ADAMW)
    router = dense.moe.router.weight
    for step in range(2):
        for i in range(MICRO):
            what = f"{case.name}, step {step}, micro-batch {i}"
            x, y = data(step, i)
            xb = x.clone().requires_grad_()
            out = model(xb)
            (F.cross_entropy(out, y) / MICRO).backward()  # no aux loss: the block adds it
            if case.offload and dist.get_rank() == 1:
                assert "offloaded" in model.moe.local_fates, model.moe.local_fates
            if case.recompute:
                assert model.moe.activation_bytes == 0, model.moe.activation_bytes
            xr = x.clone().requires_grad_()
            ref_out = dense(xr)
            aux = dense.moe.aux_loss
            if step == 0 and i == 0:
                # The aux loss's gradient must be large enough for the checks to see it
                # (rtol times the router's gradient is far below atol here).
                g = torch.autograd.grad(aux, router, retain_graph=True)[0] / MICRO
                assert g.abs().max() > 2 * TOL["atol"], f"{what}: aux gradient {g.abs().max()}"
            ((F.cross_entropy(ref_out, y) + aux) / MICRO).backward()
            close(out, ref_out, f"{what}: output")
            close(xb.grad, xr.grad, f"{what}: input gradient")
            close(torch.tensor(model.moe.aux_loss), aux, f"{what}: aux loss")
            assert model.moe.tokens_per_expert == dense.moe.tokens_per_expert, (
                what, model.moe.tokens_per_expert, dense.moe.tokens_per_expert)
            assert model.moe.dropped_tokens == dense.moe.dropped, (
                what, model.moe.dropped_tokens, dense.moe.dropped)
            dropped += dense.moe.dropped
            # Gradients so far (they add up over the micro-batches).
            for key, g in model.moe._to_named(model.moe.dense("grad")):
                close(g, dense.moe.get_parameter(key).grad, f"{what}: moe.{key} grad")
        opt.step()
        opt.zero_grad()
        ref_opt.step()
        ref_opt.zero_grad()
    got = model.state_dict()
    assert set(got) == set(dense.state_dict()), sorted(set(got) ^ set(dense.state_dict()))
    for key, want in dense.state_dict().items():
        close(got[key], want, f"{case.name}, after 2 AdamW steps: {key}")
    if planned:
        assert bt.session().applied_version == version, bt.session().last_rejection
    applied = bt.session().applied_plan_blocks if planned else []
    if case.replicas:
        assert [b["replicas"] for b in applied] == [case.replicas], applied
    if case.capacity:
        assert [b["capacity_factor"] for b in applied] == [case.capacity], applied
        assert dropped > 0, f"{case.name}: the cap dropped no token"
    else:
        assert dropped == 0, (case.name, dropped)


def check_state_dict(size: int) -> None:
    """Megatron's keys and shapes, an exact round trip onto another ownership, refusals."""
    moe = bt.ParallelMoE(HIDDEN, FFN, EXPERTS, moe_router_topk=2, seed=3)
    sd = moe.state_dict()
    want = {"router.weight": (EXPERTS, HIDDEN), "bias": (HIDDEN,)}
    for i in range(EXPERTS):
        want[f"experts.local_experts.{i}.linear_fc1.weight"] = (2 * FFN, HIDDEN)
        want[f"experts.local_experts.{i}.linear_fc2.weight"] = (HIDDEN, FFN)
    assert {k: tuple(v.shape) for k, v in sd.items()} == want, {k: v.shape for k, v in sd.items()}
    assert torch.equal(sd["bias"], torch.zeros(HIDDEN)), "the output bias starts at zero"
    # Distinct values everywhere, so a transposition or a swapped gate/up half shows.
    g = torch.Generator().manual_seed(9)
    new = {k: torch.randn(v.shape, generator=g) for k, v in sd.items()}
    owner = [0] * (EXPERTS - 1) + [size - 1]
    other = bt.ParallelMoE(HIDDEN, FFN, EXPERTS, owner_of_unit=owner, seed=4)
    other.load_state_dict(new)
    assert other.owner_of_unit == owner
    back = other.state_dict()
    for k, v in new.items():
        assert torch.equal(back[k], v), f"round trip changed {k}"
    moe.load_state_dict(back)
    for k, v in moe.state_dict().items():
        assert torch.equal(v, new[k]), f"second round trip changed {k}"
    # The dense layout itself: expert 1's gate and up rows are w1 and w3 transposed.
    dense = moe.dense()
    n = EXPERTS * HIDDEN * FFN
    w1 = dense[:n].view(EXPERTS, HIDDEN, FFN)
    w3 = dense[n:2 * n].view(EXPERTS, HIDDEN, FFN)
    fc1 = new["experts.local_experts.1.linear_fc1.weight"]
    assert torch.equal(w1[1].t(), fc1[:FFN]) and torch.equal(w3[1].t(), fc1[FFN:])
    bad = dict(new)
    bad["experts.local_experts.2.linear_fc2.weight"] = torch.zeros(FFN, HIDDEN)
    try:
        moe.load_state_dict(bad)
    except RuntimeError as e:
        assert "experts.local_experts.2.linear_fc2.weight" in str(e), e
    else:
        raise AssertionError("a wrongly shaped expert weight loaded")
    for kwargs, field in ((dict(moe_router_topk=EXPERTS + 1), "top_k"),
                          (dict(moe_router_topk=0), "top_k"),
                          (dict(moe_aux_loss_coeff=-1.0), "aux_loss_coeff")):
        try:
            bt.ParallelMoE(HIDDEN, FFN, EXPERTS, **kwargs)
        except (ValueError, RuntimeError) as e:
            assert field in str(e), e
        else:
            raise AssertionError(f"{kwargs} was accepted")
    mlp = bt.ParallelMLP(HIDDEN, FFN, unit_size=FFN)
    assert mlp._block.aux_loss == 0.0 and mlp._block.expert_tokens == []
    try:
        mlp._block.set_aux_loss_scale(0.5)
    except ValueError as e:
        assert "not a mixture of experts" in str(e), e
    else:
        raise AssertionError("set_aux_loss_scale on an MLP block was accepted")


def check_spec(size: int) -> None:
    """moe_spec() builds the layer from a Megatron config, and refuses what it cannot do."""
    def config(**overrides):
        fields = dict(hidden_size=HIDDEN, ffn_hidden_size=64, num_moe_experts=EXPERTS,
                      moe_router_topk=1, moe_router_pre_softmax=True, moe_aux_loss_coeff=AUX,
                      moe_ffn_hidden_size=FFN, gated_linear_unit=True, activation_func=F.silu,
                      add_bias_linear=False, tensor_model_parallel_size=size)
        fields.update(overrides)
        return types.SimpleNamespace(**fields)

    layer = bspec.build_module(bspec.moe_spec(seed=13), config=config(), layer_number=3)
    assert isinstance(layer, bt.ParallelMoE) and layer.skip_bias_add
    got = (layer.hidden_size, layer.ffn_hidden_size, layer.num_moe_experts,
           layer.moe_router_topk, layer.moe_router_pre_softmax, layer.moe_aux_loss_coeff)
    assert got == (HIDDEN, FFN, EXPERTS, 1, True, AUX), got
    plain = bt.ParallelMoE(HIDDEN, FFN, EXPERTS, moe_router_topk=1, moe_router_pre_softmax=True,
                           moe_aux_loss_coeff=AUX)
    plain.load_state_dict(layer.state_dict())
    x = data(0, 0)[0]
    with torch.no_grad():
        (out, bias), (want, none) = layer(x), plain(x)
    assert none is None and bias is not None
    close(out + bias, want, "the spec-built MoE")
    close(torch.tensor(layer.aux_loss), torch.tensor(plain.aux_loss), "the spec-built aux loss")
    bt.end_step()  # layers are created between steps
    unset = bspec.build_module(bspec.moe_spec(), config=config(moe_ffn_hidden_size=None))
    assert unset.ffn_hidden_size == 64, unset.ffn_hidden_size
    for overrides, field in ((dict(add_bias_linear=True), "add_bias_linear"),
                             (dict(gated_linear_unit=False), "gated_linear_unit"),
                             (dict(moe_expert_capacity_factor=1.0), "moe_expert_capacity_factor"),
                             (dict(moe_router_load_balancing_type="sinkhorn"),
                              "moe_router_load_balancing_type"),
                             (dict(tensor_model_parallel_size=size + 1),
                              "tensor_model_parallel_size")):
        try:
            bspec.build_module(bspec.moe_spec(), config=config(**overrides))
        except ValueError as e:
            assert f"config.{field}" in str(e), e
        else:
            raise AssertionError(f"{overrides} was accepted")


def worker(rank: int, size: int, path: str, collectives: str, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=size)
    bt.init(job="moe", collectives=collectives)
    cases = [Case("top-1 pre-softmax", 1, True),
             Case("top-2 post-softmax", 2, False, recompute=size == 3)]
    if size == 2:
        cases.append(Case("top-2 post-softmax, offload", 2, False, offload=True))
        # Rank 0's expert 0 shared with rank 1; rank 1's expert 3 all computed by rank 0.
        cases.append(Case("top-1 pre-softmax, replicas", 1, True,
                          replicas=[{"unit": 0, "helper": 1, "share": 0.4},
                                    {"unit": 3, "helper": 0, "share": 1.0}]))
        # A cap of ceil(0.75 * 18 * 2 / 4) = 7 tokens an expert, with expert 0 shared.
        cases.append(Case("top-2 post-softmax, capacity and replicas", 2, False,
                          replicas=[{"unit": 0, "helper": 1, "share": 0.5}], capacity=0.75))
    if size == 3:  # rank 0's expert 0 split three ways
        cases.append(Case("top-2 post-softmax, replicas", 2, False,
                          replicas=[{"unit": 0, "helper": 1, "share": 0.3},
                                    {"unit": 0, "helper": 2, "share": 0.3}]))
    try:
        for version, case in enumerate(cases, start=1):
            train_case(case, version)
        check_state_dict(size)
        check_spec(size)
    except AssertionError as e:
        raise AssertionError(f"{size} ranks: {e}") from e
    errors: List[Optional[Dict[str, float]]] = [None] * size
    dist.all_gather_object(errors, {"abs": Errors.abs_err, "rel": Errors.rel_err})
    if rank == 0:
        with open(out, "w") as f:
            f.write(f"{max(e['abs'] for e in errors):.3g} {max(e['rel'] for e in errors):.3g}")
    dist.barrier()
    bt.shutdown()
    dist.destroy_process_group()


class TorchMoeTest(unittest.TestCase):
    def run_ranks(self, size: int, collectives: str = "torch") -> None:
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "errors")
            mp.spawn(worker, args=(size, os.path.join(tmp, "rendezvous"), collectives, out),
                     nprocs=size)
            with open(out) as f:
                abs_err, rel_err = f.read().split()
        print(f"\n{size} ranks ({collectives}): max abs error {abs_err}, max error relative "
              f"to the tensor's largest value {rel_err}", file=sys.stderr)

    def test_one_rank_matches_plain_pytorch(self) -> None:
        self.run_ranks(1)

    def test_two_ranks_with_an_offloaded_expert_match_plain_pytorch(self) -> None:
        self.run_ranks(2)

    def test_three_ranks_on_ballast_collectives_match_plain_pytorch(self) -> None:
        self.run_ranks(3, "ballast")


if __name__ == "__main__":
    unittest.main()
