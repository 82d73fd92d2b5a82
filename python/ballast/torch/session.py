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
from typing import Any, Dict, Iterator, List, Optional, Union

import torch
import torch.distributed as dist

from ballast.torch import _C

_session: Optional["Session"] = None


class Session:
    """A handle on this process's Ballast state; get it from :func:`init` or :func:`session`."""

    def __init__(self, core: "_C.Session", process_group: dist.ProcessGroup, job: str,
                 collectives: str, device: torch.device,
                 cuda_stream: Optional[int]) -> None:
        self._core = core
        self.process_group = process_group
        self.job = job
        self.collectives = collectives
        #: Where the layers' tensors live: ``cpu`` or ``cuda:N`` (``init(compute_device=)``).
        self.compute_device = device
        # CUDA: the stream Ballast queues its work on (torch's current one at init).
        self._cuda_stream = cuda_stream
        self._next_block_id = 0

    def check_stream(self, what: str) -> None:
        """Raises unless torch's current CUDA stream is the one Ballast works on: kernels
        on two streams with no event between them would race."""
        if self._cuda_stream is None:
            return
        current = torch.cuda.current_stream(self.compute_device).cuda_stream
        if current != self._cuda_stream:
            raise RuntimeError(
                f"{what}: torch's current CUDA stream ({current:#x}) is not the one Ballast's "
                f"layers run on ({self._cuda_stream:#x}, torch's current stream at "
                f"ballast.torch.init()); run them on that stream")

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
        ``pruned_units`` (per rank), ``offloads`` ([(owner, helper, units)]),
        ``owner_of_unit`` (a reshard) and, for a ParallelMoE, ``replicas``
        ([{"unit", "helper", "share"}]: the helper computes that share of the expert's
        tokens, the owner what the shares leave) and ``capacity_factor`` (each expert keeps at
        most that many times its even share of a Forward's tokens). ``priority``: the job's
        priority policy,
        which the layers adopt at their next priority window (None: each keeps its own).
        Raises ValueError naming a malformed field.
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
         plan_history: int = 16, collectives: Optional[str] = None,
         timeout: float = 60.0,
         compute_device: Optional[Union[str, torch.device]] = None,
         gemm_precision: str = "fp32") -> Session:
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
      collectives: where the layers' collectives run, both on the group's ranks. On the
        CPU: ``"torch"`` (the default there), on the process group itself (any backend);
        ``"ballast"``, on Ballast's own Gloo mesh (Gloo groups only), connected through
        the group's c10d store. Measured in the PyTorch ViT (docs/benchmarks.md): 9%
        slower without contention, 7% faster under a 2x straggler with Ballast
        balancing. On CUDA only ``"ballast"`` (the default there): Ballast's own NCCL
        communicator on an NCCL group, queued on the stream; on a Gloo group, Gloo over
        pinned host copies, which lets several ranks share one GPU.
      timeout: seconds a Ballast collective may run, from when its inputs are ready,
        before the group is declared broken (``"ballast"``; the process group's own
        timeout applies to ``"torch"``).
      compute_device: where the layers' tensors live: ``"cpu"``, ``"cuda"`` (torch's
        current CUDA device) or ``"cuda:N"``. Default: CUDA on an NCCL group, else CPU.
        On CUDA, Ballast queues all its work on torch's current stream at this call, and
        its memory comes from a pool of its own (torch's allocator and the device's
        default pool are left alone).
      gemm_precision: ``"fp32"`` (default), ``"bf16"`` or ``"fp16"``: CUDA GEMMs with
        16-bit inputs on tensor cores, fp32 accumulation; weights, moments, activations
        and collectives stay fp32. The CPU computes in fp32 only.
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
    global_ranks = _c10d_world("pg_group_ranks").get(tp_group)
    first = min(global_ranks) if global_ranks else 0
    name = group or f"{job}/tp{first}"
    backend = str(dist.get_backend(tp_group))
    # torch 2.x names a group of several backends "cpu:gloo,cuda:nccl"; its CUDA tensors
    # go to NCCL.
    nccl = "nccl" in backend
    on = _compute_device(compute_device, nccl)
    if collectives is None:
        collectives = "ballast" if on.type == "cuda" else "torch"
    if collectives not in ("torch", "ballast"):
        raise ValueError(f"collectives '{collectives}' is not one of torch, ballast")
    if gemm_precision not in ("fp32", "bf16", "fp16"):
        raise ValueError(f"gemm_precision '{gemm_precision}' is not one of fp32, bf16, fp16")
    if on.type == "cpu" and gemm_precision != "fp32":
        raise ValueError(f"gemm_precision '{gemm_precision}' needs CUDA; the CPU computes fp32")
    store = None
    if collectives == "ballast":
        if on.type == "cpu" and backend != dist.Backend.GLOO:  # the mesh meets through it
            raise ValueError(f"collectives 'ballast' on the CPU needs a Gloo group, not "
                             f"{backend}")
        store = _c10d_world("pg_map")[tp_group][1]  # the group's own (prefixed) store
    elif on.type == "cuda":
        raise ValueError("collectives 'torch' with CUDA tensors is not built: on CUDA the "
                         "layers run Ballast's own collectives (NCCL on an NCCL group, "
                         "host-staged Gloo on a Gloo group); leave collectives unset")
    if not timeout > 0:
        raise ValueError(f"timeout {timeout} must be > 0 seconds")
    cuda_stream = torch.cuda.current_stream(on).cuda_stream if on.type == "cuda" else None
    core = _C.Session(tp_group, name, plan_history=plan_history, collectives=collectives,
                      store=store, timeout_seconds=timeout,
                      cuda_device=on.index if on.type == "cuda" else -1,
                      nccl=nccl, cuda_stream=cuda_stream or 0,
                      gemm_precision=gemm_precision)
    if agent_socket is not None:
        node = node or socket.gethostname()
        core.connect_agent(agent_socket, job, device or f"{node}/rank{dist.get_rank()}", node)
    _session = Session(core, tp_group, job, collectives, on, cuda_stream)
    return _session


def _c10d_world(table: str) -> Dict[Any, Any]:
    """One of torch.distributed's tables of process groups: ``_world.<table>`` in torch
    2.x, the module-level ``_<table>`` in 1.x."""
    world = getattr(dist.distributed_c10d, "_world", None)
    if world is not None and hasattr(world, table):
        return getattr(world, table)
    return getattr(dist.distributed_c10d, f"_{table}")


def _compute_device(compute_device: Optional[Union[str, torch.device]],
                    nccl: bool) -> torch.device:
    """The layers' device: ``compute_device``, or CUDA on a group with NCCL, else the CPU;
    a CUDA device without an index is torch's current one."""
    if compute_device is None:
        compute_device = "cuda" if nccl else "cpu"
    try:
        on = torch.device(compute_device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"compute_device {compute_device!r} is not a device: {e}") from e
    if on.type not in ("cpu", "cuda"):
        raise ValueError(f"compute_device {on} is neither cpu nor cuda")
    if on.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError(f"compute_device {on}: torch sees no CUDA device here "
                               f"(torch {torch.__version__}, CUDA build: "
                               f"{torch.version.cuda is not None})")
        index = torch.cuda.current_device() if on.index is None else on.index
        if not 0 <= index < torch.cuda.device_count():
            raise ValueError(f"compute_device {on}: only {torch.cuda.device_count()} CUDA "
                             f"devices are visible")
        on = torch.device("cuda", index)
    return on


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

