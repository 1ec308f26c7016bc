"""Training: DiLoCo's inner AdamW phase and outer Nesterov step, on flat parameter vectors.

Modules:
    params: :func:`flatten` / :func:`load_flat` / :func:`param_shapes` / :func:`num_params` (model ⇄ ``(d,)``
        float32 vector).
    inner: :func:`run_inner_steps` (H steps on the peer's shard, optional data attack, bf16 autocast on CUDA),
        :func:`make_inner_optimizer` (AdamW with the task's defaults) and :func:`inner_autocast` /
        :func:`autocast_dtype` (the autocast context the forward pass runs in).
    adamw: :class:`InnerAdamW` (``torch.optim.AdamW``'s update bit for bit, without importing ``torch._dynamo``).
    outer: :class:`OuterNesterov` (Nesterov SGD on the aggregated pseudo-gradient, bit-identical to
        ``torch.optim.SGD(nesterov=True)``) and :func:`outer_defaults` (its lr and momentum per codec: none for
        ``topk``, SparseLoCo).
    error_feedback: :class:`~p2p_guard.training.error_feedback.ErrorFeedback` (the sender's residual, decayed by
        β for ``topk`` as in SparseLoCo).

References:
    Douillard et al., "DiLoCo: Distributed Low-Communication Training of Language Models", arXiv:2311.08105,
    2023. Sarfi et al., "Communication Efficient LLM Pre-training with SparseLoCo", arXiv:2508.15706, 2025.
"""

from p2p_guard.training.adamw import InnerAdamW
from p2p_guard.training.inner import (
    DataTransform,
    InnerPhaseStopped,
    autocast_dtype,
    inner_autocast,
    make_inner_optimizer,
    run_inner_steps,
)
from p2p_guard.training.outer import (
    DILOCO_OUTER_LR,
    DILOCO_OUTER_MOMENTUM,
    TOPK_OUTER_LR,
    TOPK_OUTER_MOMENTUM,
    OuterNesterov,
    outer_defaults,
)
from p2p_guard.training.params import flatten, load_flat, num_params, param_shapes

__all__ = [
    "DILOCO_OUTER_LR",
    "DILOCO_OUTER_MOMENTUM",
    "DataTransform",
    "InnerAdamW",
    "InnerPhaseStopped",
    "OuterNesterov",
    "TOPK_OUTER_LR",
    "TOPK_OUTER_MOMENTUM",
    "autocast_dtype",
    "flatten",
    "inner_autocast",
    "load_flat",
    "make_inner_optimizer",
    "num_params",
    "outer_defaults",
    "param_shapes",
    "run_inner_steps",
]
