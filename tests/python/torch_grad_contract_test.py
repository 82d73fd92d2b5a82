"""ballast.torch's gradient contract against plain PyTorch, on 2 real ranks (processes, Gloo).

Ballast layers keep their gradients until a ``zero_grad()``, across optimizer steps and
step boundaries, as torch parameters do (issue 36). Each case trains the model of
torch_reference.py with Ballast's attention and MLP next to the same model in plain torch
(loaded from its state dict) on the same data, and compares with torch: (a) a backward and
an optimizer step, twice, without zero_grad(): the gradients and the weights; (b) two
backwards with a step boundary between: the summed gradients; (c) the model's zero_grad()
and a plain torch optimizer's zero_grad(set_to_none=True) between backwards: only the
later gradients; (d) clip_grad_norm_ over gradients accumulated across an optimizer step:
the norm, the clipped gradients and the weights after the next step. Every case runs with
no plan and with offloads (the helper's returned gradients add to pending ones).
"""
from __future__ import annotations

import os
import sys
import tempfile
import unittest
from typing import Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(__file__))
import torch_reference as ref_lib  # noqa: E402

import ballast.torch as bt  # noqa: E402

HIDDEN, HEADS, FFN, UNIT, CLASSES, SEQ, BATCH = 8, 2, 32, 8, 3, 4, 2
# eps well above round-off: see torch_layers_test.py (the key bias's zero true gradient).
ADAMW = dict(lr=1e-2, betas=(0.9, 0.99), eps=1e-3, weight_decay=0.05)
TOL = dict(rtol=1e-4, atol=2e-5)
CLIP = 0.05  # below the accumulated gradients' norm here, so clipping acts


def close(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    torch.testing.assert_close(got, want, **TOL, msg=lambda m: f"{what}: {m}")


class Models:
    """A Ballast model, its plain-torch twin, and an AdamW for each."""

    def __init__(self, offload: bool, version: int) -> None:
        attn = bt.ParallelSelfAttention(HIDDEN, HEADS, seed=11)
        mlp = bt.ParallelMLP(HIDDEN, FFN, unit_size=UNIT, seed=12)
        self.model = ref_lib.Model(attn, mlp, HIDDEN, CLASSES)
        self.dense = ref_lib.Model(ref_lib.DenseAttention(HIDDEN, HEADS),
                                   ref_lib.DenseMLP(HIDDEN, FFN, UNIT, skip_bias_add=False),
                                   HIDDEN, CLASSES)
        self.dense.load_state_dict(self.model.state_dict())
        self.opt = bt.AdamW(self.model.parameters(), **ADAMW)
        self.ref_opt = torch.optim.AdamW(self.dense.parameters(), **ADAMW)
        self.version = version
        if offload:  # rank 1's units partly computed by rank 0, from the first step on
            bt.session().offer_plan(version, [
                {"block": attn.block_id, "offloads": [(1, 0, 1)]},
                {"block": mlp.block_id, "offloads": [(1, 0, 1)]}])

    def backward(self, i: int) -> None:
        """One micro-batch's forward and backward on both models."""
        g = torch.Generator().manual_seed(1000 + i)
        x = torch.randn(SEQ, BATCH, HIDDEN, generator=g)
        y = torch.randint(0, CLASSES, (BATCH,), generator=g)
        for model in (self.model, self.dense):
            F.cross_entropy(model(x), y).backward()

    def step(self) -> None:
        self.opt.step()
        self.ref_opt.step()

    def expect_grads(self, what: str) -> None:
        for name in ("attn", "mlp"):
            layer = getattr(self.model, name)
            for key, g in layer._to_named(layer.dense("grad")):
                want = getattr(self.dense, name).get_parameter(key).grad
                close(g, want, f"{what}: {name}.{key} gradient")

    def expect_weights(self, what: str) -> None:
        got = self.model.state_dict()
        for key, want in self.dense.state_dict().items():
            close(got[key], want, f"{what}: {key}")

    def finish(self, offload: bool) -> None:
        """Closes the case: no step open, no gradients left, the plan was in force."""
        self.opt.zero_grad()
        self.ref_opt.zero_grad()
        bt.end_step()
        if offload:
            assert bt.session().applied_version == self.version, bt.session().applied_plan


def optimizer_steps_leave_gradients(m: Models) -> None:
    m.backward(0)
    m.step()
    m.backward(1)  # adds to the first backward's gradients, in a new Ballast step
    m.expect_grads("two backwards, an optimizer step between")
    m.step()
    m.expect_weights("two optimizer steps without zero_grad()")


def step_boundaries_leave_gradients(m: Models) -> None:
    m.backward(0)
    first = bt.session().step
    bt.end_step()
    m.backward(1)
    assert bt.session().step > first, "no step boundary between the backwards"
    m.expect_grads("two backwards, bt.end_step() between")


def zero_grad_drops_gradients(m: Models) -> None:
    m.backward(0)
    m.step()
    m.model.zero_grad()  # torch 1.13's default zeroes in place (set_to_none=False)
    m.dense.zero_grad()
    m.backward(1)
    m.expect_grads("model.zero_grad() before the backward")
    for model in (m.model, m.dense):  # any torch optimizer over the model's parameters
        torch.optim.SGD(model.parameters(), lr=0.0).zero_grad(set_to_none=True)
    m.backward(2)
    m.expect_grads("torch.optim.SGD.zero_grad(set_to_none=True) before the backward")
    m.step()
    m.expect_weights("a step after zero_grad() calls")


def clipping_sees_accumulated_gradients(m: Models) -> None:
    m.backward(0)
    m.step()
    m.backward(1)
    got = bt.clip_grad_norm_(m.model.parameters(), CLIP)
    want = torch.nn.utils.clip_grad_norm_(m.dense.parameters(), CLIP)
    close(got.float(), want.float(), "the accumulated gradients' norm")
    assert want > CLIP, f"norm {want} does not clip"
    m.expect_grads("clipped accumulated gradients")
    m.step()
    m.expect_weights("a step on clipped accumulated gradients")


CASES = {case.__name__: case for case in (
    optimizer_steps_leave_gradients, step_boundaries_leave_gradients,
    zero_grad_drops_gradients, clipping_sees_accumulated_gradients)}


def worker(rank: int, size: int, path: str, case: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=size)
    bt.init(job="grads")
    for version, offload in enumerate((False, True), start=1):
        models = Models(offload, version)
        try:
            CASES[case](models)
        except AssertionError as e:
            raise AssertionError(f"{'offload' if offload else 'no'} plan: {e}") from e
        models.finish(offload)
    dist.barrier()
    dist.destroy_process_group()


class GradientContractTest(unittest.TestCase):
    def run_case(self, case: Callable[[Models], None]) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            mp.spawn(worker, args=(2, os.path.join(tmp, "rendezvous"), case.__name__),
                     nprocs=2)

    def test_optimizer_steps_leave_gradients_as_torch_does(self) -> None:
        self.run_case(optimizer_steps_leave_gradients)

    def test_step_boundaries_leave_gradients(self) -> None:
        self.run_case(step_boundaries_leave_gradients)

    def test_any_zero_grad_drops_ballast_gradients_as_torch_s(self) -> None:
        self.run_case(zero_grad_drops_gradients)

    def test_clipping_sees_accumulated_gradients_as_torch_does(self) -> None:
        self.run_case(clipping_sees_accumulated_gradients)


if __name__ == "__main__":
    unittest.main()
