"""The optimizer path for models with Ballast layers: AdamW and gradient clipping.

Ballast layers own their parameters in C++ (see layers.py), so the optimizer reaches them
through each layer's zero-size ``ballast_handle`` parameter, which sits in
``model.parameters()`` like any other. :class:`AdamW` is ``torch.optim.AdamW`` that also
steps every Ballast layer in its param groups, with that group's hyperparameters (so LR
schedulers and per-group settings work unchanged), and closes the Ballast step::

    opt = ballast.torch.AdamW(model.parameters(), lr=3e-4, weight_decay=0.05)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=1000)
    for x, y in data:
        loss = loss_fn(model(x), y)
        loss.backward()
        ballast.torch.clip_grad_norm_(model.parameters(), 1.0)  # includes Ballast's grads
        opt.step()            # torch params, Ballast layers, then the step boundary
        opt.zero_grad()
        sched.step()

Ballast's AdamW is decoupled weight decay with bias correction, the same update as
``torch.optim.AdamW`` (equal to float round-off). Pruned units are left alone: no
weight decay, no moment or step-count drift. As in torch, a step leaves the gradients in
place: without ``zero_grad()`` the next backward adds to them.
"""
from __future__ import annotations

import math
from typing import Any, Dict, Iterable, List, Optional, Tuple, Union

import torch

from ballast.torch import _C


def _layer_of(p: torch.Tensor):
    ref = getattr(p, "_ballast_layer", None)
    return ref() if ref is not None else None


def _split(params: Iterable[torch.Tensor]) -> Tuple[List[torch.Tensor], List[Any]]:
    plain, layers = [], []
    for p in params:
        layer = _layer_of(p)
        if layer is not None:
            layers.append(layer)
        else:
            plain.append(p)
    return plain, layers


class AdamW(torch.optim.AdamW):
    """``torch.optim.AdamW`` that also trains Ballast layers and ends the Ballast step.

    ``state_dict()`` adds each Ballast layer's optimizer state (moments and per-unit step
    counts, dense and plan-independent) under ``"ballast"``; like every gather it is
    collective. Loading it restores the weights saved with it too (a block checkpoint is
    whole), so load the model's state dict first, then the optimizer's. ``amsgrad`` and
    ``maximize`` are refused: Ballast's blocks do not implement them.
    """

    def __init__(self, params, lr: float = 1e-3, betas: Tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, *, amsgrad: bool = False,
                 maximize: bool = False, foreach: Optional[bool] = None) -> None:
        if amsgrad or maximize:
            raise ValueError("ballast.torch.AdamW does not support amsgrad or maximize")
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                         foreach=foreach)

    def _layers(self) -> List[Tuple[Any, Dict[str, Any]]]:
        found = []
        for group in self.param_groups:
            for p in group["params"]:
                layer = _layer_of(p)
                if layer is not None:
                    found.append((layer, group))
        return found

    @torch.no_grad()
    def step(self, closure=None):
        loss = super().step(closure)
        sessions = {}
        for layer, group in self._layers():
            for key in ("amsgrad", "maximize"):
                if group.get(key):
                    raise ValueError(f"param group sets {key}; Ballast layers do not support it")
            layer._adamw_step(group["lr"], group["betas"], group["eps"], group["weight_decay"])
            sessions[id(layer._session)] = layer._session
        for session in sessions.values():
            if session.in_step:  # the step boundary the user cannot forget
                session.end_step()
        return loss

    def zero_grad(self, set_to_none: bool = False) -> None:
        super().zero_grad(set_to_none=set_to_none)
        for layer, _ in self._layers():  # now, not when they next look at their handles
            layer._discard_grads()

    def state_dict(self) -> Dict[str, Any]:
        # Keyed by position among the optimizer's Ballast layers, as torch keys parameter
        # state by position: it loads into another instance of the same model.
        state = super().state_dict()
        state["ballast"] = [layer._block.save_checkpoint() for layer, _ in self._layers()]
        return state

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        state_dict = dict(state_dict)
        ballast = state_dict.pop("ballast", [])
        layers = [layer for layer, _ in self._layers()]
        if len(ballast) != len(layers):
            raise ValueError(f"optimizer state holds {len(ballast)} Ballast layers, this "
                             f"optimizer has {len(layers)}")
        super().load_state_dict(state_dict)
        for layer, checkpoint in zip(layers, ballast):
            layer._block.restore_checkpoint(checkpoint)


def clip_grad_norm_(parameters: Union[torch.Tensor, Iterable[torch.Tensor]], max_norm: float,
                    norm_type: float = 2.0, error_if_nonfinite: bool = False) -> torch.Tensor:
    """``torch.nn.utils.clip_grad_norm_`` over torch parameters and Ballast layers.

    The norm is the dense model's: every Ballast unit counted once, wherever it is held
    (one small all-reduce for all Ballast layers, so every rank calls this). Only the 2-norm.
    Use it, not torch's: ``torch.nn.utils.clip_grad_norm_`` sees no Ballast gradient, and
    scales each ``ballast_handle``'s gradient in place, which its layer refuses by name at
    the next backward, optimizer step or clip (layers.py).
    """
    if norm_type != 2.0:
        raise ValueError(f"norm_type {norm_type}: only the 2-norm is supported with Ballast")
    if isinstance(parameters, torch.Tensor):
        parameters = [parameters]
    plain, layers = _split(parameters)
    grads = [p.grad for p in plain if p.grad is not None]
    total_sq = sum((g.detach().double().pow(2).sum().item() for g in grads), 0.0)
    layers = [layer for layer in layers if layer._has_grads()]
    if layers:
        total_sq += _C.group_grad_squared_norm([layer._block for layer in layers])
    total = math.sqrt(total_sq)
    if error_if_nonfinite and not math.isfinite(total):
        raise RuntimeError(f"the total gradient norm is {total}; set "
                           f"error_if_nonfinite=False to clip anyway")
    coef = min(max_norm / (total + 1e-6), 1.0)
    if coef < 1.0:
        for g in grads:
            g.detach().mul_(coef)
        for layer in layers:
            layer._block.scale_gradients(coef)
    return torch.tensor(total)
