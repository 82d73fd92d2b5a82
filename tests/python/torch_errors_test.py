"""ballast.torch refuses bad input with an exception that names what is wrong, and keeps
working afterwards: use before init, wrong dtype, device, shape or layout, bad configs,
malformed plans, unsupported optimizer settings and training patterns. One process, a
world of one Gloo rank (the checks are local; the multi-rank paths are in
torch_layers_test.py).
"""
from __future__ import annotations

import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(__file__))
from torch_testing import OneRankTestCase  # noqa: E402

import ballast.torch as bt  # noqa: E402


class BeforeInitTest(unittest.TestCase):
    def test_layers_and_init_need_their_prerequisites(self) -> None:
        self.assertFalse(bt.is_initialized())
        with self.assertRaisesRegex(RuntimeError, r"ballast.torch.init\(\) has not been called"):
            bt.ParallelMLP(8, 16)
        with self.assertRaisesRegex(RuntimeError, "torch.distributed is not initialized"):
            bt.init(job="early")


class ErrorsTest(OneRankTestCase):
    JOB = "errors"

    def setUp(self) -> None:
        self.mlp = bt.ParallelMLP(8, 32, unit_size=8)
        self.good = torch.randn(4, 2, 8)

    def tearDown(self) -> None:
        # Whatever was refused, the layer still trains.
        x = torch.randn(4, 2, 8, requires_grad=True)
        opt = bt.AdamW(self.mlp.parameters())
        opt.zero_grad()
        y, _ = self.mlp(x)
        y.sum().backward()
        opt.step()
        self.assertEqual(x.grad.shape, x.shape)
        self.assertFalse(bt.session().in_step)

    def test_second_init_is_refused(self) -> None:
        with self.assertRaisesRegex(RuntimeError, "already called"):
            bt.init(job="again")

    def test_tensors_of_the_wrong_kind_are_named(self) -> None:
        with self.assertRaisesRegex(TypeError, "dtype torch.float64"):
            self.mlp(self.good.double())
        with self.assertRaisesRegex(TypeError, "dtype torch.bfloat16"):
            self.mlp(self.good.bfloat16())
        with self.assertRaisesRegex(ValueError, "is on meta"):
            self.mlp(torch.empty(4, 2, 8, device="meta"))
        with self.assertRaisesRegex(ValueError, r"shape \(8, 8\), expected 3 dimensions"):
            self.mlp(torch.randn(8, 8))
        with self.assertRaisesRegex(ValueError, "hidden size 8 last"):
            self.mlp(torch.randn(4, 2, 9))
        with self.assertRaisesRegex(ValueError, "not contiguous"):
            self.mlp(torch.randn(2, 4, 8).transpose(0, 1))
        with self.assertRaisesRegex(TypeError, "must be a torch.Tensor"):
            self.mlp([1.0, 2.0])
        attn = bt.ParallelSelfAttention(8, 2)
        with self.assertRaisesRegex(ValueError, "attention masks are not supported"):
            attn(self.good, attention_mask=torch.ones(4, 4))

    def test_bad_configs_name_the_field(self) -> None:
        with self.assertRaisesRegex(ValueError, "unit_size"):
            bt.ParallelMLP(8, 30, unit_size=8)
        with self.assertRaisesRegex(ValueError, "not divisible by num_attention_heads 3"):
            bt.ParallelSelfAttention(8, 3)
        with self.assertRaisesRegex(ValueError, "num_query_groups 3 must divide num_heads 4"):
            bt.ParallelSelfAttention(8, 4, num_query_groups=3)
        with self.assertRaisesRegex(ValueError, "rotary needs an even head_dim"):
            bt.ParallelSelfAttention(12, 4, kv_channels=3, rotary=True)
        with self.assertRaisesRegex(ValueError, "activation 'relu'"):
            bt.ParallelMLP(8, 16, unit_size=8, activation="relu")
        with self.assertRaisesRegex(ValueError, r"owner_of_unit\[1\] = 2 out of range \[0, 1\)"):
            bt.ParallelMLP(8, 16, unit_size=8, owner_of_unit=[0, 2])
        with self.assertRaisesRegex(ValueError, "priority 'fastest'"):
            bt.ParallelMLP(8, 16, priority="fastest")
        with self.assertRaisesRegex(ValueError, "amsgrad"):
            bt.AdamW(self.mlp.parameters(), amsgrad=True)

    def test_malformed_plans_are_refused_and_never_applied(self) -> None:
        s = bt.session()
        block = self.mlp.block_id
        with self.assertRaisesRegex(ValueError, "unknown plan block key 'prune'"):
            s.offer_plan(1000, [{"block": block, "prune": [1]}])
        with self.assertRaisesRegex(ValueError, "helper 3 out of range"):
            s.offer_plan(1000, [{"block": block, "offloads": [(0, 3, 1)]}])
        with self.assertRaisesRegex(ValueError, "imputation"):
            s.offer_plan(1000, [{"block": block}], imputation="median")
        with self.assertRaisesRegex(ValueError, "priority 'loudest'"):
            s.offer_plan(1000, [{"block": block}], priority="loudest")
        with self.assertRaisesRegex(ValueError, "block 999"):
            s.offer_plan(1000, [{"block": 999}])
        # Replicas ({unit, helper, share}): the parser names the field of a wrong type, the
        # plan validator the value that does not fit (an MLP's units are computed whole).
        for replicas, error in (
                ({"unit": 0, "helper": 0, "share": 0.5},
                 r"blocks\[0\]\.replicas must be a list of \{unit, helper, share\} dicts, "
                 "not dict"),
                ([(0, 0, 0.5)], r"blocks\[0\]\.replicas\[0\] must be a dict"),
                ([{"unit": 0, "helper": 0}], r"blocks\[0\]\.replicas\[0\] has no 'share'"),
                ([{"unit": 0, "helper": 0, "share": 0.5, "owner": 1}],
                 r"blocks\[0\]\.replicas\[0\] has unknown key 'owner'"),
                ([{"unit": 0, "helper": 0, "share": 1.0}, {"unit": 1.5, "helper": 0, "share": 1}],
                 r"blocks\[0\]\.replicas\[1\]\.unit must be a 32-bit int, not 1\.5"),
                ([{"unit": 0, "helper": "0", "share": 0.5}],
                 r"blocks\[0\]\.replicas\[0\]\.helper must be a 32-bit int, not '0'"),
                ([{"unit": 0, "helper": 0, "share": "half"}],
                 r"blocks\[0\]\.replicas\[0\]\.share must be a number, not 'half'"),
                ([{"unit": 0, "helper": 0, "share": 0.5}], "replicas need a block whose units")):
            with self.assertRaisesRegex(ValueError, error):
                s.offer_plan(1000, [{"block": block, "replicas": replicas}])
        # A capacity cap: a number, finite and >= 0, on a block whose units divide.
        for factor, error in (
                ("1.0", r"blocks\[0\]\.capacity_factor must be a number, not '1\.0'"),
                (True, r"blocks\[0\]\.capacity_factor must be a number, not True"),
                (-1.0, r"block \d+: capacity_factor -1 must be finite and >= 0"),
                (float("nan"), r"block \d+: capacity_factor nan must be finite"),
                (1.5, r"block \d+: capacity_factor 1\.5 needs a block whose units")):
            with self.assertRaisesRegex(ValueError, error):
                s.offer_plan(1000, [{"block": block, "capacity_factor": factor}])
        applied = s.applied_version
        self.mlp(self.good)
        bt.end_step()
        self.assertEqual(s.applied_version, applied)

    def test_unsupported_training_patterns_are_named(self) -> None:
        x = torch.randn(4, 2, 8, requires_grad=True)
        first, _ = self.mlp(x)
        second, _ = self.mlp(x)  # a second micro-batch before the first's backward
        with self.assertRaisesRegex(RuntimeError, "replaced"):
            first.sum().backward()
        second.sum().backward()
        once = self.mlp.dense("grad")
        third, _ = self.mlp(x)  # a second micro-batch: its gradients add to the first's
        third.sum().backward()
        torch.testing.assert_close(self.mlp.dense("grad"), 2 * once)
        opt = bt.AdamW(self.mlp.parameters())
        opt.zero_grad()  # drops them: the next backward writes afresh
        fourth, _ = self.mlp(x)
        fourth.sum().backward()
        torch.testing.assert_close(self.mlp.dense("grad"), once)
        opt.zero_grad()
        bt.end_step()

    def test_torch_s_own_clipping_is_refused_by_name(self) -> None:
        # torch.nn.utils.clip_grad_norm_ sees none of Ballast's gradients and scales the
        # handle's marker in place: refused at the next step, gradients left as they were.
        x = torch.randn(4, 2, 8, requires_grad=True)
        y, _ = self.mlp(x)
        y.sum().backward()
        before = self.mlp.dense("grad")
        torch.nn.utils.clip_grad_norm_(self.mlp.parameters(), 1e-3)
        opt = bt.AdamW(self.mlp.parameters())
        with self.assertRaisesRegex(RuntimeError, "clip with ballast.torch.clip_grad_norm_"):
            opt.step()
        torch.testing.assert_close(self.mlp.dense("grad"), before)
        opt.zero_grad()  # a zero_grad() recovers
        bt.end_step()


if __name__ == "__main__":
    unittest.main()
