"""A chunk whose band overflows is recounted with float32 blocks: same metrics, bounded cost."""

from __future__ import annotations

import pytest
import torch

from benchmark.evaluation import ranks
from tests.benchmark.evaluation.conftest import evaluator, force
from tests.benchmark.evaluation.test_choice import collapsed


def sets(protocol: str) -> tuple:
    """Collapsed embeddings (a coarse arithmetic's band holds many pairs): one set, or queries
    and gallery with cameras."""
    x = collapsed(n=600, dim=32)
    labels = torch.arange(600) // 6
    if protocol == "same_set":
        return (x, labels)
    gen = torch.Generator().manual_seed(2)
    cams = torch.randint(0, 3, (600,), generator=gen)
    q = torch.arange(600) % 3 == 0  # two queries and four gallery items of each class
    return (x[q], labels[q], x[~q], labels[~q], cams[q], cams[~q])


@pytest.mark.parametrize("protocol", ["same_set", "query_gallery"])
@pytest.mark.parametrize("name", ["bfloat16", "float16"])
def test_a_named_coarse_arithmetic_falls_back_where_its_band_overflows(
    protocol: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    force(name, monkeypatch)
    args = sets(protocol)
    coarse = evaluator(protocol, path=name, chunk_size=64)
    got = coarse.evaluate(*args)
    assert coarse.last_report is not None
    chunks = -(-args[0].shape[0] // 64)
    if name == "bfloat16":
        assert coarse.last_report.fallbacks == chunks  # every chunk: most pairs in the band
    exact = evaluator(protocol, path="float32", chunk_size=64)
    assert got == exact.evaluate(*args) and exact.last_report.fallbacks == 0


@pytest.mark.parametrize("protocol", ["same_set", "query_gallery"])
@pytest.mark.parametrize("share", [0.0, 1.0])
def test_counts_are_the_same_whichever_chunks_fall_back(
    protocol: str, share: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """share 0: every chunk with a band pair is recounted in float32, after its own scan has
    counted part of the histogram; share 1: none is. Clustered random data, mixed chunks."""
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(300, 16, generator=gen)
    labels = torch.randint(0, 30, (300,), generator=gen)
    args = (x, labels) if protocol == "same_set" else (
        x[:100], labels[:100], x[100:], labels[100:],
        torch.randint(0, 2, (100,), generator=gen), torch.randint(0, 2, (200,), generator=gen),
    )  # fmt: skip
    reference = evaluator(protocol, path="float32", chunk_size=32).evaluate(*args)
    monkeypatch.setattr(ranks, "FALLBACK_SHARE", share)
    ev = evaluator(protocol, path="bfloat16", chunk_size=32)
    assert ev.evaluate(*args) == reference
    assert ev.last_report is not None
    assert (ev.last_report.fallbacks > 0) == (share == 0.0)
