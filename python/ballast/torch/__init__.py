"""ballast.torch: Ballast's tensor-parallel layers for PyTorch jobs.

Drop-in TP layers on the job's own ``torch.distributed`` group, computed by Ballast's
C++ core (one implementation of the math, the plans and the timing)::

    import ballast.torch as bt

    bt.init(tp_group, job="vit")                    # after dist.init_process_group
    attn = bt.ParallelSelfAttention(768, 12)        # [s, b, h] -> (output, bias)
    mlp = bt.ParallelMLP(768, 3072)
    moe = bt.ParallelMoE(768, 1024, 8)              # Megatron-core's MoELayer contract
    opt = bt.AdamW(model.parameters(), lr=3e-4)     # steps Ballast layers too

See docs/pytorch.md for the whole guide: plans, the agent, state dicts, specs, limits.
"""
import pkgutil

__path__ = pkgutil.extend_path(__path__, __name__)

from ballast.torch.layers import ParallelMLP, ParallelMoE, ParallelSelfAttention  # noqa: E402
from ballast.torch.optim import AdamW, clip_grad_norm_  # noqa: E402
from ballast.torch.session import (  # noqa: E402
    Session, end_step, init, is_initialized, session, shutdown, step)

__all__ = [
    "AdamW", "ParallelMLP", "ParallelMoE", "ParallelSelfAttention", "Session", "clip_grad_norm_",
    "end_step", "init", "is_initialized", "session", "shutdown", "step",
]
