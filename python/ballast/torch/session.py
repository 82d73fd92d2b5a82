"""The Ballast session of one training process: its TP group, plans and step boundaries.

One process belongs to one TP group, so there is one session per process::

    import torch.distributed as dist
    import ballast.torch as bt

    dist.init_process_group("gloo", ...)
    tp_group = dist.new_group([0, 1])               # the job's own TP group
    bt.init(tp_group, job="vit", agent_socket="/run/ballast/agent.sock")

Steps open by themselves at the first Ballast layer's forward and close at
``ballast.torch.AdamW.step()``, so a plain training loop needs no extra calls. At each
step's start the group agrees on the newest plan every rank holds (one tiny collective)
and applies it; see worker_lib/include/ballast/tp_group.h for the protocol.
"""
from __future__ import annotations

import contextlib
import socket
from typing import Any, Dict, Iterator, List, Optional

import torch.distributed as dist

from ballast.torch import _C

_session: Optional["Session"] = None


class Session:
    """A handle on this process's Ballast state; get it from :func:`init` or :func:`session`."""

    def __init__(self, core: "_C.Session", process_group: dist.ProcessGroup, job: str,
                 collectives: str) -> None:
        self._core = core
        self.process_group = process_group
        self.job = job
        self.collectives = collectives
        self._next_block_id = 0

    @property
    def rank(self) -> int:
        """This process's rank inside the TP group."""
        return self._core.rank

    @property
    def size(self) -> int:
        return self._core.size

    @property
    def group(self) -> str:
        """The TP group's cluster-wide name (plans and metrics use it)."""
        return self._core.group

    @property
    def step(self) -> int:
        return self._core.step

    @property
    def in_step(self) -> bool:
        return self._core.in_step

    @property
    def applied_version(self) -> int:
        return self._core.applied_version

    @property
    def applied_plan_number(self) -> int:
        """The plan's number in its group (1, 2, ...; 0 before the first): for people."""
        return self._core.applied_plan_number

    @property
    def applied_plan(self) -> str:
        """A one-line summary of the plan in force."""
        return self._core.applied_plan

    @property
    def applied_plan_blocks(self) -> List[Dict[str, Any]]:
        """The plan in force, as the block dicts :meth:`offer_plan` takes."""
        return self._core.applied_plan_blocks

    @property
    def last_step_timings(self) -> Dict[str, Any]:
        """Compute vs collective seconds of the last completed step, per block."""
        return self._core.last_step_timings

    @property
    def agent_stats(self) -> Optional[Dict[str, Any]]:
        """The agent client's counters, or None without an agent."""
        return self._core.agent_stats

    def begin_step(self) -> None:
        """Collective: agrees on and applies the newest plan. Layers call it when needed."""
        self._core.begin_step()

    def end_step(self) -> None:
        """Closes the step (timings; reported to the agent when there is one)."""
        self._core.end_step()

    def ensure_step(self) -> None:
        if not self._core.in_step:
            self._core.begin_step()

    def offer_plan(self, version: int, blocks: List[Dict[str, Any]],
                   imputation: str = "zero", priority: Optional[str] = None) -> None:
        """Hands in a plan, as the agent does; applied at a step start once every rank holds it.

        ``blocks``: dicts with ``block`` (a layer's ``block_id``), and optionally
        ``pruned_units`` (per rank), ``offloads`` ([(owner, helper, units)]) and
        ``owner_of_unit`` (a reshard). ``priority``: the job's priority policy, which the
        layers adopt at their next priority window (None: each keeps its own). Raises
        ValueError naming a malformed field.
        """
        self._core.offer_plan(version, blocks, imputation, priority)

    def _new_block_id(self, block_id: Optional[int]) -> int:
        # Every rank builds the same layers in the same order (SPMD), so counting gives
        # every rank the same ids without talking.
        if block_id is None:
            block_id = self._next_block_id
        self._next_block_id = max(self._next_block_id, block_id + 1)
        return block_id


def init(tp_group: Optional[dist.ProcessGroup] = None, *, job: str,
         group: Optional[str] = None, agent_socket: Optional[str] = None,
         device: Optional[str] = None, node: Optional[str] = None,
         plan_history: int = 16, collectives: str = "torch",
         timeout: float = 60.0) -> Session:
    """Starts Ballast on the job's TP group (default: the world group).

    Args:
      tp_group: the process group Ballast's collectives run on, e.g. ``dist.new_group(...)``.
      job: the job's name, as the coordinator and ``ballastctl`` show it.
      group: the TP group's cluster-wide name; default ``"<job>/tp<first global rank>"``.
      agent_socket: the node agent's Unix socket; with it, timings flow to the coordinator
        and plans come back exactly as for C++ workers. Without it, plans come only from
        :meth:`Session.offer_plan`.
      device, node: this rank's device and node names for the control plane; defaults
        ``"<node>/rank<global rank>"`` and the host name.
      plan_history: plans held per rank for agreement (TpGroupOptions::plan_history).
      collectives: where the layers' collectives run, both on the group's ranks:
        ``"torch"`` (default), on the process group itself (any backend); ``"ballast"``,
        on Ballast's own Gloo mesh (Gloo groups only), connected through the group's c10d
        store. Measured in the PyTorch ViT (docs/benchmarks.md): 9% slower without
        contention, 7% faster under a 2x straggler with Ballast balancing.
      timeout: seconds a Ballast collective waits for a missing peer (``"ballast"``; the
        process group's own timeout applies to ``"torch"``).
    """
    global _session
    if _session is not None:
        raise RuntimeError("ballast.torch.init() was already called in this process; "
                           "call ballast.torch.shutdown() first")
    if not job:
        raise ValueError("job must be a non-empty name")
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("torch.distributed is not initialized: call "
                           "dist.init_process_group() before ballast.torch.init()")
    if tp_group is None:
        tp_group = dist.distributed_c10d._get_default_group()
    if tp_group is dist.GroupMember.NON_GROUP_MEMBER:
        raise ValueError(f"global rank {dist.get_rank()} is not a member of tp_group")
    if not isinstance(tp_group, dist.ProcessGroup):
        raise TypeError(f"tp_group must be a torch.distributed ProcessGroup, "
                        f"not {type(tp_group).__name__}")
    global_ranks = dist.distributed_c10d._pg_group_ranks.get(tp_group)
    first = min(global_ranks) if global_ranks else 0
    name = group or f"{job}/tp{first}"
    backend = dist.get_backend(tp_group)
    if collectives not in ("torch", "ballast"):
        raise ValueError(f"collectives '{collectives}' is not one of torch, ballast")
    store = None
    if collectives == "ballast":
        if backend != dist.Backend.GLOO:
            raise ValueError(f"collectives 'ballast' needs a Gloo group, not {backend}")
        store = dist.distributed_c10d._pg_map[tp_group][1]  # the group's own (prefixed) store
    if not timeout > 0:
        raise ValueError(f"timeout {timeout} must be > 0 seconds")
    core = _C.Session(tp_group, name, plan_history=plan_history, collectives=collectives,
                      store=store, timeout_seconds=timeout)
    if agent_socket is not None:
        node = node or socket.gethostname()
        core.connect_agent(agent_socket, job, device or f"{node}/rank{dist.get_rank()}", node)
    _session = Session(core, tp_group, job, collectives)
    return _session


def session() -> Session:
    """The process's session; raises RuntimeError before :func:`init`."""
    if _session is None:
        raise RuntimeError("ballast.torch.init() has not been called in this process")
    return _session


def is_initialized() -> bool:
    return _session is not None


def shutdown() -> None:
    """Forgets the session (layers built on it keep it alive until they go)."""
    global _session
    _session = None


def end_step() -> None:
    """Closes the open step, if any (the optimizer does this; evaluation loops may too)."""
    if _session is not None and _session.in_step:
        _session.end_step()


@contextlib.contextmanager
def step() -> Iterator[Session]:
    """Explicit step boundaries, for loops that do not use ``ballast.torch.AdamW``."""
    s = session()
    s.ensure_step()
    try:
        yield s
    finally:
        if s.in_step:
            s.end_step()

