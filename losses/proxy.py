"""Classification losses: softmax, NormFace, CosFace / AM-Softmax and ArcFace.

NormFace (Wang et al., 2017) scales cosine logits, CosFace / AM-Softmax (Wang et al., 2018) also
subtracts an additive cosine margin m from the target logit, which is Eq. 2 of Sun et al. (2020)
with s = γ, and ArcFace (Deng et al., 2019) adds an angular margin m (radians) to the target
angle. All but the plain softmax score an embedding against learnable class proxies through
`ClassProxies`, so the cross-entropy is a function of (sim, pos_mask, neg_mask) like every loss.
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from losses.base import MetricLoss
from losses.similarity import (
    ClassProxies,
    LazyStats,
    Paradigm,
    check_class_count,
    check_class_ids,
    compute_dtype,
    pair_stats,
)


def margin_cross_entropy(sim: Tensor, pos_mask: Tensor, neg_mask: Tensor, *, s: float) -> Tensor:
    """Per-anchor cross-entropy [B] of logits s·sim whose target is the one positive per row."""
    logits = s * sim.to(compute_dtype(sim))
    all_logits = torch.where(pos_mask | neg_mask, logits, -torch.inf)
    return torch.logsumexp(all_logits, dim=1) - torch.where(pos_mask, logits, 0.0).sum(1)


def arcface_target(sim: Tensor, *, m: float) -> Tensor:
    """cos(θ + m) for sim = cos θ, continued past θ + m > π by cos θ - m·sin(m) (monotone)."""
    sin = (1 - sim.square()).clamp_min(1e-12).sqrt()  # clamp keeps the gradient finite at |s|=1
    shifted = sim * math.cos(m) - sin * math.sin(m)
    return torch.where(sim > math.cos(math.pi - m), shifted, sim - m * math.sin(m))


class SoftmaxLoss(MetricLoss):
    """Linear classifier (with bias) on raw embeddings + cross-entropy; the plain baseline.
    `last_stats` are cosine similarities between embeddings and the classifier's weights."""

    paradigm: ClassVar[Paradigm] = "class-level"

    def __init__(self, num_classes: int, embedding_dim: int) -> None:
        super().__init__()
        check_class_count(type(self).__name__, num_classes, embedding_dim)
        self.num_classes = num_classes
        self.classifier = nn.Linear(embedding_dim, num_classes)

    def forward(self, embeddings: Tensor, labels: Tensor) -> Tensor:
        self.check_batch(embeddings, labels)
        check_class_ids(labels, self.num_classes, type(self).__name__)
        return self.cross_entropy(embeddings, labels)

    def cross_entropy(self, embeddings: Tensor, labels: Tensor) -> Tensor:
        """`forward` without the input checks, for Center and Copernican losses (whose own checks
        name them)."""
        with torch.autocast(embeddings.device.type, enabled=False):
            x = embeddings.to(compute_dtype(embeddings))
            weight = self.classifier.weight.to(x.dtype)
            logits = F.linear(x, weight, self.classifier.bias.to(x.dtype))  # [B, C]
            loss = F.cross_entropy(logits, labels)
        # Cosines to the classifier's rows as they are now: the optimiser changes them in place.
        x, weight = x.detach(), weight.detach().clone()

        @torch.no_grad()
        def stats() -> dict[str, Tensor]:
            sim = F.normalize(x, dim=1) @ F.normalize(weight, dim=1).T
            pos_mask = F.one_hot(labels, self.num_classes).bool()
            every_anchor = torch.ones_like(labels, dtype=torch.bool)  # cross-entropy is never 0
            return pair_stats(sim, pos_mask, ~pos_mask, every_anchor)

        self.last_stats = LazyStats(stats)
        return loss


class _ProxyCrossEntropy(MetricLoss):
    """Shared shell: proxies, label check, stats; subclasses give the target logit's margin."""

    paradigm: ClassVar[Paradigm] = "class-level"

    def __init__(self, num_classes: int, embedding_dim: int, logit_scale: float) -> None:
        super().__init__()
        self.source = ClassProxies(num_classes, embedding_dim)
        self.logit_scale = logit_scale

    def margin_sim(self, sim: Tensor, pos_mask: Tensor) -> Tensor:
        """sim [B, C] with the margin applied to the target entries (none for NormFace)."""
        return sim

    def forward(self, embeddings: Tensor, labels: Tensor) -> Tensor:
        self.check_batch(embeddings, labels)
        sim, pos_mask, neg_mask = self.source(embeddings, labels)
        per_anchor = margin_cross_entropy(
            self.margin_sim(sim, pos_mask), pos_mask, neg_mask, s=self.logit_scale
        )
        self.last_stats = pair_stats(sim, pos_mask, neg_mask, per_anchor.detach() > 0)
        return per_anchor.mean()


class NormFaceLoss(_ProxyCrossEntropy):
    """Cross-entropy over `scale`·cos(x, w_c) (Wang et al., 2017)."""

    repr_fields = ("scale",)

    def __init__(self, num_classes: int, embedding_dim: int, scale: float = 16.0) -> None:
        self.check_arg("s (scale)", scale, scale > 0, "> 0", "NormFace uses about 16")
        super().__init__(num_classes, embedding_dim, scale)
        self.scale = scale


class CosFaceLoss(_ProxyCrossEntropy):
    """CosFace / AM-Softmax: cross-entropy over s·(cos θ_c - m·[c = y]) (additive cosine margin)."""

    repr_fields = ("m", "s")

    def __init__(
        self, num_classes: int, embedding_dim: int, m: float = 0.35, s: float = 30.0
    ) -> None:
        hint = "AM-Softmax uses m=0.35, s=30"
        self.check_arg("s (scale)", s, s > 0, "> 0", hint)
        self.check_arg("m", m, 0.0 <= m < 1.0, "in [0, 1)", hint)
        super().__init__(num_classes, embedding_dim, s)
        self.m, self.s = m, s

    def margin_sim(self, sim: Tensor, pos_mask: Tensor) -> Tensor:
        # m as a Python float keeps sim's dtype: m * pos_mask would be a float32 tensor (0.35 ->
        # 0.3499999940) and shift fp64 logits by the rounded margin
        return torch.where(pos_mask, sim - self.m, sim)


AMSoftmaxLoss = CosFaceLoss


class ArcFaceLoss(_ProxyCrossEntropy):
    """ArcFace: cross-entropy over s·cos(θ_c + m·[c = y]); m is an angle in radians."""

    repr_fields = ("m", "s")  # `extra_repr` adds m's unit

    def __init__(
        self, num_classes: int, embedding_dim: int, m: float = 0.5, s: float = 64.0
    ) -> None:
        hint = "ArcFace uses m=0.5 rad (about 28.6 degrees), s=64"
        self.check_arg("s (scale)", s, s > 0, "> 0", hint)
        self.check_arg("m", m, 0.0 <= m < math.pi / 2, f"in [0, {math.pi / 2:g})", hint)
        super().__init__(num_classes, embedding_dim, s)
        self.m, self.s = m, s

    def margin_sim(self, sim: Tensor, pos_mask: Tensor) -> Tensor:
        return torch.where(pos_mask, arcface_target(sim, m=self.m), sim)

    def extra_repr(self) -> str:
        return f"m={self.m} rad, s={self.s}"
