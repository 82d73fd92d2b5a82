"""Megatron-core layer specs with Ballast's attention and MLP.

Megatron-core builds a transformer layer from a spec: ``ModuleSpec(module, params,
submodules)`` objects, instantiated by ``build_module(spec, config=..., ...)``. The two
classes here take Megatron's constructor and forward signatures (``config`` is a
``TransformerConfig``: ``hidden_size``, ``ffn_hidden_size``, ``num_attention_heads``,
``kv_channels``, ``tensor_model_parallel_size``...) and return ``(output, bias)`` with
the bias left out for the layer's bias-dropout-add, as Megatron's own modules do. So a
layer spec swaps in Ballast in two lines::

    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    import ballast.torch.spec as bspec

    spec = get_gpt_layer_local_spec()
    spec.submodules.self_attention = bspec.self_attention_spec()
    spec.submodules.mlp = bspec.mlp_spec()        # or bspec.moe_spec() for a MoE layer

Megatron is not needed to use them: :class:`ModuleSpec` and :func:`build_module` here
have the same shape as Megatron's (duck-typed: either side's spec works with the other's
``build_module``). Decoder configs map onto Ballast's options: ``gated_linear_unit``
with ``activation_func=F.silu`` is SwiGLU, ``num_query_groups`` is grouped-query
attention, a causal ``attn_mask_type`` is the causal mask, and
``position_embedding_type="rope"`` (with ``rotary_base``) is RoPE inside the block; the
``rotary_pos_emb`` Megatron passes to forward is then checked against the block's own
angles. What Ballast cannot honour is refused by name, never approximated: other gated
activations, ``rotary_percent`` below 1, explicit attention masks, sequence parallelism,
layers without biases, and a ``tensor_model_parallel_size`` other than Ballast's TP
group size. Megatron's default activation is the erf GELU; Ballast's is the tanh
approximation (about 2e-4 relative apart): set ``config.activation_func`` accordingly
when comparing runs. Megatron fuses SwiGLU's gate and up projections into one
``linear_fc1``; Ballast's state dict keeps them as ``linear_fc1`` and ``linear_fc1_up``.

A mixture-of-experts layer (``moe_spec()``, in place of Megatron's ``MoELayer``) reads
``num_moe_experts``, ``moe_router_topk``, ``moe_router_pre_softmax``,
``moe_aux_loss_coeff`` and ``moe_ffn_hidden_size`` (``ffn_hidden_size`` when unset), and
keeps Megatron's state-dict keys. Its experts are SwiGLU without biases, so it wants
``gated_linear_unit=True`` with ``F.silu`` and ``add_bias_linear=False``; it refuses a
capacity factor, the z-loss, input jitter, shared experts, load balancing other than
``aux_loss``/``none``, and ``expert_model_parallel_size`` above 1 (Ballast spreads the
experts over its TP group itself).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from torch.nn import functional as F

from ballast.torch.session import session as _session
from ballast.torch.layers import ParallelMLP, ParallelMoE, ParallelSelfAttention


@dataclass
class ModuleSpec:
    """The shape of ``megatron.core.transformer.spec_utils.ModuleSpec``."""

    module: Any
    params: dict = field(default_factory=dict)
    submodules: Any = None


def build_module(spec: Any, *args, **kwargs):
    """Instantiates a spec (or a plain class) the way Megatron's ``build_module`` does."""
    if isinstance(spec, type):
        return spec(*args, **kwargs)
    if spec.submodules is not None:
        kwargs["submodules"] = spec.submodules
    return spec.module(*args, **spec.params, **kwargs)


def _check_config(config: Any, what: str) -> None:
    def get(name: str, default: Any = None) -> Any:
        return getattr(config, name, default)

    refusals = [
        (get("gated_linear_unit", False) and get("activation_func") is not F.silu,
         "gated_linear_unit with an activation other than F.silu: Ballast's gated MLP is "
         "SwiGLU"),
        (get("sequence_parallel", False), "sequence_parallel is not supported"),
        (not get("add_bias_linear", True), "add_bias_linear=False: Ballast's blocks have biases"),
        (get("position_embedding_type") == "rope" and get("rotary_percent", 1.0) != 1.0,
         f"rotary_percent {get('rotary_percent')}: Ballast's RoPE rotates whole heads"),
    ]
    for refused, message in refusals:
        if refused:
            raise ValueError(f"{what}: config.{message}")
    _check_group_size(config, what)


def _check_group_size(config: Any, what: str) -> None:
    tp = getattr(config, "tensor_model_parallel_size", None)
    size = _session().size
    if tp is not None and tp != size:
        raise ValueError(f"{what}: config.tensor_model_parallel_size {tp} is not Ballast's TP "
                         f"group size {size} (ballast.torch.init's tp_group)")


class MegatronMLP(ParallelMLP):
    """Ballast's MLP with Megatron-core's ``MLP(config, submodules, ...)`` signature."""

    def __init__(self, config: Any, submodules: Any = None, is_expert: bool = False,
                 input_size: Optional[int] = None, **ballast_options: Any) -> None:
        _check_config(config, "Ballast MLP")
        if is_expert:
            raise ValueError("Ballast MLP: is_expert=True: Ballast's mixture-of-experts layer "
                             "is built whole, by moe_spec() in place of Megatron's MoELayer")
        hidden = input_size if input_size is not None else config.hidden_size
        gated = getattr(config, "gated_linear_unit", False)
        super().__init__(hidden, config.ffn_hidden_size, skip_bias_add=True,
                         activation="swiglu" if gated else "gelu", **ballast_options)


def _moe_options(config: Any, what: str) -> dict:
    """ParallelMoE's options from a Megatron MoE config; refuses what it cannot honour."""
    def get(name: str, default: Any = None) -> Any:
        return getattr(config, name, default)

    balancing = get("moe_router_load_balancing_type", "aux_loss")
    refusals = [
        (not get("num_moe_experts"), "num_moe_experts is not set"),
        (not get("gated_linear_unit", False) or get("activation_func") is not F.silu,
         "gated_linear_unit=True with activation_func=F.silu is required: Ballast's experts "
         "are SwiGLU"),
        (get("add_bias_linear", True), "add_bias_linear=True: Ballast's experts have no biases"),
        (get("sequence_parallel", False), "sequence_parallel is not supported"),
        (get("moe_expert_capacity_factor") is not None,
         "moe_expert_capacity_factor: Ballast's MoE drops no tokens (no capacity)"),
        (get("moe_z_loss_coeff"), "moe_z_loss_coeff: the router z-loss is not supported"),
        (get("moe_input_jitter_eps"), "moe_input_jitter_eps is not supported"),
        (get("moe_shared_expert_intermediate_size"), "shared experts are not supported"),
        (get("moe_router_topk_scaling_factor") not in (None, 1, 1.0),
         "moe_router_topk_scaling_factor is not supported"),
        (balancing not in ("aux_loss", "none"),
         f"moe_router_load_balancing_type '{balancing}': only aux_loss (or none)"),
        (get("expert_model_parallel_size", 1) != 1,
         "expert_model_parallel_size > 1: Ballast spreads the experts over its TP group"),
    ]
    for refused, message in refusals:
        if refused:
            raise ValueError(f"{what}: config.{message}")
    _check_group_size(config, what)
    ffn = get("moe_ffn_hidden_size")
    return dict(ffn_hidden_size=config.ffn_hidden_size if ffn is None else ffn,
                num_moe_experts=config.num_moe_experts,
                moe_router_topk=get("moe_router_topk", 2),
                moe_router_pre_softmax=bool(get("moe_router_pre_softmax", False)),
                moe_aux_loss_coeff=(0.0 if balancing == "none"
                                    else float(get("moe_aux_loss_coeff", 0.0))))


class MegatronMoE(ParallelMoE):
    """Ballast's MoE with Megatron-core's ``MoELayer(config, submodules, layer_number)``
    signature; forward returns ``(output, bias)`` with the bias left out for the layer's
    bias-dropout-add. Megatron's ``MoEAuxLossAutoScaler.set_loss_scale`` is this layer's
    :meth:`set_aux_loss_scale` (Ballast adds the aux loss's gradient itself)."""

    def __init__(self, config: Any, submodules: Any = None, layer_number: Optional[int] = None,
                 **ballast_options: Any) -> None:
        options = _moe_options(config, "Ballast MoE")
        super().__init__(config.hidden_size, skip_bias_add=True, **options, **ballast_options)
        self.layer_number = layer_number


class MegatronSelfAttention(ParallelSelfAttention):
    """Ballast's attention with Megatron-core's ``SelfAttention`` signatures."""

    def __init__(self, config: Any, submodules: Any = None, layer_number: int = 1,
                 attn_mask_type: Any = None, **ballast_options: Any) -> None:
        _check_config(config, "Ballast attention")
        causal = attn_mask_type is not None and "causal" in str(attn_mask_type).lower()
        rope = getattr(config, "position_embedding_type", None) == "rope"
        super().__init__(config.hidden_size, config.num_attention_heads,
                         kv_channels=getattr(config, "kv_channels", None),
                         num_query_groups=getattr(config, "num_query_groups", None),
                         causal=causal, rotary=rope,
                         rotary_base=getattr(config, "rotary_base", 10000), skip_bias_add=True,
                         **ballast_options)
        self.rotary_base = float(getattr(config, "rotary_base", 10000))
        self.layer_number = layer_number

    def forward(self, hidden_states: torch.Tensor, attention_mask: Optional[torch.Tensor] = None,
                key_value_states: Optional[torch.Tensor] = None, inference_params: Any = None,
                rotary_pos_emb: Any = None, **unused: Any):
        for name, value in (("key_value_states", key_value_states),
                            ("inference_params", inference_params)):
            if value is not None:
                raise ValueError(f"{self._name()}: {name} is not supported")
        if rotary_pos_emb is not None:
            self._check_rotary(rotary_pos_emb, hidden_states.shape[1 if self.batch_first else 0])
        # Megatron hands a causal layer its mask too; the block applies its own.
        mask = None if self.causal else attention_mask
        return super().forward(hidden_states, mask)

    def _check_rotary(self, emb: Any, seq: int) -> None:
        """Megatron's rotary_pos_emb ([s, 1, 1, d] angles, rotate-half) must be the
        block's own, since the block rotates Q and K itself."""
        if not self.rotary:
            raise ValueError(f"{self._name()}: rotary_pos_emb given, but the config's "
                             f"position_embedding_type is not 'rope'")
        if isinstance(emb, (tuple, list)):
            raise ValueError(f"{self._name()}: separate query and key rotary embeddings "
                             f"are not supported")
        d = self.kv_channels
        if not isinstance(emb, torch.Tensor) or emb.shape[0] < seq or emb.shape[-1] != d:
            raise ValueError(f"{self._name()}: rotary_pos_emb of shape "
                             f"{tuple(getattr(emb, 'shape', ()))}, expected [>= {seq}, 1, 1, "
                             f"{d}]")
        inv = self.rotary_base ** (-torch.arange(0, d // 2, dtype=torch.float64) * 2.0 / d)
        want = torch.arange(seq, dtype=torch.float64)[:, None] * inv[None, :]
        got = emb[:seq].reshape(seq, d).double()
        if not (torch.allclose(got[:, :d // 2], want, rtol=1e-5, atol=1e-4) and
                torch.allclose(got[:, d // 2:], want, rtol=1e-5, atol=1e-4)):
            raise ValueError(f"{self._name()}: rotary_pos_emb differs from RoPE with base "
                             f"{self.rotary_base} over whole heads (rotate-half)")


def mlp_spec(**ballast_options: Any) -> ModuleSpec:
    """A spec for a layer's ``mlp`` submodule (options: unit_size, priority, ...)."""
    return ModuleSpec(module=MegatronMLP, params=dict(ballast_options))


def self_attention_spec(**ballast_options: Any) -> ModuleSpec:
    """A spec for a layer's ``self_attention`` submodule."""
    return ModuleSpec(module=MegatronSelfAttention, params=dict(ballast_options))


def moe_spec(**ballast_options: Any) -> ModuleSpec:
    """A spec for a MoE layer's ``mlp`` submodule (Megatron's ``MoELayer``)."""
    return ModuleSpec(module=MegatronMoE, params=dict(ballast_options))
