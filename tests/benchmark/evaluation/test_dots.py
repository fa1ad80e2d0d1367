"""The compiled pair products behind the evaluator's re-checks, and the order they read pairs in."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from benchmark.evaluation import _dots
from benchmark.evaluation.similarity import (
    UnitEmbeddings,
    exact_similarities,
    prepare,
    raw_error,
    raw_similarities,
)


def embeddings(n: int, dim: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(n, dim, generator=gen) * torch.rand(n, 1, generator=gen) * 5


def pairs(n_q: int, n_g: int, m: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Scattered pairs in no particular order, repeats included."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, n_q, (m,), generator=gen), torch.randint(0, n_g, (m,), generator=gen)


def prepared(x: torch.Tensor, chunk: int = 16) -> UnitEmbeddings:
    return prepare(x, "emb", low_dtype=torch.bfloat16, device=torch.device("cpu"), chunk=chunk)


def unit(x: torch.Tensor) -> torch.Tensor:
    return x / torch.linalg.vector_norm(x, dim=1, dtype=torch.float64).float()[:, None]


@pytest.mark.parametrize("dim", [7, 512])
def test_exact_similarities_are_the_rounded_float64_dot_of_float32_unit_vectors(dim) -> None:
    x, y = embeddings(40, dim, 0), embeddings(50, dim, 1)
    q, g = prepared(x), prepared(y)
    rows, cols = pairs(40, 50, 3000, 2)
    got = exact_similarities(q, g, rows, cols)
    want = (unit(x).double() @ unit(y).double().T).float()[rows, cols]
    assert got.dtype == torch.float32
    assert torch.equal(got, want)


def test_identical_rows_get_identical_exact_similarities() -> None:
    x = embeddings(30, 64, 3)
    y = torch.cat([x[:10], x[:10]])  # gallery items i and i + 10 are the same vector
    q, g = prepared(x, 8), prepared(y, 8)
    rows = torch.arange(30).repeat_interleave(10)
    cols = torch.arange(10).repeat(30)
    first, second = exact_similarities(q, g, rows, cols), exact_similarities(q, g, rows, cols + 10)
    assert torch.equal(first, second)


@pytest.mark.parametrize("dim", [5, 2048])
def test_raw_similarities_stay_within_their_bound(dim) -> None:
    x, y = embeddings(30, dim, 4), embeddings(60, dim, 5)
    q, g = prepared(x), prepared(y)
    rows, cols = pairs(30, 60, 2000, 6)
    got = raw_similarities(q, g, rows, cols)
    reference = exact_similarities(q, g, rows, cols).double()
    error = (got - reference).abs().max().item()
    assert error <= raw_error(dim)
    assert error > 0  # a float32 sum really is approximate: the bound is not vacuous here


def test_empty_pair_lists() -> None:
    x = embeddings(4, 8, 7)
    q = prepared(x, 4)
    none = torch.zeros(0, dtype=torch.int64)
    assert exact_similarities(q, q, none, none).numel() == 0
    assert raw_similarities(q, q, none, none).numel() == 0


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_bucket_sort_is_a_stable_sort_of_the_pairs(dtype: type) -> None:
    gen = torch.Generator().manual_seed(9)
    keys = torch.randint(0, 50, (5000,), generator=gen).numpy().astype(dtype)
    values = torch.randint(0, 10**6, (5000,), generator=gen).numpy()
    order = np.argsort(keys, kind="stable")
    sorted_keys, sorted_values = _dots.bucket_sort(keys, values, 50)
    assert (sorted_keys == keys[order]).all() and (sorted_values == values[order]).all()
    assert (sorted_keys.dtype, sorted_values.dtype) == (keys.dtype, values.dtype)
    empty = _dots.bucket_sort(keys[:0], values[:0], 50)
    assert empty[0].size == empty[1].size == 0
