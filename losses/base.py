"""The loss contract: what the training module, the CLI and the results row rely on.

Every loss in `losses/` subclasses `MetricLoss`, and `tests/losses/test_contract.py` checks each
one exported in `losses.__all__` against this list:

1. `forward(embeddings [B, D] float, labels [B] int64) -> Tensor []`: a scalar, differentiable
   with respect to the embeddings and to the loss's own parameters (proxies, classifier).
2. `paradigm` is "pair-wise" (s_p and s_n between the samples of a batch) or "class-level"
   (between a sample and class proxies, a classifier or class centres); a `PairSimilarityLoss`
   takes it from its similarity source. The results row stores it in its `labels` column.
3. After each forward, `last_stats` holds `sp_mean`, `sn_mean` and `active_fraction` as 0-dim
   detached tensors (`similarity.pair_stats`), or a `similarity.LazyStats` computing them at
   the first read.
4. `forward` starts with `self.check_batch(embeddings, labels)`: a ValueError naming the loss
   and the problem (not 2-D / 1-D, labels not int64, a length mismatch, an empty batch,
   non-finite embeddings)
   instead of a NaN loss or an IndexError from deep inside. A label outside [0, num_classes)
   is a ValueError naming the loss or, for the proxy losses, their `ClassProxies` source.
5. Hyper-parameters are checked in `__init__`; a bad value raises ValueError with the value,
   the valid range and the paper's setting (`MetricLoss.check_arg`). Class-level losses own
   their proxies or classifier as parameters (the optimiser sees them through the module) and
   centres as buffers.
6. The loss is computed in fp32 (fp64 for fp64 inputs) with autocast off inside it.
7. `name` is what results rows, run folders and W&B call it: the class name, except for
   `ExternalLoss`, which takes the name of the module it wraps (`losses/external.py`).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import ClassVar

import torch
from torch import Tensor, nn

from losses.similarity import BatchPairs, Paradigm, SimilaritySource, pair_stats


class MetricLoss(nn.Module, ABC):
    """Base class of every loss: `forward(embeddings [B, D], labels [B]) -> scalar`."""

    paradigm: ClassVar[Paradigm]
    # {"sp_mean", "sn_mean", "active_fraction"}, 0-dim, detached; a dict, or `LazyStats`
    last_stats: Mapping[str, Tensor]
    # the attributes `extra_repr` shows as `name=value`: the hyper-parameters
    repr_fields: ClassVar[tuple[str, ...]] = ()

    def __init__(self) -> None:
        super().__init__()
        self.last_stats = {}

    @abstractmethod
    def forward(self, embeddings: Tensor, labels: Tensor) -> Tensor:
        """Scalar loss of a batch; fills `last_stats`."""

    @property
    def name(self) -> str:
        """What results rows, run folders and W&B call this loss: its class name."""
        return type(self).__name__

    def extra_repr(self) -> str:
        return ", ".join(f"{name}={getattr(self, name)!r}" for name in self.repr_fields)

    def check_arg(self, name: str, value: object, valid: bool, rule: str, hint: str) -> None:
        """Unless `valid`, ValueError "<Loss>: {name} must be {rule}, got {value}; {hint}"."""
        if not valid:
            raise ValueError(f"{type(self).__name__}: {name} must be {rule}, got {value}; {hint}")

    def check_batch(self, embeddings: Tensor, labels: Tensor) -> None:
        """ValueError naming this loss unless embeddings [B, D] are finite, B >= 1, labels [B]
        int64."""
        owner = type(self).__name__
        if embeddings.ndim != 2:
            raise ValueError(
                f"{owner}: embeddings must be 2-D [B, D], got shape {tuple(embeddings.shape)}; "
                "flatten the embedder output to one row per sample"
            )
        if labels.ndim != 1:
            raise ValueError(
                f"{owner}: labels must be 1-D [B], got shape {tuple(labels.shape)}; "
                "pass one integer class id per embedding"
            )
        if labels.dtype != torch.int64:  # one_hot and cross_entropy take int64 only
            raise ValueError(
                f"{owner}: labels must be int64 class ids, got {labels.dtype}; pass labels.long()"
            )
        if len(labels) != len(embeddings):
            raise ValueError(
                f"{owner}: got {len(embeddings)} embeddings but {len(labels)} labels; "
                "pass one label per embedding row"
            )
        if embeddings.numel() == 0:
            raise ValueError(
                f"{owner}: empty batch, embeddings of shape {tuple(embeddings.shape)}; "
                "a loss needs at least one sample: check the sampler and the dataset"
            )
        # One reduction and host sync: the sum is finite when every value is, unless it overflows
        # (the exact test below clears that). Detached: float() of a grad tensor warns.
        if math.isfinite(float(embeddings.detach().sum())):
            return
        finite = torch.isfinite(embeddings)
        if not finite.all():
            bad = embeddings.numel() - int(finite.sum())
            raise ValueError(
                f"{owner}: {bad} of {embeddings.numel()} embedding values are not finite "
                "(NaN or Inf); the embedder diverged or its input is corrupt: lower the "
                "learning rate, check the images, or train in fp32"
            )


class PairSimilarityLoss(MetricLoss):
    """Shell of Circle and unified loss: a source, (m, gamma), the mean over active anchors
    (with a positive and a negative; none gives 0) of the staticmethod `per_anchor_loss`."""

    repr_fields = ("m", "gamma")

    def __init__(
        self, m: float = 0.25, gamma: float = 256.0, source: SimilaritySource | None = None
    ) -> None:
        super().__init__()
        paper = "the paper uses 0.25 for re-ID and 0.4 for fine-grained retrieval"
        self.check_arg("m", m, 0.0 <= m < 1.0, "in [0, 1)", paper)
        self.check_arg("gamma", gamma, gamma > 0, "> 0", "the paper uses 256 (re-ID) or 80")
        self.m, self.gamma = m, gamma
        self.source = source if source is not None else BatchPairs()

    @property
    def paradigm(self) -> Paradigm:  # type: ignore[override]
        """ "pair-wise" or "class-level", from the similarity source."""
        return self.source.paradigm

    # the equation, (sim, pos_mask, neg_mask, *, m, gamma) -> [B]
    per_anchor_loss: Callable[..., Tensor]

    def forward(self, embeddings: Tensor, labels: Tensor) -> Tensor:
        self.check_batch(embeddings, labels)
        sim, pos_mask, neg_mask = self.source(embeddings, labels)
        per_anchor = self.per_anchor_loss(sim, pos_mask, neg_mask, m=self.m, gamma=self.gamma)
        active = pos_mask.any(1) & neg_mask.any(1)  # [B]
        self.last_stats = pair_stats(sim, pos_mask, neg_mask, active)
        return per_anchor.sum() / active.sum().clamp_min(1)
