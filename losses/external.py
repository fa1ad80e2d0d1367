"""Any loss module in the comparison: a user's own or one of pytorch-metric-learning's.

`ExternalLoss(loss)` holds a module `forward(embeddings [B, D], labels [B]) -> scalar` to the
contract of `losses/base.py` (batch checks, fp32, `last_stats`, a paradigm, a clear error for a
non-scalar or non-finite value); its parameters (Proxy Anchor's proxies) train as the loss's.
Configuration: docs/extending/external-losses.md.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from losses.base import MetricLoss
from losses.similarity import BatchPairs, Paradigm, compute_dtype, pair_stats

PML_INSTALL = 'pip install -e ".[pml]"'  # the extra that brings pytorch-metric-learning


def pml_installed() -> bool:
    """Whether pytorch-metric-learning (an optional extra) can be imported."""
    try:
        import pytorch_metric_learning  # noqa: F401
    except ImportError:
        return False
    return True


def _metric_loss_names(cls: type = MetricLoss) -> set[str]:
    """Class names of every subclass of `cls` defined so far (ours and any user subclass)."""
    subclasses: list[type] = cls.__subclasses__()
    return {sub.__name__ for sub in subclasses}.union(*map(_metric_loss_names, subclasses))


class ExternalLoss(MetricLoss):
    """A wrapped `loss(embeddings [B, D], labels [B]) -> scalar` module held to the loss contract.

    `last_stats` are the batch's pair-wise cosine similarities, also for a class-level loss
    (whose proxies the adapter cannot see).

    Args:
        loss: the module to wrap, e.g. `pytorch_metric_learning.losses.SupConLoss()` or a class
            of the user's own in an importable file; it is called with fp32 embeddings (fp64
            stay fp64) and int64 labels.
        paradigm: the results row's `labels` column; None infers it: "class-level" when the
            module has trainable parameters (proxies, a classifier), else "pair-wise".
    """

    repr_fields = ("paradigm",)

    def __init__(self, loss: nn.Module, paradigm: Paradigm | None = None) -> None:
        super().__init__()
        if isinstance(loss, MetricLoss):
            raise ValueError(
                f"ExternalLoss: {type(loss).__name__} is already a circlebench loss; give it "
                "as model.loss directly instead of wrapping it"
            )
        if not isinstance(loss, nn.Module):
            raise ValueError(
                f"ExternalLoss: loss must be a torch.nn.Module with forward(embeddings, labels), "
                f"got {type(loss).__name__}; wrap a function in a Module subclass"
            )
        if paradigm not in (None, "pair-wise", "class-level"):
            raise ValueError(
                f"ExternalLoss: paradigm must be 'pair-wise', 'class-level' or None (inferred), "
                f"got {paradigm!r}"
            )
        self.loss = loss
        learnable = any(p.requires_grad for p in loss.parameters())
        self._paradigm: Paradigm = paradigm or ("class-level" if learnable else "pair-wise")

    @property
    def paradigm(self) -> Paradigm:  # type: ignore[override]
        """ "class-level" or "pair-wise", as given or inferred from the module's parameters."""
        return self._paradigm

    @property
    def name(self) -> str:
        """The wrapped class's name, prefixed by its package where one of our losses has the
        same name (`pytorch_metric_learning.CircleLoss`), so that a board never mixes the two."""
        cls = type(self.loss)
        if cls.__name__ in _metric_loss_names():
            return f"{cls.__module__.split('.')[0]}.{cls.__name__}"
        return cls.__name__

    def forward(self, embeddings: Tensor, labels: Tensor) -> Tensor:
        self.check_batch(embeddings, labels)
        with torch.autocast(embeddings.device.type, enabled=False):
            x = embeddings.to(compute_dtype(embeddings))
            value = self.loss(x, labels)
            with torch.no_grad():
                sim, pos_mask, neg_mask = BatchPairs()(x.detach(), labels)  # [B, B]
        self._check_value(value, embeddings)
        self.last_stats = pair_stats(sim, pos_mask, neg_mask, pos_mask.any(1) & neg_mask.any(1))
        return value

    def _check_value(self, value: object, embeddings: Tensor) -> None:
        """ValueError naming the wrapped loss unless `value` is a finite scalar with a gradient."""
        owner = f"ExternalLoss: {type(self.loss).__name__}"
        if not isinstance(value, Tensor):
            raise ValueError(
                f"{owner} returned a {type(value).__name__}, not a tensor; return the loss as a "
                "0-dim float tensor computed from the embeddings"
            )
        if value.ndim != 0 or not value.is_floating_point():
            raise ValueError(
                f"{owner} returned a {value.dtype} tensor of shape {tuple(value.shape)}, not a "
                "float scalar; reduce its per-sample losses in its forward (e.g. .mean())"
            )
        if not torch.isfinite(value):  # one host sync per batch, as check_batch
            raise ValueError(
                f"{owner} returned {value.item()} for finite embeddings of shape "
                f"{tuple(embeddings.shape)}; check its arguments (a scale or temperature that "
                "overflows), or lower the learning rate"
            )
        if torch.is_grad_enabled() and embeddings.requires_grad and not value.requires_grad:
            raise ValueError(
                f"{owner} returned a loss with no gradient (detached, .item(), or computed under "
                "torch.no_grad()); return a tensor computed from the embeddings, e.g. "
                "`embeddings.sum() * 0` for a batch it cannot use"
            )
