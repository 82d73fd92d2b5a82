"""ballast.torch against plain PyTorch, on 2 and 3 real ranks (processes, Gloo).

Each rank trains a model that mixes torch layers with Ballast's attention and MLP on the
job's own process group, and the same model built from plain torch layers (dense, in
the same process, loaded from the Ballast model's state dict) on the same data with
torch.optim.AdamW, a learning-rate schedule and clipping by the global gradient norm.
Every step compares the output, the loss, the input gradient, every Ballast parameter
gradient and the gradient norm; after 3 optimizer steps, every parameter. Plans: none, offloads,
reshards (with a state-dict round trip onto a fresh model of another ownership), and
pruning (against the reference with those units removed). A sub-group of a larger world
is covered too, and every case runs with the collectives on the process group itself and
on Ballast's own mesh over its ranks.
"""
from __future__ import annotations

import os
import sys
import tempfile
import unittest
from typing import Dict

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(__file__))
import torch_reference as ref_lib  # noqa: E402
from torch_testing import pruned_units  # noqa: E402

import ballast.torch as bt  # noqa: E402

HIDDEN, HEADS, FFN, UNIT, CLASSES, SEQ, BATCH = 16, 4, 64, 8, 5, 6, 3
# eps well above round-off: the key bias has a zero true gradient (softmax ignores a
# constant per row), so with a tiny eps AdamW would turn its round-off noise into steps.
ADAMW = dict(lr=1e-2, betas=(0.9, 0.99), eps=1e-3, weight_decay=0.05)
TOL = dict(rtol=1e-4, atol=2e-5)
CLIP = 0.5  # below every step's gradient norm here, so clipping always acts
# Where the models and data live: torch_cuda_test.py runs the same scenarios on a GPU.
DEVICE = torch.device("cpu")


def close(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    torch.testing.assert_close(got.cpu(), want.cpu(), **TOL, msg=lambda m: f"{what}: {m}")


def build(owner_attn=None, owner_mlp=None):
    attn = bt.ParallelSelfAttention(HIDDEN, HEADS, owner_of_unit=owner_attn, seed=11)
    mlp = bt.ParallelMLP(HIDDEN, FFN, unit_size=UNIT, skip_bias_add=True,
                         owner_of_unit=owner_mlp, seed=12)
    model = ref_lib.Model(attn, mlp, HIDDEN, CLASSES)
    dense = ref_lib.Model(ref_lib.DenseAttention(HIDDEN, HEADS),
                          ref_lib.DenseMLP(HIDDEN, FFN, UNIT, skip_bias_add=True),
                          HIDDEN, CLASSES)
    dense.load_state_dict(model.state_dict())
    return model.to(DEVICE), dense.to(DEVICE)


def data(step: int):
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(SEQ, BATCH, HIDDEN, generator=g)
    y = torch.randint(0, CLASSES, (BATCH,), generator=g)
    return x.to(DEVICE), y.to(DEVICE)


def ballast_grads(layer) -> Dict[str, torch.Tensor]:
    return dict(layer._to_named(layer.dense("grad")))


def train_and_compare(model, dense, opt, ref_opt, group, steps: int, first_step: int,
                      expect_pruned: bool = False) -> None:
    # A schedule on each: Ballast's layers take the learning rate of their param group.
    scheds = [torch.optim.lr_scheduler.LambdaLR(o, lambda k: 1.0 / (1 + k))
              for o in (opt, ref_opt)]
    for s in range(first_step, first_step + steps):
        x, y = data(s)
        xb = x.clone().requires_grad_()
        out = model(xb)
        loss = torch.nn.functional.cross_entropy(out, y)
        loss.backward()
        # The plan is in force now (the step opened at the first Ballast forward).
        dense.attn.pruned = pruned_units(model.attn, group)
        dense.mlp.pruned = pruned_units(model.mlp, group)
        if expect_pruned:
            assert dense.attn.pruned and dense.mlp.pruned, "the prune plan pruned nothing"
        xr = x.clone().requires_grad_()
        ref_out = dense(xr)
        ref_loss = torch.nn.functional.cross_entropy(ref_out, y)
        ref_loss.backward()
        close(out.detach(), ref_out.detach(), f"step {s} output")
        close(loss.detach(), ref_loss.detach(), f"step {s} loss")
        close(xb.grad, xr.grad, f"step {s} input gradient")
        for name in ("attn", "mlp"):
            for key, g in ballast_grads(getattr(model, name)).items():
                close(g, getattr(dense, name).get_parameter(key).grad, f"step {s} {name}.{key} grad")
        # Clip by the global norm (small enough to clip), as plain PyTorch does.
        got_norm = bt.clip_grad_norm_(model.parameters(), CLIP)
        want_norm = torch.nn.utils.clip_grad_norm_(dense.parameters(), CLIP)
        close(got_norm.float(), want_norm.float(), f"step {s} gradient norm")
        assert want_norm > CLIP, f"step {s}: norm {want_norm} does not clip"
        before = {k: v.clone() for k, v in dense.state_dict().items()}
        opt.step()
        opt.zero_grad()
        ref_opt.step()
        ref_opt.zero_grad()
        for sched in scheds:
            sched.step()
        ref_lib.restore_pruned(dense, before)
    got = model.state_dict()
    for key, want in dense.state_dict().items():
        close(got[key], want, f"after step {first_step + steps - 1}: {key}")


class Plans:
    """Versions increase across the scenarios of one session."""

    def __init__(self) -> None:
        self.version = 0

    def offer(self, blocks, imputation: str = "zero") -> None:
        self.version += 1
        bt.session().offer_plan(self.version, blocks, imputation)


def scenarios(rank: int, size: int, group) -> None:
    plans = Plans()
    last = size - 1
    zeros = [0] * size

    # Empty plan, then offloads: the last rank's work partly done by rank 0.
    for name, blocks in [
        ("empty", None),
        ("offload", lambda m: [
            {"block": m.attn.block_id, "offloads": [(last, 0, 1)]},
            {"block": m.mlp.block_id, "offloads": [(last, 0, 2)] +
             ([(1, 2, 1)] if size > 2 else [])}]),
        ("prune", lambda m: [
            {"block": m.attn.block_id, "pruned_units": [0] * last + [1]},
            {"block": m.mlp.block_id, "pruned_units": [1] + [0] * (last - 1) + [2]}]),
    ]:
        model, dense = build()
        if blocks is not None:
            plans.offer(blocks(model))
        opt = bt.AdamW(model.parameters(), **ADAMW)
        ref_opt = torch.optim.AdamW(dense.parameters(), **ADAMW)
        try:
            train_and_compare(model, dense, opt, ref_opt, group, 3, 0,
                              expect_pruned=name == "prune")
        except AssertionError as e:
            raise AssertionError(f"{size} ranks, {name} plan: {e}") from e
        if blocks is not None:
            assert bt.session().applied_version == plans.version, bt.session().last_rejection

    # Reshard: one step under even ownership, then every unit but one moves to rank 0
    # (with an offload on top), two more steps; then the state (model and optimizer)
    # round-trips onto a fresh model of even ownership, and both train on alike.
    model, dense = build()
    opt = bt.AdamW(model.parameters(), **ADAMW)
    ref_opt = torch.optim.AdamW(dense.parameters(), **ADAMW)
    train_and_compare(model, dense, opt, ref_opt, group, 1, 10)
    attn_owner = [0] * (HEADS - 1) + [last]
    mlp_owner = [0] * (FFN // UNIT - 2) + [last, last]
    plans.offer([{"block": model.attn.block_id, "owner_of_unit": attn_owner},
                 {"block": model.mlp.block_id, "owner_of_unit": mlp_owner,
                  "offloads": [(0, last, 2)]}])
    try:
        train_and_compare(model, dense, opt, ref_opt, group, 2, 11)
    except AssertionError as e:
        raise AssertionError(f"{size} ranks, reshard plan: {e}") from e
    assert model.mlp.owner_of_unit == mlp_owner, model.mlp.owner_of_unit
    assert model.attn.owner_of_unit == attn_owner, model.attn.owner_of_unit

    saved_model, saved_opt = model.state_dict(), opt.state_dict()
    fresh, _ = build()
    assert fresh.mlp.owner_of_unit != mlp_owner
    fresh.load_state_dict(saved_model)
    fresh_opt = bt.AdamW(fresh.parameters(), **ADAMW)
    fresh_opt.load_state_dict(saved_opt)
    for key, want in saved_model.items():
        close(fresh.state_dict()[key], want, f"round trip: {key}")
    for layer, old in ((fresh.mlp, model.mlp), (fresh.attn, model.attn)):
        for field in ("adam_m", "adam_v"):
            close(layer.dense(field), old.dense(field), f"round trip: block {layer.block_id} {field}")
    for s in (20, 21):
        outs = []
        for m, o in ((model, opt), (fresh, fresh_opt)):
            x, y = data(s)
            out = m(x)
            torch.nn.functional.cross_entropy(out, y).backward()
            o.step()
            o.zero_grad()
            outs.append(out.detach())
        close(outs[1], outs[0], f"step {s} after the round trip")
    del zeros


def worker(rank: int, size: int, path: str, collectives: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=size)
    if size == 3:
        # A TP group that is a sub-group of the world: ranks 1 and 2; rank 0 is outside.
        sub = dist.new_group([1, 2])
        if rank == 0:
            try:
                bt.init(sub, job="sub", collectives=collectives)
            except ValueError as e:
                assert "not a member" in str(e), e
            else:
                raise AssertionError("init on a group this rank is not in did not fail")
        else:
            s = bt.init(sub, job="sub", collectives=collectives)
            assert s.collectives == collectives, s.collectives
            assert (s.rank, s.size, s.group) == (rank - 1, 2, "sub/tp1"), (s.rank, s.size, s.group)
            model, dense = build()
            opt = bt.AdamW(model.parameters(), **ADAMW)
            ref_opt = torch.optim.AdamW(dense.parameters(), **ADAMW)
            train_and_compare(model, dense, opt, ref_opt, sub, 1, 0)
            del model, opt
            bt.shutdown()
        dist.barrier()
    bt.init(job="test", collectives=collectives)
    scenarios(rank, size, dist.group.WORLD)
    dist.barrier()
    dist.destroy_process_group()


class TorchLayersTest(unittest.TestCase):
    """Both places the collectives can run: the process group itself (\"torch\") and
    Ballast's own Gloo mesh over its ranks (\"ballast\")."""

    def run_ranks(self, size: int, collectives: str) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            mp.spawn(worker, args=(size, os.path.join(tmp, "rendezvous"), collectives),
                     nprocs=size)

    def test_two_ranks_on_the_process_group_match_plain_pytorch(self) -> None:
        self.run_ranks(2, "torch")

    def test_two_ranks_on_ballast_collectives_match_plain_pytorch(self) -> None:
        self.run_ranks(2, "ballast")

    def test_three_ranks_on_the_process_group_match_plain_pytorch(self) -> None:
        self.run_ranks(3, "torch")

    def test_three_ranks_on_ballast_collectives_match_plain_pytorch(self) -> None:
        self.run_ranks(3, "ballast")


if __name__ == "__main__":
    unittest.main()
