"""The compiled scans behind RetrievalEvaluator: key order, floors (float and uint8 blocks),
rounding bounds, and exact metrics on blocks wider than a column tile, with long positive lists
and overflowing band slots."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from benchmark.evaluation import _scan
from benchmark.evaluation import bands as _bands
from benchmark.evaluation.similarity import output_error
from tests.benchmark.evaluation.conftest import evaluator


def keys_of_float32(x: torch.Tensor) -> np.ndarray:
    b = x.view(torch.int32).to(torch.int64).numpy()
    return np.where(b >= 0, b, -(2**31) - b)


def test_keys_order_like_the_values_and_zeros_tie() -> None:
    values = torch.tensor([-torch.inf, -2.0, -1e-30, -0.0, 0.0, 1e-30, 0.5, 1.0, torch.inf])
    keys = keys_of_float32(values)
    assert (np.diff(keys) >= 0).all()
    assert keys[3] == keys[4] == 0  # -0 and +0
    assert (np.diff(keys)[[0, 1, 2, 4, 5, 6, 7]] > 0).all()


def test_ceil_keys_give_the_smallest_float32_at_or_above() -> None:
    x = torch.tensor([0.1, -0.1, 0.25, -0.0, 1 / 3, -2 / 3], dtype=torch.float64)
    keys = _bands._ceil_keys(x)
    for value, key in zip(x.tolist(), keys.tolist(), strict=True):
        up = np.float32(value)
        if float(up) < value:
            up = np.nextafter(up, np.float32(np.inf))
        assert key == keys_of_float32(torch.tensor([up]))[0]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_native_floors_select_exactly_the_scores_that_can_reach_the_floor(dtype) -> None:
    gen = torch.Generator().manual_seed(0)
    scores = (torch.randn(5000, generator=gen) * 0.5).to(dtype)
    scores[:4] = torch.tensor([0.0, -0.0, torch.inf, -torch.inf])
    shift = 16 if dtype == torch.bfloat16 else 0
    raw = scores.view(torch.int16 if shift else torch.int32).to(torch.int64).numpy()
    keys = keys_of_float32(scores.float())
    floor_values = torch.tensor([0.3, 1e-3, 0.0, -0.2, 0.123456789], dtype=torch.float64)
    floors = np.append(_bands._ceil_keys(floor_values), np.iinfo(np.int64).max)  # + empty
    native = _scan.native_floors(floors, np.dtype(np.int16 if shift else np.int32), shift)
    for f, n in zip(floors, native, strict=True):
        reach = keys >= f
        assert not (reach & (raw < n)).any()  # nothing that reaches the floor is skipped
        if f > 0:
            assert (reach == (raw >= n)).all()  # and for a positive floor nothing else is kept


def test_uint8_floors_select_exactly_the_levels_that_reach_the_floor() -> None:
    levels = np.arange(256, dtype=np.uint8)
    floors = np.array([0, 1, 2, 130, 255, 256, np.iinfo(np.int64).max], dtype=np.int64)
    native = _scan.native_floors(floors, np.dtype(np.uint8), 0)
    for f, n in zip(floors, native, strict=True):
        reach = levels.astype(np.int64) >= f
        assert not (reach & (levels < n)).any()
        if 0 < f <= 255:
            assert (reach == (levels >= n)).all()


def test_bfloat16_output_bound_decides_each_side_correctly() -> None:
    """Rounding to bfloat16 never moves a value across t ± output_error(t) (ε_in = 0)."""
    gen = torch.Generator().manual_seed(1)
    t = torch.cat([torch.rand(300, generator=gen) * 2 - 1, torch.tensor([0.25, 0.5, -0.5])])
    bound = output_error(torch.bfloat16, t.double(), 0.0)
    assert bound.max() <= 2.0**-8 and bound.min() >= 2.0**-16
    for ti, ei in zip(t.double().tolist(), bound.tolist(), strict=True):
        v = torch.linspace(ti - 0.05, ti + 0.05, 4001, dtype=torch.float64)
        rounded = v.float().bfloat16().double()  # the product's float32 value, then its output
        exact = v.float().double()
        assert (exact[rounded >= ti + ei] >= ti).all()
        assert (exact[rounded < ti - ei] < ti).all()


def sorted_positions(sims: np.ndarray, relevant: np.ndarray, excluded: np.ndarray) -> list:
    """1-based positions of the relevant items per query from a full sort (ties: negatives
    first), excluded items dropped."""
    out = []
    for s, rel, exc in zip(sims, relevant, excluded, strict=True):
        keep = ~exc
        order = np.lexsort((rel[keep], -s[keep]))
        out.append(np.flatnonzero(rel[keep][order]) + 1)
    return out


def metrics_from_positions(positions: list, ks) -> dict[str, float]:
    rows = []
    for p in positions:
        if p.size == 0:
            continue
        r, k = p.size, np.arange(1, p.size + 1)
        row = {f"R@{kk}": float(p[0] <= kk) for kk in ks}
        row["mAP"] = float((k / p).mean())
        row["MAP@R"] = float((k / p * (p <= r)).sum() / r)
        row["R-Precision"] = float((p <= r).sum() / r)
        row["mINP"] = float(r / p[-1])  # R over the position of the hardest positive
        rows.append(row)
    return {key: float(np.mean([row[key] for row in rows])) for key in rows[0]}


def wide_case(seed: int, classes: int, ties: bool, n: int = 700, dim: int = 8):
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, classes, (n,), generator=gen)
    if ties:  # entries in {-1, 0, 1}: exact ties and duplicates
        emb = torch.randint(-1, 2, (n, dim), generator=gen).float()
        emb[(emb == 0).all(1), 0] = 1.0
    else:
        emb = torch.randn(classes, dim, generator=gen)[labels] + torch.randn(n, dim, generator=gen)
    unit = emb / torch.linalg.vector_norm(emb, dim=1, dtype=torch.float64).float()[:, None]
    sims = (unit.double() @ unit.double().T).float().numpy()
    return emb, labels, sims


@pytest.mark.parametrize("path", ["faiss", "bfloat16", "int8"], indirect=True)
@pytest.mark.parametrize("ties", [False, True], ids=["continuous", "ties"])
@pytest.mark.parametrize("classes", [4, 150], ids=["long-lists", "short-lists"])
def test_wide_blocks_and_overflowing_band_slots_stay_exact(
    monkeypatch: pytest.MonkeyPatch, path: str, ties: bool, classes: int
) -> None:
    """700 items: several panels, column tiles of 256 and a ragged last tile; 4 classes give
    positive lists longer than the linear search; one band slot forces the filling passes."""
    emb, labels, sims = wide_case(3, classes, ties)
    lab = labels.numpy()
    ks = (1, 5, 50)
    same = sorted_positions(sims, lab[:, None] == lab[None, :], np.eye(len(lab), dtype=bool))
    expected_same = metrics_from_positions(same, ks)
    q, g = slice(0, 200), slice(200, None)
    cams = torch.arange(len(lab)) % 3
    c = cams.numpy()
    same_cam = (lab[q, None] == lab[None, g]) & (c[q, None] == c[None, g])
    qg = sorted_positions(sims[q, g], lab[q, None] == lab[None, g], same_cam)
    qg = [p for p, row in zip(qg, (lab[q, None] == lab[None, g]) & ~same_cam, strict=True)
          if row.any()]  # fmt: skip
    expected_qg = metrics_from_positions(qg, ks)
    for cap in (None, 1):
        if cap:
            monkeypatch.setattr(_bands, "ROW_CAP", cap)
            monkeypatch.setattr(_bands, "TILE_CAP", cap)
        ev = evaluator("same_set", ks, path=path, chunk_size=96)
        assert ev.evaluate(emb, labels) == pytest.approx(expected_same, abs=1e-12)
        ev = evaluator("query_gallery", ks, path=path, chunk_size=64)
        got = ev.evaluate(emb[q], labels[q], emb[g], labels[g], cams[q], cams[g])
        assert got == pytest.approx(expected_qg, abs=1e-12)
