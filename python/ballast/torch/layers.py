"""Ballast's tensor-parallel layers as ``torch.nn.Module``s with autograd.

Each layer is one plan-aware TP block of worker_lib: the forward and backward run in
C++ on the tensors' memory, with the block's one all-reduce on the session's process
group, and the plan in force decides which units are computed where (local, offloaded
to a helper rank, or pruned). Torch ops compose around them freely.

Megatron-core's contract: inputs ``[s, b, h]`` (or ``[b, s, h]`` with
``batch_first=True``), outputs ``(output, bias)`` where ``bias`` is None unless
``skip_bias_add=True``, in which case the output leaves the bias out and the caller adds
it (its gradient is computed by the block from the output's gradient, exact whenever
the bias is added to the output, as every Megatron layer does).

Numerics to match: the MLP's GELU is the tanh approximation (``nn.GELU("tanh")``);
PyTorch's default erf GELU differs by about 2e-4 relative; SwiGLU is
``silu(fc1(x)) * fc1_up(x)``. Attention has biases on Q, K, V and the output projection,
softmax scale 1/sqrt(d); it is bidirectional unless ``causal=True``; grouped-query
attention shares K/V head g among query heads ``g*h/groups .. (g+1)*h/groups - 1`` (as
Hugging Face's ``repeat_kv``); RoPE (``rotary=True``) uses the rotate-half convention with
positions restarting at 0 in each sequence.

Micro-batches: run forward and backward per micro-batch, then one optimizer step. The
layers' gradients follow torch's contract: every backward adds to them, across optimizer
steps and step boundaries, until a ``zero_grad()`` drops them: the model's, or any
optimizer's holding the layer's ``ballast_handle``, whose ``.grad`` carries the signal.
``recompute=True`` keeps no activations between a layer's forward and backward (the
backward recomputes them), the memory-for-compute trade of activation checkpointing.

Ballast owns the parameters: they live in C++ in unit slabs that reorder (priority
windows) and move between ranks (reshards), so they are not ``nn.Parameter``s. Train
them with :class:`ballast.torch.AdamW`; ``state_dict()`` gives dense tensors whatever
the plan (and, like every gather, is collective: all ranks call it).
"""
from __future__ import annotations

import math
import weakref
from typing import List, Optional, Tuple

import torch
from torch import nn

from ballast.torch import _C
from ballast.torch.session import Session
from ballast.torch.session import session as _session

_PRIORITIES = ("change", "magnitude", "random", "round-robin")


def _check_input(x: torch.Tensor, hidden: int, what: str, device: torch.device) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{what}: input must be a torch.Tensor, not {type(x).__name__}")
    if x.dtype != torch.float32:
        raise TypeError(f"{what}: input has dtype {x.dtype}; Ballast's layers take "
                        f"torch.float32 (16-bit GEMMs: ballast.torch.init(gemm_precision=))")
    if x.device != device:
        raise ValueError(f"{what}: input is on {x.device}; this session's layers take "
                         f"tensors on {device} (ballast.torch.init(compute_device=))")
    if x.dim() != 3 or x.shape[2] != hidden:
        raise ValueError(f"{what}: input has shape {tuple(x.shape)}, expected 3 dimensions "
                         f"with hidden size {hidden} last")
    if x.numel() == 0:
        raise ValueError(f"{what}: input is empty")
    if not x.is_contiguous():
        raise ValueError(f"{what}: input is not contiguous; call .contiguous() first "
                         f"(Ballast copies nothing behind your back)")


class _BlockFunction(torch.autograd.Function):
    """One block's forward and backward; the layer's handle makes backward always run."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, handle: torch.Tensor, layer: "_BallastLayer",
                batch: int, seq: int, add_bias: bool) -> torch.Tensor:
        layer._session.check_stream(layer._name())
        y = torch.empty_like(x)
        layer._block.forward(x, batch, seq, y, add_bias)
        layer._forward_token += 1
        ctx.save_for_backward(x)  # the block reads x again in backward: keep it alive
        ctx.layer = layer
        ctx.token = layer._forward_token
        return y

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        layer: _BallastLayer = ctx.layer
        ctx.saved_tensors  # noqa: B018 (checks x was not modified in place)
        if ctx.token != layer._forward_token:
            raise RuntimeError(
                f"{layer._name()}: backward of a forward that a later forward of the same "
                f"layer replaced; a Ballast block differentiates its latest forward, so run "
                f"each micro-batch's backward before the next micro-batch's forward")
        layer._session.check_stream(layer._name())
        dy = dy.contiguous()
        dx = torch.empty_like(dy)
        layer._sync_zero_grad()  # before the block adds to gradients a zero_grad() dropped
        layer._block.backward(dy, dx)
        layer._mark_grads()
        # None for the handle: autograd leaves its .grad (the sentinel) alone.
        return dx, None, None, None, None, None


class _BallastLayer(nn.Module):
    """What both layers share: the block, its handle parameter, state_dict conversion."""

    def __init__(self, session: "Session", block: "_C.Block", skip_bias_add: bool,
                 batch_first: bool) -> None:
        super().__init__()
        self._session = session  # the one it was built on, even after a shutdown and re-init
        self._block = block
        self.skip_bias_add = skip_bias_add
        self.batch_first = batch_first
        self._forward_token = 0
        # A zero-size parameter: it puts the layer in model.parameters(), so the user's
        # optimizer param groups (and LR schedulers) reach it, and it makes autograd call
        # the block's backward even when the input needs no gradient.
        self.ballast_handle = nn.Parameter(torch.empty(0))
        self.ballast_handle._ballast_layer = weakref.ref(self)
        # While the block holds gradients, the handle's .grad is this zero-size sentinel,
        # and _sentinel_version its version then: how any zero_grad() reaches the block.
        self._grad_sentinel: Optional[torch.Tensor] = None
        self._sentinel_version = 0

    @property
    def block_id(self) -> int:
        return self._block.id

    @property
    def num_units(self) -> int:
        return self._block.num_units

    @property
    def owner_of_unit(self) -> List[int]:
        return list(self._block.owner_of_unit)

    @property
    def local_units(self) -> List[int]:
        """Unit ids this rank owns, in storage order."""
        return list(self._block.local_units)

    @property
    def local_fates(self) -> List[str]:
        """"local", "offloaded" or "pruned" for each local unit in the current step."""
        return list(self._block.local_fates)

    def _name(self) -> str:
        return f"{type(self).__name__} (block {self._block.id})"

    def _run(self, x: torch.Tensor, batch: int, seq: int) -> Tuple[torch.Tensor,
                                                                   Optional[torch.Tensor]]:
        self._session.ensure_step()
        y = _BlockFunction.apply(x, self.ballast_handle, self, batch, seq,
                                 not self.skip_bias_add)
        bias = self._block.output_bias().to(x.device) if self.skip_bias_add else None
        return y, bias

    def _run_tokens(self, hidden_states: torch.Tensor) -> Tuple[torch.Tensor,
                                                                 Optional[torch.Tensor]]:
        """The forward of a layer whose tokens are independent (the MLP; the MoE, whose
        routing is per token): [s, b, h] is already (s*b) rows, no copy."""
        _check_input(hidden_states, self.hidden_size, self._name(),
                     self._session.compute_device)
        a, b, _ = hidden_states.shape
        return self._run(hidden_states, a * b, 1)

    # --- Torch's gradient contract, through the handle's gradient. ---
    def _sync_zero_grad(self) -> None:
        """Drops the block's gradients if a zero_grad() reached the handle since the last
        backward: ``zero_grad(set_to_none=True)`` replaced the sentinel (with None), and
        ``zero_grad(set_to_none=False)`` turned its ``requires_grad`` off before zeroing
        it in place (both torch's and a module's do). Local, no collective.

        Any other in-place change of the handle's gradient (torch's own
        ``clip_grad_norm_``, a torch optimizer's weight decay, AMP's
        ``GradScaler.unscale_``, a hand-written ``p.grad.zero_()``) would silently
        mistreat Ballast's gradients, which are not torch tensors, so it raises instead.
        """
        sentinel = self._grad_sentinel
        if sentinel is None:
            return
        if self.ballast_handle.grad is not sentinel or not sentinel.requires_grad:
            self._discard_grads()
        elif sentinel._version != self._sentinel_version:
            raise RuntimeError(
                f"{self._name()}: the gradient of its ballast_handle was changed in place by "
                f"something other than zero_grad() (torch.nn.utils.clip_grad_norm_, a torch "
                f"optimizer's weight decay, AMP's GradScaler.unscale_); Ballast's gradients "
                f"live in C++, so clip with ballast.torch.clip_grad_norm_, train with "
                f"ballast.torch.AdamW, and drop gradients with zero_grad()")

    def _mark_grads(self) -> None:
        """After a backward: the block holds gradients, so the handle holds a sentinel,
        on the handle's device (a model moved to a GPU moves its handles too)."""
        if self._grad_sentinel is None:
            # requires_grad: zero_grad(set_to_none=False) turns it off, which tells a
            # zero_grad() from another in-place change (both bump the version).
            sentinel = torch.empty_like(self.ballast_handle.detach()).requires_grad_(True)
            self.ballast_handle.grad = sentinel
            self._grad_sentinel, self._sentinel_version = sentinel, sentinel._version

    # --- Optimizer hooks (ballast.torch.AdamW and clip_grad_norm_). ---
    def _has_grads(self) -> bool:
        self._sync_zero_grad()
        return self._block.has_gradients

    def _adamw_step(self, lr: float, betas: Tuple[float, float], eps: float,
                    weight_decay: float) -> None:
        # Like torch: a layer without gradients is not stepped, and a step leaves them.
        if self._has_grads():
            self._block.adamw_step(lr, betas[0], betas[1], eps, weight_decay)

    def _discard_grads(self) -> None:
        self._block.discard_gradients()
        self._grad_sentinel = None  # the next backward sets a fresh one

    @property
    def activation_bytes(self) -> int:
        """Bytes of activations the block holds for its backward (0 with recompute)."""
        return self._block.activation_bytes

    # --- Dense state. ---
    def dense(self, field: str = "value") -> torch.Tensor:
        """Collective: the whole block's dense ``field`` (value, grad, adam_m, adam_v)."""
        return self._block.gather_dense(field)

    def _layout(self) -> List[Tuple[str, Tuple[int, ...]]]:
        """State-dict keys and shapes in the block's dense order (MlpParams /
        AttentionParams); a matrix is stored as x @ W, (in, out), where nn.Linear keeps
        its transpose."""
        raise NotImplementedError

    def _to_named(self, dense: torch.Tensor) -> List[Tuple[str, torch.Tensor]]:
        layout = self._layout()
        parts = torch.split(dense, [math.prod(shape) for _, shape in layout])
        return [(name, part.view(shape).t().contiguous() if len(shape) == 2 else part.clone())
                for (name, shape), part in zip(layout, parts)]

    def _from_named(self, named: dict) -> torch.Tensor:
        parts = [named[name].reshape(shape[1], shape[0]).t() if len(shape) == 2 else named[name]
                 for name, shape in self._layout()]
        return torch.cat([p.detach().to("cpu", torch.float32).reshape(-1) for p in parts])

    def _save_to_state_dict(self, destination, prefix, keep_vars):  # noqa: D401
        # Dense and plan-independent; collective (every rank gathers the whole block).
        for name, tensor in self._to_named(self._block.gather_dense("value")):
            destination[prefix + name] = tensor

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict,
                              missing_keys, unexpected_keys, error_msgs):
        named = {}
        for key, _ in self._layout():
            if prefix + key in state_dict:
                named[key] = state_dict[prefix + key]
            else:
                missing_keys.append(prefix + key)
        if len(named) != len(self._layout()):
            return
        try:
            self._block.load_dense(self._from_named(named))
        except (ValueError, RuntimeError) as e:
            error_msgs.append(f"{prefix}: {e}")


def _block_args(session, block_id: Optional[int], seed: Optional[int], priority: str,
                priority_window: int, owner_of_unit: Optional[List[int]], recompute: bool):
    if priority not in _PRIORITIES:
        raise ValueError(f"priority '{priority}' is not one of {', '.join(_PRIORITIES)}")
    block_id = session._new_block_id(block_id)
    # keep_gradients: torch's contract, gradients outlive optimizer steps and step
    # boundaries until zero_grad() (the C++ default starts each step afresh).
    return dict(session=session._core, id=block_id,
                seed=block_id if seed is None else seed, priority=priority,
                priority_window=priority_window, owner_of_unit=list(owner_of_unit or []),
                recompute=bool(recompute), keep_gradients=True)


class ParallelMLP(_BallastLayer):
    """``linear_fc2(gelu_tanh(linear_fc1(x)))``, or with ``activation="swiglu"``
    ``linear_fc2(silu(linear_fc1(x)) * linear_fc1_up(x))``, split over the TP group.

    A unit is ``unit_size`` consecutive intermediate neurons (fc1 and fc1_up columns, fc2
    rows). State-dict keys (torch ``nn.Linear`` layout): ``linear_fc1.weight`` [ffn, h],
    ``linear_fc1.bias``, under SwiGLU ``linear_fc1_up.weight`` and ``.bias`` (same shapes),
    ``linear_fc2.weight`` [h, ffn], ``linear_fc2.bias``.
    """

    def __init__(self, hidden_size: int, ffn_hidden_size: int, *, unit_size: int = 64,
                 activation: str = "gelu", recompute: bool = False,
                 skip_bias_add: bool = False, batch_first: bool = False,
                 block_id: Optional[int] = None, seed: Optional[int] = None,
                 priority: str = "change", priority_window: int = 50,
                 owner_of_unit: Optional[List[int]] = None) -> None:
        s = _session()
        block = _C.Block.mlp(hidden=hidden_size, intermediate=ffn_hidden_size,
                             unit_size=unit_size, activation=activation,
                             **_block_args(s, block_id, seed, priority, priority_window,
                                           owner_of_unit, recompute))
        super().__init__(s, block, skip_bias_add, batch_first)
        self.hidden_size = hidden_size
        self.ffn_hidden_size = ffn_hidden_size
        self.unit_size = unit_size
        self.activation = activation
        self.recompute = recompute

    def forward(self, hidden_states: torch.Tensor) -> Tuple[torch.Tensor,
                                                             Optional[torch.Tensor]]:
        return self._run_tokens(hidden_states)

    def _layout(self):
        h, f = self.hidden_size, self.ffn_hidden_size
        up = ([("linear_fc1_up.weight", (h, f)), ("linear_fc1_up.bias", (f,))]
              if self.activation == "swiglu" else [])
        return ([("linear_fc1.weight", (h, f)), ("linear_fc1.bias", (f,))] + up +
                [("linear_fc2.weight", (f, h)), ("linear_fc2.bias", (h,))])


class ParallelSelfAttention(_BallastLayer):
    """Self-attention split over the TP group by K/V groups: multi-head by default,
    grouped-query with ``num_query_groups``, optionally causal and with RoPE.

    A unit is one K/V group: its query heads' Q columns, its K and V columns, and its query
    heads' rows of the output projection (one head under multi-head attention). State-dict
    keys (torch ``nn.Linear`` layout, heads concatenated): ``linear_q.weight``
    [heads*d, h], ``linear_k.weight`` and ``linear_v.weight`` [groups*d, h], their
    ``.bias``, ``linear_proj.weight`` [h, heads*d], ``linear_proj.bias``.
    """

    def __init__(self, hidden_size: int, num_attention_heads: int, *,
                 kv_channels: Optional[int] = None, num_query_groups: Optional[int] = None,
                 causal: bool = False, rotary: bool = False, rotary_base: float = 10000.0,
                 recompute: bool = False, skip_bias_add: bool = False,
                 batch_first: bool = False, block_id: Optional[int] = None,
                 seed: Optional[int] = None, priority: str = "change",
                 priority_window: int = 50, owner_of_unit: Optional[List[int]] = None) -> None:
        s = _session()
        if kv_channels is None:
            if num_attention_heads <= 0 or hidden_size % num_attention_heads != 0:
                raise ValueError(f"hidden_size {hidden_size} is not divisible by "
                                 f"num_attention_heads {num_attention_heads}; pass kv_channels")
            kv_channels = hidden_size // num_attention_heads
        groups = num_attention_heads if num_query_groups is None else num_query_groups
        block = _C.Block.attention(hidden=hidden_size, num_heads=num_attention_heads,
                                   head_dim=kv_channels, num_query_groups=groups,
                                   causal=bool(causal), rotary=bool(rotary),
                                   rotary_base=float(rotary_base),
                                   **_block_args(s, block_id, seed, priority, priority_window,
                                                 owner_of_unit, recompute))
        super().__init__(s, block, skip_bias_add, batch_first)
        self.hidden_size = hidden_size
        self.num_attention_heads = num_attention_heads
        self.num_query_groups = groups
        self.kv_channels = kv_channels
        self.causal = causal
        self.rotary = rotary
        self.recompute = recompute

    def forward(self, hidden_states: torch.Tensor,
                attention_mask: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor,
                                                                         Optional[torch.Tensor]]:
        if attention_mask is not None:
            raise ValueError(f"{self._name()}: attention masks are not supported; build the "
                             f"layer with causal=True for a decoder's causal mask")
        _check_input(hidden_states, self.hidden_size, self._name(),
                     self._session.compute_device)
        if self.batch_first:
            b, s, _ = hidden_states.shape
            return self._run(hidden_states, b, s)
        # The block wants each sequence's tokens together: [s, b, h] -> [b, s, h] and back.
        s, b, _ = hidden_states.shape
        y, bias = self._run(hidden_states.transpose(0, 1).contiguous(), b, s)
        return y.view(b, s, -1).transpose(0, 1).contiguous(), bias

    def _layout(self):
        h, a = self.hidden_size, self.num_attention_heads * self.kv_channels
        kv = self.num_query_groups * self.kv_channels
        return ([("linear_q.weight", (h, a)), ("linear_k.weight", (h, kv)),
                 ("linear_v.weight", (h, kv)), ("linear_q.bias", (a,)),
                 ("linear_k.bias", (kv,)), ("linear_v.bias", (kv,))] +
                [("linear_proj.weight", (a, h)), ("linear_proj.bias", (h,))])


class ParallelMoE(_BallastLayer):
    """A mixture-of-experts layer with Megatron-core's ``MoELayer`` contract: a router
    (``x @ router.weight.T`` logits, top-``moe_router_topk`` experts per token) and SwiGLU
    experts without biases, ``linear_fc2(silu(gate) * up)`` with ``gate, up =
    linear_fc1(x).chunk(2)`` (Megatron's gated linear unit), each token's output the
    gate-weighted sum of its experts' plus one output ``bias``.

    The experts are the block's units: plans offload an expert to a helper rank for a step
    (the helper computes all of its tokens), move its ownership, or prune it (it drops its
    tokens). The router and its input are replicated, so routing costs no dispatch traffic;
    the combine is the block's one all-reduce. Gates follow Megatron's router:
    ``moe_router_pre_softmax=False`` (default) is the softmax over the top-k logits,
    ``True`` the top-k of the softmax over every expert; ties go to the lower expert index.
    No token is dropped unless a plan caps the experts (``capacity_factor``, from the job's
    policy ``expert_capacity_factor``): each then keeps its first tokens up to the cap and
    drops the rest (``dropped_tokens``).

    Aux loss: with ``moe_aux_loss_coeff > 0``, the Switch load-balancing loss
    ``coeff * E / (T^2 k) * sum_e P_e c_e`` (T the tokens of the forward, P_e the sum of the
    full softmax's column e, c_e the tokens routed to expert e) is computed in forward and
    its gradient is added to the router's by the block itself in backward, scaled by
    :meth:`set_aux_loss_scale` (Megatron's ``MoEAuxLossAutoScaler``). **Do not add**
    :attr:`aux_loss` **to your loss**: it is a float for logging, and its gradient is
    already in. Set the scale to ``1 / micro_batches`` when the main loss is averaged over
    micro-batches (the default 1 fits a single micro-batch).

    Forward ``[s, b, h]`` (or ``[b, s, h]``; tokens are independent) returns
    ``(output, bias)`` as :class:`ParallelMLP`. State-dict keys (Megatron-core's):
    ``router.weight`` [E, h]; per expert i ``experts.local_experts.{i}.linear_fc1.weight``
    [2*ffn, h] (gate rows, then up rows) and ``experts.local_experts.{i}.linear_fc2.weight``
    [h, ffn]; and ``bias`` [h], Ballast's output bias (zero at start; Megatron's MoE with
    ``add_bias_linear=False`` has none).
    """

    def __init__(self, hidden_size: int, ffn_hidden_size: int, num_moe_experts: int, *,
                 moe_router_topk: int = 2, moe_router_pre_softmax: bool = False,
                 moe_aux_loss_coeff: float = 0.0, recompute: bool = False,
                 skip_bias_add: bool = False, batch_first: bool = False,
                 block_id: Optional[int] = None, seed: Optional[int] = None,
                 priority: str = "change", priority_window: int = 50,
                 owner_of_unit: Optional[List[int]] = None) -> None:
        s = _session()
        block = _C.Block.moe(hidden=hidden_size, ffn=ffn_hidden_size,
                             num_experts=num_moe_experts, top_k=moe_router_topk,
                             pre_softmax=bool(moe_router_pre_softmax),
                             aux_loss_coeff=float(moe_aux_loss_coeff),
                             **_block_args(s, block_id, seed, priority, priority_window,
                                           owner_of_unit, recompute))
        super().__init__(s, block, skip_bias_add, batch_first)
        self.hidden_size = hidden_size
        self.ffn_hidden_size = ffn_hidden_size
        self.num_moe_experts = num_moe_experts
        self.moe_router_topk = moe_router_topk
        self.moe_router_pre_softmax = bool(moe_router_pre_softmax)
        self.moe_aux_loss_coeff = float(moe_aux_loss_coeff)
        self.recompute = recompute

    def forward(self, hidden_states: torch.Tensor) -> Tuple[torch.Tensor,
                                                             Optional[torch.Tensor]]:
        return self._run_tokens(hidden_states)

    @property
    def aux_loss(self) -> float:
        """The load-balancing loss of the latest forward (0.0 before any, or with
        ``moe_aux_loss_coeff=0``), unscaled. For logging only: its gradient is already
        added in backward."""
        return float(self._block.aux_loss)

    @property
    def tokens_per_expert(self) -> List[int]:
        """Tokens routed to each expert by the latest forward (zeros before any), before
        a plan's capacity cap: the router's load."""
        return list(self._block.expert_tokens)

    @property
    def dropped_tokens(self) -> int:
        """(token, expert) pairs a plan's capacity cap (``capacity_factor``) dropped in the
        latest forward, over all experts: 0 without a cap."""
        return int(self._block.dropped_tokens)

    def set_aux_loss_scale(self, scale: float) -> None:
        """Scales the aux loss's gradient in every later backward, as Megatron's
        ``MoEAuxLossAutoScaler.set_loss_scale``: ``1 / micro_batches`` when the main loss
        is averaged over micro-batches (times the loss scale under loss scaling)."""
        if not math.isfinite(float(scale)):
            raise ValueError(f"{self._name()}: aux loss scale {scale} is not finite")
        self._block.set_aux_loss_scale(float(scale))

    # The dense order is MoeParams': w1, w3 (E x h x ffn each), w2 (E x ffn x h), router
    # (h x E), b2 (h), stored as x @ W; Megatron's keys are nn.Linear's transposes, with
    # each expert's w1 and w3 stacked into one linear_fc1.
    def _layout(self):
        """State-dict keys and their (torch) shapes, in state-dict order."""
        h, f, n = self.hidden_size, self.ffn_hidden_size, self.num_moe_experts
        experts = []
        for i in range(n):
            experts += [(f"experts.local_experts.{i}.linear_fc1.weight", (2 * f, h)),
                        (f"experts.local_experts.{i}.linear_fc2.weight", (h, f))]
        return [("router.weight", (n, h))] + experts + [("bias", (h,))]

    def _dense_parts(self, dense: torch.Tensor):
        h, f, n = self.hidden_size, self.ffn_hidden_size, self.num_moe_experts
        w1, w3, w2, router, b2 = torch.split(dense, [n * h * f] * 3 + [h * n, h])
        return (w1.view(n, h, f), w3.view(n, h, f), w2.view(n, f, h), router.view(h, n), b2)

    def _to_named(self, dense: torch.Tensor) -> List[Tuple[str, torch.Tensor]]:
        w1, w3, w2, router, b2 = self._dense_parts(dense)
        named = [("router.weight", router.t().contiguous())]
        for i in range(self.num_moe_experts):
            named += [(f"experts.local_experts.{i}.linear_fc1.weight",
                       torch.cat([w1[i].t(), w3[i].t()])),
                      (f"experts.local_experts.{i}.linear_fc2.weight", w2[i].t().contiguous())]
        return named + [("bias", b2.clone())]

    def _from_named(self, named: dict) -> torch.Tensor:
        for key, shape in self._layout():
            if tuple(named[key].shape) != shape:
                raise ValueError(f"{key} has shape {tuple(named[key].shape)}, expected "
                                 f"{list(shape)}")
        f = self.ffn_hidden_size
        prefix = "experts.local_experts"
        fc1 = [named[f"{prefix}.{i}.linear_fc1.weight"] for i in range(self.num_moe_experts)]
        parts = ([w[:f].t() for w in fc1] + [w[f:].t() for w in fc1] +
                 [named[f"{prefix}.{i}.linear_fc2.weight"].t()
                  for i in range(self.num_moe_experts)] +
                 [named["router.weight"].t(), named["bias"]])
        return torch.cat([p.detach().to("cpu", torch.float32).reshape(-1) for p in parts])
