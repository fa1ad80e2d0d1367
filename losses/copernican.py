"""Copernican loss (Pal & Savvides, AAAI 2018): Eq. 1, its gradients (Eq. 3-4), and its l2 baseline.

For a batch of m raw features x_i with labels y_i, a planet p_c per class and the sun
s = (1/m) Σ_i x_i (the mean of the batch's raw features), Eq. 1 is

    L = L_soft + λ ( (1/m) Σ_i (1 - cos(x_i, p_{y_i})) + (1/m) Σ_i [cos(x_i, s) - β]₊ )

pulling each sample towards its class's planet and pushing it from the batch mean until
cos(x_i, s) <= β, a signed margin in [-1, 1] (the paper: λ=1, β=-1 on CIFAR-10, λ=5, β=-0.5 on
CIFAR-100). s and p are points, not functions of x, so no gradient flows through them (Eq. 3-4):

    ∂/∂x_i planet = -(1/m) (p̂ - cos(x_i, p) x̂_i) / ‖x_i‖
    ∂/∂x_i sun    =  (1/m) [cos(x_i, s) > β] (ŝ - cos(x_i, s) x̂_i) / ‖x_i‖

Planets are buffers that start at 0 (cos(x, 0) := 0) and move in training mode, after the loss,
by the paper's rule p_y ← p_y + α (1/n_y) Σ_{y_i = y} x_i (α = 0.05), so their norm grows.

variant="l2" is the paper's l2 baseline, with s(a, b) = 1 - ½‖a - b‖² (cos(a, b) for unit
vectors) on raw features, so it depends on the feature norm:

    L = L_soft + λ ( (1/m) Σ_i ½‖x_i - p_{y_i}‖² + (1/m) Σ_i [(1 - β) - ½‖x_i - s‖²]₊ )

The Copernican method is the subject of US patents 11,636,344 and 12,131,260.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from losses.base import MetricLoss
from losses.proxy import SoftmaxLoss
from losses.similarity import Paradigm, check_class_count, check_class_ids, compute_dtype

Variant = Literal["cosine", "l2"]


def copernican_similarities(
    x: Tensor, planets: Tensor, sun: Tensor, *, variant: Variant
) -> tuple[Tensor, Tensor]:
    """(s(x_i, p_{y_i}) [B], s(x_i, s) [B]) for raw x [B, D], own planets [B, D], sun [D].

    s is cos for "cosine" (0 against a zero planet) and 1 - ½‖a - b‖² for "l2".
    """
    if variant == "cosine":
        x_hat = F.normalize(x, dim=1)
        return (x_hat * F.normalize(planets, dim=1)).sum(1), x_hat @ F.normalize(sun, dim=0)
    return 1 - 0.5 * (x - planets).square().sum(1), 1 - 0.5 * (x - sun[None]).square().sum(1)


class CopernicanLoss(MetricLoss):
    """Softmax cross-entropy plus λ times the mean planet and sun terms of Eq. 1.

    Args:
        lambda_: weight λ of the Copernican term against the softmax loss.
        beta: signed margin β in [-1, 1] of the sun term (cosine units; "l2": margin 1 - β).
        alpha: planet update rate α, in (0, 1].
        variant: "cosine" (the Copernican loss) or "l2" (the paper's l2 baseline).
    """

    paradigm: ClassVar[Paradigm] = "class-level"
    repr_fields = ("lambda_", "beta", "alpha", "variant")
    planets: Tensor  # [C, D] buffer

    def __init__(
        self,
        num_classes: int,
        embedding_dim: int,
        lambda_: float,
        beta: float,
        alpha: float = 0.05,
        variant: Variant = "cosine",
    ) -> None:
        super().__init__()
        lambdas = "the paper uses λ ∈ {0.01, 0.1, 1, 5}: 1 on CIFAR-10, 5 on CIFAR-100"
        betas = "the paper uses β ∈ {-1, -0.5, -0.1, 0, 0.1, 0.5}: -1 with λ=1 on CIFAR-10"
        variants = "'cosine' is the Copernican loss, 'l2' the paper's l2 baseline"
        check = self.check_arg
        check("lambda_", lambda_, lambda_ >= 0, ">= 0", f"{lambdas} (0 is softmax alone)")
        signed = "in [-1, 1] (a signed margin on cos(x, sun))"
        check("beta", beta, -1 <= beta <= 1, signed, f"{betas}, -0.5 with λ=5 on CIFAR-100")
        check("alpha", alpha, 0 < alpha <= 1, "in (0, 1]", "the paper uses 0.05")
        check("variant", repr(variant), variant in ("cosine", "l2"), "'cosine' or 'l2'", variants)
        check_class_count(type(self).__name__, num_classes, embedding_dim)
        self.softmax = SoftmaxLoss(num_classes, embedding_dim)
        self.lambda_, self.beta, self.alpha, self.variant = lambda_, beta, alpha, variant
        self.register_buffer("planets", torch.zeros(num_classes, embedding_dim))

    def forward(self, embeddings: Tensor, labels: Tensor) -> Tensor:
        self.check_batch(embeddings, labels)
        check_class_ids(labels, self.softmax.num_classes, type(self).__name__)
        softmax = self.softmax.cross_entropy(embeddings, labels)
        self.last_stats = self.softmax.last_stats
        with torch.autocast(embeddings.device.type, enabled=False):
            x = embeddings.to(compute_dtype(embeddings))  # [B, D] raw features, as in the paper
            sun = x.detach().mean(0)  # [D]
            planets = self.planets[labels].to(x.dtype)  # [B, D]
            s_planet, s_sun = copernican_similarities(x, planets, sun, variant=self.variant)
            # Eq. 1 per sample: planet 1 - s_planet plus sun [s_sun - β]₊
            copernican = ((1 - s_planet) + F.relu(s_sun - self.beta)).mean()
        if self.training:
            self._update_planets(x.detach(), labels)
        return softmax + self.lambda_ * copernican

    @torch.no_grad()
    def _update_planets(self, x: Tensor, labels: Tensor) -> None:
        """p_y ← p_y + α · mean of the batch's raw features of class y (absent classes: + 0)."""
        counts = torch.bincount(labels, minlength=self.planets.shape[0]).clamp_min(1)  # [C]
        sums = torch.zeros_like(self.planets).index_add_(0, labels, x.to(self.planets.dtype))
        self.planets += self.alpha * sums / counts[:, None]
