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
    spec.submodules.mlp = bspec.mlp_spec()

Megatron is not needed to use them: :class:`ModuleSpec` and :func:`build_module` here
have the same shape as Megatron's (duck-typed: either side's spec works with the other's
``build_module``). What Ballast cannot honour is refused by name, never approximated:
gated MLPs (SwiGLU), grouped-query attention, attention masks and rotary embeddings
(causal LLM blocks are not built yet), sequence parallelism, layers without biases, and
a ``tensor_model_parallel_size`` other than Ballast's TP group size. Megatron's default
activation is the erf GELU; Ballast's is the tanh approximation (about 2e-4 relative
apart): set ``config.activation_func`` accordingly when comparing runs.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from ballast.torch.session import session as _session
from ballast.torch.layers import ParallelMLP, ParallelSelfAttention


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
        (get("gated_linear_unit", False), "gated_linear_unit (SwiGLU) is not built yet"),
        (get("sequence_parallel", False), "sequence_parallel is not supported"),
        (not get("add_bias_linear", True), "add_bias_linear=False: Ballast's blocks have biases"),
        (get("num_query_groups") not in (None, get("num_attention_heads")),
         f"num_query_groups {get('num_query_groups')}: grouped-query attention is not "
         f"built yet"),
    ]
    for refused, message in refusals:
        if refused:
            raise ValueError(f"{what}: config.{message}")
    tp = get("tensor_model_parallel_size", None)
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
            raise ValueError("Ballast MLP: mixture-of-experts layers are not supported")
        hidden = input_size if input_size is not None else config.hidden_size
        super().__init__(hidden, config.ffn_hidden_size, skip_bias_add=True, **ballast_options)


class MegatronSelfAttention(ParallelSelfAttention):
    """Ballast's attention with Megatron-core's ``SelfAttention`` signatures."""

    def __init__(self, config: Any, submodules: Any = None, layer_number: int = 1,
                 attn_mask_type: Any = None, **ballast_options: Any) -> None:
        _check_config(config, "Ballast attention")
        if attn_mask_type is not None and "causal" in str(attn_mask_type).lower():
            raise ValueError(f"Ballast attention: attn_mask_type {attn_mask_type}: causal "
                             f"attention is not built yet (bidirectional only)")
        super().__init__(config.hidden_size, config.num_attention_heads,
                         kv_channels=getattr(config, "kv_channels", None), skip_bias_add=True,
                         **ballast_options)
        self.layer_number = layer_number

    def forward(self, hidden_states: torch.Tensor, attention_mask: Optional[torch.Tensor] = None,
                key_value_states: Optional[torch.Tensor] = None, inference_params: Any = None,
                rotary_pos_emb: Any = None, **unused: Any):
        for name, value in (("key_value_states", key_value_states),
                            ("inference_params", inference_params),
                            ("rotary_pos_emb", rotary_pos_emb)):
            if value is not None:
                raise ValueError(f"{self._name()}: {name} is not supported")
        return super().forward(hidden_states, attention_mask)


def mlp_spec(**ballast_options: Any) -> ModuleSpec:
    """A spec for a layer's ``mlp`` submodule (options: unit_size, priority, ...)."""
    return ModuleSpec(module=MegatronMLP, params=dict(ballast_options))


def self_attention_spec(**ballast_options: Any) -> ModuleSpec:
    """A spec for a layer's ``self_attention`` submodule."""
    return ModuleSpec(module=MegatronSelfAttention, params=dict(ballast_options))
