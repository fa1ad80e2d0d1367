"""Center loss (Wen et al., ECCV 2016, Eq. 2-5): softmax + λ · ½ ||x_i - c_{y_i}||².

The class centres are buffers (checkpointed, not optimised) moved in training mode after each
batch by Eq. 4: c_j ← c_j - α Σ_{i: y_i = j} (c_j - x_i) / (1 + n_j).
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from losses.base import MetricLoss
from losses.proxy import SoftmaxLoss
from losses.similarity import Paradigm, check_class_count, check_class_ids, compute_dtype


class CenterLoss(MetricLoss):
    """Softmax cross-entropy plus λ times the mean squared distance to the class centre.

    Args:
        lambda_: weight of the centre term.
        alpha: centre learning rate of Eq. 4, in (0, 1].
    """

    paradigm: ClassVar[Paradigm] = "class-level"
    repr_fields = ("lambda_", "alpha")
    centers: Tensor  # [C, D] buffer

    def __init__(
        self, num_classes: int, embedding_dim: int, lambda_: float = 0.003, alpha: float = 0.5
    ) -> None:
        super().__init__()
        self.check_arg("lambda_", lambda_, lambda_ >= 0, ">= 0", "Wen et al. use 0.003")
        self.check_arg("alpha", alpha, 0 < alpha <= 1, "in (0, 1]", "Wen et al. use 0.5")
        check_class_count(type(self).__name__, num_classes, embedding_dim)
        self.softmax = SoftmaxLoss(num_classes, embedding_dim)
        self.lambda_, self.alpha = lambda_, alpha
        self.register_buffer("centers", torch.zeros(num_classes, embedding_dim))

    def forward(self, embeddings: Tensor, labels: Tensor) -> Tensor:
        self.check_batch(embeddings, labels)
        check_class_ids(labels, self.softmax.num_classes, type(self).__name__)
        softmax = self.softmax.cross_entropy(embeddings, labels)
        self.last_stats = self.softmax.last_stats
        with torch.autocast(embeddings.device.type, enabled=False):
            x = embeddings.to(compute_dtype(embeddings))
            diff = x - self.centers[labels].to(x.dtype)  # [B, D]
            center = 0.5 * diff.square().sum(1).mean()
        if self.training:
            self._update_centers(diff.detach(), labels)
        return softmax + self.lambda_ * center

    @torch.no_grad()
    def _update_centers(self, diff: Tensor, labels: Tensor) -> None:
        """Eq. 4 with Δc_j = Σ (c_j - x_i) / (1 + n_j) over the batch's samples of class j."""
        step = torch.zeros_like(self.centers).index_add_(0, labels, diff.to(self.centers.dtype))
        counts = torch.bincount(labels, minlength=self.centers.shape[0])  # [C]
        self.centers += self.alpha * step / (1 + counts)[:, None]
