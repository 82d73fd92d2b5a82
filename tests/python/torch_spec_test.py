"""Megatron-style layer specs with Ballast's modules (ballast/torch/spec.py): a
transformer layer written the way Megatron-core's is (layer norms, bias-dropout-add,
submodules built from specs with a TransformerConfig) equals the same layer built from
plain PyTorch modules; configs Ballast cannot honour are refused by name. One process,
a world of one Gloo rank (the multi-rank math is in torch_layers_test.py).
"""
from __future__ import annotations

import os
import sys
import types
import unittest
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(__file__))
import torch_reference as ref_lib  # noqa: E402
from torch_testing import OneRankTestCase  # noqa: E402

import ballast.torch as bt  # noqa: E402
from ballast.torch import spec as bspec  # noqa: E402


def config(**overrides):
    """The TransformerConfig fields the modules read, with Megatron's defaults."""
    fields = dict(hidden_size=16, ffn_hidden_size=64, num_attention_heads=4, kv_channels=4,
                  num_query_groups=None, gated_linear_unit=False, add_bias_linear=True,
                  sequence_parallel=False, tensor_model_parallel_size=1, hidden_dropout=0.0)
    fields.update(overrides)
    return types.SimpleNamespace(**fields)


@dataclass
class LayerSubmodules:  # the shape of Megatron's TransformerLayerSubmodules
    self_attention: object
    mlp: object


class MegatronStyleLayer(nn.Module):
    """Megatron-core's TransformerLayer, reduced to what the submodule contract needs."""

    def __init__(self, cfg, submodules: LayerSubmodules) -> None:
        super().__init__()
        self.input_layernorm = nn.LayerNorm(cfg.hidden_size)
        self.self_attention = bspec.build_module(submodules.self_attention, config=cfg,
                                                 layer_number=1)
        self.pre_mlp_layernorm = nn.LayerNorm(cfg.hidden_size)
        self.mlp = bspec.build_module(submodules.mlp, config=cfg)
        self.dropout = cfg.hidden_dropout

    def bias_dropout_add(self, out_and_bias, residual):
        out, bias = out_and_bias
        out = out if bias is None else out + bias
        return residual + nn.functional.dropout(out, self.dropout, self.training)

    def forward(self, hidden_states, attention_mask=None):
        x = self.bias_dropout_add(
            self.self_attention(self.input_layernorm(hidden_states), attention_mask),
            hidden_states)
        return self.bias_dropout_add(self.mlp(self.pre_mlp_layernorm(x)), x)


class SpecTest(OneRankTestCase):
    JOB = "spec"

    def test_a_spec_built_layer_equals_plain_pytorch(self) -> None:
        cfg = config()
        torch.manual_seed(3)
        layer = MegatronStyleLayer(cfg, LayerSubmodules(bspec.self_attention_spec(),
                                                        bspec.mlp_spec(unit_size=8)))
        self.assertIsInstance(layer.mlp, bt.ParallelMLP)
        self.assertTrue(layer.mlp.skip_bias_add and layer.self_attention.skip_bias_add)

        def dense_attention(c):
            return ref_lib.DenseAttention(c.hidden_size, c.num_attention_heads)

        def dense_mlp(config):  # a factory is a module too, for Megatron's build_module
            return ref_lib.DenseMLP(config.hidden_size, config.ffn_hidden_size, 8,
                                    skip_bias_add=True)

        class DenseAttentionModule(nn.Module):  # Megatron's constructor, plain torch inside
            def __init__(self, config, layer_number=1):
                super().__init__()
                self.inner = dense_attention(config)

            def forward(self, x, attention_mask=None):
                return self.inner(x)

        torch.manual_seed(3)
        plain = MegatronStyleLayer(cfg, LayerSubmodules(
            DenseAttentionModule, types.SimpleNamespace(module=dense_mlp, params={},
                                                        submodules=None)))
        state = layer.state_dict()
        plain.load_state_dict({k.replace("self_attention.", "self_attention.inner."): v
                               for k, v in state.items()})

        x = torch.randn(5, 3, 16)
        xb, xp = x.clone().requires_grad_(), x.clone().requires_grad_()
        yb, yp = layer(xb), plain(xp)
        torch.testing.assert_close(yb, yp, rtol=1e-4, atol=1e-5)
        yb.square().sum().backward()
        yp.square().sum().backward()
        torch.testing.assert_close(xb.grad, xp.grad, rtol=1e-4, atol=1e-5)
        for key, g in layer.mlp._to_named(layer.mlp.dense("grad")):
            torch.testing.assert_close(g, plain.mlp.get_parameter(key).grad, rtol=1e-4, atol=1e-5)
        bt.AdamW(layer.parameters()).zero_grad()
        bt.end_step()

    def test_a_decoder_config_gives_causal_gqa_rope_and_swiglu(self) -> None:
        cfg = config(num_query_groups=2, gated_linear_unit=True, activation_func=F.silu,
                     position_embedding_type="rope", rotary_base=500)
        attn = bspec.build_module(bspec.self_attention_spec(), config=cfg,
                                  attn_mask_type="AttnMaskType.causal")
        mlp = bspec.build_module(bspec.mlp_spec(unit_size=8), config=cfg)
        plain_attn = ref_lib.DenseAttention(16, 4, 2, 4, causal=True, rotary=True,
                                            rotary_base=500)
        plain_attn.load_state_dict(attn.state_dict())
        plain_mlp = ref_lib.DenseSwiGLU(16, 64, 8)
        plain_mlp.load_state_dict(mlp.state_dict())
        s = 5
        # Megatron's rotary_pos_emb: [s, 1, 1, d] angles, the half repeated (rotate-half).
        inv = 500.0 ** (-torch.arange(0, 2, dtype=torch.float32) * 2 / 4)
        freqs = torch.arange(s, dtype=torch.float32)[:, None] * inv
        emb = torch.cat([freqs, freqs], dim=-1).view(s, 1, 1, 4)
        causal_mask = torch.ones(s, s, dtype=torch.bool).triu(1).view(1, 1, s, s)
        x = torch.randn(s, 3, 16)
        out, bias = attn(x, causal_mask, rotary_pos_emb=emb)
        want, _ = plain_attn(x)
        torch.testing.assert_close(out + bias, want, rtol=1e-4, atol=1e-5)
        out, bias = mlp(x)
        want, _ = plain_mlp(x)
        torch.testing.assert_close(out + bias, want, rtol=1e-4, atol=1e-5)
        with self.assertRaisesRegex(ValueError, "differs from RoPE with base 500"):
            attn(x, None, rotary_pos_emb=emb * 2)
        bt.end_step()

    def test_what_ballast_cannot_honour_is_refused_by_name(self) -> None:
        for overrides, message in [
            (dict(gated_linear_unit=True, activation_func=F.gelu), "gated_linear_unit"),
            (dict(position_embedding_type="rope", rotary_percent=0.5), "rotary_percent 0.5"),
            (dict(sequence_parallel=True), "sequence_parallel"),
            (dict(add_bias_linear=False), "add_bias_linear"),
            (dict(tensor_model_parallel_size=4), "tensor_model_parallel_size 4 is not Ballast's "
                                                  "TP group size 1"),
        ]:
            with self.subTest(overrides=overrides):
                with self.assertRaisesRegex(ValueError, message):
                    bspec.build_module(bspec.mlp_spec(unit_size=8), config=config(**overrides))
        with self.assertRaisesRegex(ValueError, "mixture-of-experts"):
            bspec.build_module(bspec.mlp_spec(), config=config(), is_expert=True)
        attn = bspec.build_module(bspec.self_attention_spec(), config=config())
        x = torch.randn(5, 3, 16)
        with self.assertRaisesRegex(ValueError, "position_embedding_type is not 'rope'"):
            attn(x, None, rotary_pos_emb=torch.ones(1))
        with self.assertRaisesRegex(ValueError, "attention masks"):
            attn(x, torch.ones(3, 1, 5, 5, dtype=torch.bool))
        out, bias = attn(x, None)  # still works
        self.assertEqual(out.shape, x.shape)
        self.assertEqual(bias.shape, (16,))
        bt.end_step()


if __name__ == "__main__":
    unittest.main()
