"""Helpers shared by the ballast.torch tests."""
from __future__ import annotations

import tempfile
import unittest
from typing import List, Optional, Set

import torch.distributed as dist

import ballast.torch as bt


class OneRankTestCase(unittest.TestCase):
    """A world of one Gloo rank in this process, with a Ballast session on it, for the
    tests whose checks are local (the multi-rank paths run real ranks as processes)."""

    JOB = "test"

    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = tempfile.TemporaryDirectory()
        dist.init_process_group("gloo", init_method=f"file://{cls.tmp.name}/rv", rank=0,
                                world_size=1)
        bt.init(job=cls.JOB)

    @classmethod
    def tearDownClass(cls) -> None:
        bt.shutdown()
        dist.destroy_process_group()
        cls.tmp.cleanup()


def pruned_units(layer, group) -> Set[int]:
    """Units of a Ballast layer pruned anywhere in the group this step (each owner picks
    its own)."""
    mine = [u for u, f in zip(layer.local_units, layer.local_fates) if f == "pruned"]
    everyone: List[Optional[List[int]]] = [None] * dist.get_world_size(group)
    dist.all_gather_object(everyone, mine, group=group)
    return {u for part in everyone for u in part}
