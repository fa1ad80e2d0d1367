"""Copernican loss (Pal & Savvides, AAAI 2018): softmax + λ (planet loss + β · sun loss).

On L2-normalised embeddings x̂, the planet loss pulls each sample to its class centre p_y (the
"planet") and the sun loss pushes it away from the batch mean μ (the "sun"):

* variant "cosine": planet = mean_i (1 - cos(x̂_i, p_{y_i})), sun = -mean_i (1 - cos(x̂_i, μ));
* variant "l2" (the paper's l2-Copernican baseline): the same with ½ ||·||² distances.

Centres are buffers moved in training mode without gradient by p_c ← p_c + α · mean(x̂ of class c)
(cosine: only the direction matters, the sum accumulates it); for "l2" the same step is taken on
the residual, p_c ← p_c + α · mean(x̂ - p_c), since a Euclidean centre must stay at the class mean.
μ is a point like the centres: no gradient flows through it.

The Copernican method is the subject of US patents 11,636,344 and 12,131,260.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from losses.base import MetricLoss
from losses.proxy import SoftmaxLoss
from losses.similarity import Paradigm, check_class_count, check_labels, compute_dtype


def copernican_terms(
    x: Tensor, planets: Tensor, sun: Tensor, *, variant: Literal["cosine", "l2"]
) -> tuple[Tensor, Tensor]:
    """(planet loss, sun loss) for unit embeddings x [B, D], their centres [B, D], sun [D]."""
    if variant == "cosine":
        cos_planet = (x * F.normalize(planets, dim=1)).sum(1)  # a zero centre gives cos 0
        cos_sun = x @ F.normalize(sun, dim=0)
        return (1 - cos_planet).mean(), -(1 - cos_sun).mean()
    planet = 0.5 * (x - planets).square().sum(1).mean()
    return planet, -0.5 * (x - sun).square().sum(1).mean()


class CopernicanLoss(MetricLoss):
    """Softmax cross-entropy plus λ (planet + β · sun) on L2-normalised embeddings.

    Args:
        lambda_: weight of the Copernican term against the softmax loss.
        beta: weight of the sun loss against the planet loss.
        alpha: centre update rate, in (0, 1].
        variant: "cosine" (the Copernican loss) or "l2" (its Euclidean baseline).
    """

    paradigm: ClassVar[Paradigm] = "class-level"
    planets: Tensor  # [C, D] buffer

    def __init__(
        self,
        num_classes: int,
        embedding_dim: int,
        lambda_: float,
        beta: float,
        alpha: float = 0.05,
        variant: Literal["cosine", "l2"] = "cosine",
    ) -> None:
        super().__init__()
        for name, value in (("lambda_", lambda_), ("beta", beta)):
            if not value >= 0:
                raise ValueError(
                    f"CopernicanLoss: {name} must be >= 0, got {value}; 0 switches that term off"
                )
        if not 0 < alpha <= 1:
            raise ValueError(f"CopernicanLoss: alpha must be in (0, 1], got {alpha}; default 0.05")
        if variant not in ("cosine", "l2"):
            raise ValueError(
                f"CopernicanLoss: variant must be 'cosine' or 'l2', got {variant!r}; "
                "'cosine' is the Copernican loss, 'l2' its Euclidean baseline"
            )
        check_class_count(type(self).__name__, num_classes, embedding_dim)
        self.softmax = SoftmaxLoss(num_classes, embedding_dim)
        self.lambda_, self.beta, self.alpha, self.variant = lambda_, beta, alpha, variant
        self.register_buffer("planets", torch.zeros(num_classes, embedding_dim))

    def forward(self, embeddings: Tensor, labels: Tensor) -> Tensor:
        self.check_batch(embeddings, labels)
        check_labels(labels, self.softmax.num_classes, type(self).__name__)
        softmax = self.softmax.cross_entropy(embeddings, labels)
        self.last_stats = self.softmax.last_stats
        with torch.autocast(embeddings.device.type, enabled=False):
            x = F.normalize(embeddings.to(compute_dtype(embeddings)), dim=1)  # [B, D]
            sun = x.detach().mean(0)  # [D]
            planets = self.planets[labels].to(x.dtype)  # [B, D]
            planet, sun_loss = copernican_terms(x, planets, sun, variant=self.variant)
        if self.training:
            self._update_planets(x.detach(), labels)
        return softmax + self.lambda_ * (planet + self.beta * sun_loss)

    @torch.no_grad()
    def _update_planets(self, x: Tensor, labels: Tensor) -> None:
        counts = torch.bincount(labels, minlength=self.planets.shape[0])  # [C]
        sums = torch.zeros_like(self.planets).index_add_(0, labels, x.to(self.planets.dtype))
        present = counts > 0
        means = sums[present] / counts[present, None]  # [C_batch, D]
        if self.variant == "l2":
            means = means - self.planets[present]
        self.planets[present] += self.alpha * means

    def extra_repr(self) -> str:
        return (
            f"lambda_={self.lambda_}, beta={self.beta}, alpha={self.alpha}, "
            f"variant={self.variant!r}"
        )
