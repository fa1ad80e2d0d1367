"""Tiny P-K batches for the loss tests."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import Tensor

PKBatch = Callable[..., tuple[Tensor, Tensor]]


@pytest.fixture
def pk_batch() -> PKBatch:
    """Factory of (embeddings [B, dim], labels [B]): p classes × k samples, then singletons.

    Singletons are anchors without a positive. The generator is seeded, so equal arguments
    give equal batches.
    """

    def make(
        p: int = 4,
        k: int = 2,
        singletons: int = 0,
        dim: int = 8,
        dtype: torch.dtype = torch.float32,
        seed: int = 0,
    ) -> tuple[Tensor, Tensor]:
        generator = torch.Generator().manual_seed(seed)
        labels = torch.cat([torch.arange(p).repeat_interleave(k), p + torch.arange(singletons)])
        embeddings = torch.randn(len(labels), dim, generator=generator, dtype=dtype)
        return embeddings, labels

    return make
