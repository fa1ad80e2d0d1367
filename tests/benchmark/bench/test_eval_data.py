"""`bench eval`'s data: deterministic, scaled by --subset, and as stressing as each case says."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch

from benchmark.bench import eval as bench_eval
from benchmark.bench.eval_data import CASES, REAL_SIZES, make_data, scaled_case


@pytest.mark.parametrize("name", list(CASES))
def test_every_case_is_deterministic_and_scales(name: str) -> None:
    case = scaled_case(CASES[name], 0.02)
    first, second = make_data(case), make_data(case)
    assert first["query_emb"].shape == (case.n_query, case.dim)
    for key, value in first.items():
        assert value is None or torch.equal(value, second[key])
    if case.protocol == "query_gallery":
        assert first["gallery_emb"].shape == (case.n_gallery, case.dim)


def cosines(x: torch.Tensor) -> torch.Tensor:
    unit = torch.nn.functional.normalize(x)
    return unit @ unit.T


def test_collapsed_puts_every_cosine_above_085_and_positives_barely_above() -> None:
    data = make_data(scaled_case(CASES["collapsed"], 0.05))
    x, labels = data["query_emb"][:1000], data["query_labels"][:1000]
    sims, same = cosines(x), labels[:, None] == labels[None, :]
    assert sims.min() > 0.85
    gap = sims[same & ~torch.eye(1000, dtype=torch.bool)].mean() - sims[~same].mean()
    assert 0.01 < gap < 0.05  # within int8's error (≈ 0.04) of the negatives


def test_duplicates_copies_items_within_and_across_classes() -> None:
    data = make_data(scaled_case(CASES["duplicates"], 0.05))
    x, labels = data["query_emb"], data["query_labels"]
    # Items with one row index are copies: an [N, N] comparison, not the [N, N, D] of the rows.
    row = torch.unique(x, dim=0, return_inverse=True)[1]
    rows, cols = torch.nonzero(torch.triu(row[:, None] == row[None, :], diagonal=1)).T
    same = labels[rows] == labels[cols]
    assert same.sum() > len(x) / 6 and (~same).sum() > len(x) / 200


def test_low_rank_lives_in_its_latent_dimensions() -> None:
    case = scaled_case(CASES["low-rank"], 0.02)
    x = make_data(case)["query_emb"]
    assert torch.linalg.matrix_rank(x) == case.latent


def test_the_default_cases_are_the_real_sizes() -> None:
    assert REAL_SIZES == ("market", "msmt17", "sop")


def test_a_cold_run_is_a_fresh_process_with_an_empty_numba_cache(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What `--cold` times: the first evaluation after an install, where numba has no cache."""
    seen = {}
    real = subprocess.run

    def run(
        argv: list[str], *, env: dict[str, str], **kwargs: object
    ) -> subprocess.CompletedProcess:
        cache = Path(env["NUMBA_CACHE_DIR"])
        seen["empty"] = cache.is_dir() and not any(cache.iterdir())
        code = argv[-1].replace("print(first_seconds(", "print(first_seconds.__name__, (")
        seen["out"] = real([*argv[:-1], code], capture_output=True, text=True)
        return subprocess.CompletedProcess(argv, 0, stdout="0.5\n")

    monkeypatch.setattr(bench_eval.subprocess, "run", run)
    case = scaled_case(CASES["market"], 0.01)
    assert bench_eval.cold_seconds(case, "auto", "cpu") == 0.5
    assert seen["empty"] and seen["out"].returncode == 0, seen["out"].stderr  # the case rebuilds
    assert bench_eval.first_seconds(case, "float32", "cpu") > 0
