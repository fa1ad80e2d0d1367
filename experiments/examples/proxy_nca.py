"""A user's own loss, as an example: Proxy-NCA (Movshovitz-Attias et al., ICCV 2017, Eq. 4).

A plain `nn.Module` with `forward(embeddings [B, D], labels [B]) -> scalar`, nothing of
circlebench's: it enters the comparison through `losses.ExternalLoss`
(`experiments/examples/proxy_nca.yaml`), which trains its proxies at the loss lr. Any
class in an importable file works the same way; this file is importable as
`experiments.examples.proxy_nca` from the repository root.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class ProxyNCALoss(nn.Module):
    """-log(exp(-s·d(x, p_y)) / Σ_{z≠y} exp(-s·d(x, p_z))), mean over the batch.

    d is the squared Euclidean distance between the L2-normalised embedding x and proxy p
    (in [0, 4]); the positive proxy is left out of the denominator, as in the paper.

    Args:
        num_classes: training classes, one proxy each; kept as `self.num_classes`, where
            circlebench finds it to check it against the data.
        embedding_dim: D, the embedder's output size.
        scale: s, the inverse temperature (ProxyNCA++, Teh et al. 2020, uses 1/T = 9).
    """

    def __init__(self, num_classes: int, embedding_dim: int, scale: float = 9.0) -> None:
        super().__init__()
        if num_classes < 2 or embedding_dim < 1 or not scale > 0:
            raise ValueError(
                f"ProxyNCALoss: need num_classes >= 2, embedding_dim >= 1 and scale > 0, got "
                f"{num_classes}, {embedding_dim} and {scale}"
            )
        self.num_classes, self.scale = num_classes, scale
        self.proxies = nn.Parameter(torch.randn(num_classes, embedding_dim) / embedding_dim**0.5)

    def forward(self, embeddings: Tensor, labels: Tensor) -> Tensor:
        x = F.normalize(embeddings, dim=1)
        p = F.normalize(self.proxies.to(x.dtype), dim=1)
        logits = -self.scale * (2 - 2 * x @ p.T).clamp_min(0)  # [B, C]: -s·‖x - p‖²
        target = labels[:, None]  # [B, 1]
        positive = logits.gather(1, target).squeeze(1)  # [B]
        negatives = logits.scatter(1, target, -torch.inf)  # [B, C], the positive left out
        return (torch.logsumexp(negatives, dim=1) - positive).mean()

    def extra_repr(self) -> str:
        return f"num_classes={self.num_classes}, scale={self.scale}"
