"""ballast.torch on CUDA tensors against plain PyTorch on the same GPU (skipped without one).

The layers and LLM scenarios of torch_layers_test.py and torch_llm_test.py (empty,
offload, reshard with a state-dict round trip, prune; grouped-query causal attention with
RoPE, SwiGLU, micro-batches, recompute), with the models, data and Ballast's blocks on
cuda:0:
- 1 rank on an NCCL group: Ballast's NCCL communicator on torch's stream;
- 2 and 3 ranks (processes) sharing the one GPU on a Gloo group: Ballast's host-staged
  collectives (NCCL refuses two ranks on one device).
Also: a layer run on another stream than the one Ballast was set up on is refused by
name. scripts/gpu-check runs this on a
lent GPU.
"""
from __future__ import annotations

import os
import sys
import tempfile
import unittest

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(__file__))
import torch_layers_test as layers  # noqa: E402
import torch_llm_test as llm  # noqa: E402

import ballast.torch as bt  # noqa: E402

CUDA = torch.device("cuda", 0)


def one_rank(_: int, path: str) -> None:
    layers.DEVICE = llm.DEVICE = CUDA
    torch.cuda.set_device(CUDA)
    dist.init_process_group("nccl", init_method=f"file://{path}", rank=0, world_size=1)
    s = bt.init(job="cuda1")
    assert s.compute_device == CUDA and s.collectives == "ballast", (s.compute_device,
                                                                     s.collectives)
    group = dist.group.WORLD
    model, dense = layers.build()
    opt = bt.AdamW(model.parameters(), **layers.ADAMW)
    ref_opt = torch.optim.AdamW(dense.parameters(), **layers.ADAMW)
    layers.train_and_compare(model, dense, opt, ref_opt, group, 3, 0)
    s.offer_plan(1, [{"block": model.attn.block_id, "pruned_units": [1]},
                     {"block": model.mlp.block_id, "pruned_units": [2]}])
    layers.train_and_compare(model, dense, opt, ref_opt, group, 2, 3, expect_pruned=True)
    version = 1
    for case in llm.CASES:
        version += 1
        llm.train_case(case, "empty", version, group, 1)
    # The layers keep to the stream Ballast was set up on.
    x = torch.randn(layers.SEQ, layers.BATCH, layers.HIDDEN, device=CUDA)
    with torch.cuda.stream(torch.cuda.Stream()):
        try:
            model(x)
        except RuntimeError as e:
            assert "current CUDA stream" in str(e), e
        else:
            raise AssertionError("a forward on another stream was not refused")
    opt.zero_grad()
    bt.end_step()
    bt.shutdown()
    dist.destroy_process_group()


def shared_gpu(rank: int, size: int, path: str) -> None:
    torch.set_num_threads(1)
    layers.DEVICE = llm.DEVICE = CUDA
    torch.cuda.set_device(CUDA)
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=size)
    s = bt.init(job="cuda-shared", compute_device="cuda:0")
    assert s.compute_device == CUDA and s.collectives == "ballast", (s.compute_device,
                                                                     s.collectives)
    layers.scenarios(rank, size, dist.group.WORLD)
    version = 100
    for case in llm.CASES[1:3]:
        for plan in llm.PLANS:
            version += 1
            try:
                llm.train_case(case, plan, version, dist.group.WORLD, size)
            except AssertionError as e:
                raise AssertionError(f"{size} ranks, {case}, {plan} plan: {e}") from e
    llm.check_causality()
    dist.barrier()
    bt.shutdown()
    dist.destroy_process_group()


@unittest.skipUnless(torch.cuda.is_available(), "needs a CUDA device and a CUDA build of torch")
class TorchCudaTest(unittest.TestCase):
    def test_one_rank_on_nccl_matches_plain_pytorch_on_the_gpu(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            mp.spawn(one_rank, args=(os.path.join(tmp, "rendezvous"),), nprocs=1)

    def run_shared(self, size: int) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            mp.spawn(shared_gpu, args=(size, os.path.join(tmp, "rendezvous")), nprocs=size)

    def test_two_ranks_sharing_the_gpu_match_plain_pytorch(self) -> None:
        self.run_shared(2)

    def test_three_ranks_sharing_the_gpu_match_plain_pytorch(self) -> None:
        self.run_shared(3)


if __name__ == "__main__":
    unittest.main()
