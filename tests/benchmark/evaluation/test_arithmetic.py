"""The shortlist arithmetics: their error bounds and their blocks."""

from __future__ import annotations

import pytest
import torch

from benchmark.evaluation import RetrievalEvaluator, arithmetic
from benchmark.evaluation.similarity import output_error, prepare, shortlist_error

CPU = torch.device("cpu")


def hard_rows(dim: int, seed: int) -> torch.Tensor:
    """Rows of mixed norms, near-duplicates (s ≈ 1) and one spike (a large peak entry)."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(300, dim, generator=gen) * torch.rand(300, 1, generator=gen) * 100
    x[:50] = x[50:100] + 1e-3 * torch.randn(50, dim, generator=gen)
    x[100, 0] = 1e4
    return x


def reference(x: torch.Tensor, norms: torch.Tensor) -> torch.Tensor:
    unit = x / norms.float()[:, None]
    return (unit.double() @ unit.double().T).float().double()


@pytest.mark.parametrize("name", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("dim", [3, 64, 2048])
def test_shortlist_error_bounds_the_copies_product(name: str, dim: int) -> None:
    x = hard_rows(dim, 0)
    e = prepare(x, "x", low_dtype=arithmetic.LOW_DTYPES[name], device=CPU, chunk=64)
    approx = e.low.values.double() @ e.low.values.double().T
    error = (approx - reference(x, e.norms)).abs().max().item()
    assert error <= shortlist_error(e, e)
    if name != "float32":
        assert error > shortlist_error(e, e) / 100  # measured, not vacuous


@pytest.mark.parametrize("name", ["bfloat16", "float16", "float32"])
def test_block_scores_stay_within_their_bound(name: str) -> None:
    """Each block's output, rounding included, brackets the reference similarity."""
    x = hard_rows(512, 1)
    e = prepare(x, "x", low_dtype=arithmetic.LOW_DTYPES[name], device=CPU, chunk=64)
    s = reference(x, e.norms)
    eps = shortlist_error(e, e)
    shortlist = arithmetic.block(CPU)(e.low)
    readout = shortlist.readout
    scores = shortlist(e.low.values, 0).clone()
    bound = eps + output_error(readout, s.abs().clamp_max(1.0).flatten(), eps).view_as(s)
    assert ((scores.double() - s).abs() <= bound).all()


@pytest.mark.parametrize("name", ["bfloat16", "float32", "float32-numpy", "float16"])
def test_cpu_blocks_tile_and_reuse_their_buffer(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(arithmetic.CpuShortlist, "_TILE", 7)  # ragged last tile
    low_dtype = arithmetic.LOW_DTYPES[name.removesuffix("-numpy")]
    e = prepare(torch.randn(60, 16), "x", low_dtype=low_dtype, device=CPU, chunk=8)
    shortlist = arithmetic.CpuShortlist(e.low, name.partition("-")[2] or "torch")
    low = e.low.values.double()
    atol = 2.0**-8 if name == "bfloat16" else 1e-6  # bfloat16 output rounding
    for rows, start in [
        (slice(0, 20), 0),
        (slice(20, 30), 25),
        (slice(0, 1), 59),
        (slice(30, 60), 30),
    ]:
        got = shortlist(e.low.values[rows], start)
        assert got.is_contiguous() and got.shape == (len(range(60)[rows]), 60 - start)
        torch.testing.assert_close(got.double(), low[rows] @ low[start:].T, rtol=0, atol=atol)
    assert shortlist._buffer.numel() == 20 * 60  # the largest block, allocated once


def test_env_var_and_argument_override_auto(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(arithmetic.ENV_VAR, "float16")
    assert arithmetic.requested("auto") == "float16"
    assert arithmetic.requested("float32") == "float32"  # the argument wins
    ev = RetrievalEvaluator("same_set", (1,), device="cpu")
    ev.evaluate(torch.randn(20, 4), torch.arange(20) % 4)
    assert ev.last_backend == "torch-cpu-float16"
    monkeypatch.setenv(arithmetic.ENV_VAR, "int4")
    with pytest.raises(ValueError, match=r"CIRCLEBENCH_EVAL_ARITHMETIC must be one of .* 'int4'"):
        arithmetic.requested("auto")
    monkeypatch.setenv(arithmetic.ENV_VAR, "int8")
    with pytest.raises(ValueError, match="'int8' \\(int8 was removed"):
        arithmetic.requested("auto")


def test_auto_is_left_to_the_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(arithmetic.ENV_VAR, raising=False)
    assert arithmetic.requested("auto") == "auto"
    assert arithmetic.requested("bfloat16") == "bfloat16"


@pytest.mark.parametrize(
    ("vendor", "engine"), [("AuthenticAMD", "numpy"), ("GenuineIntel", "torch"), (None, "torch")]
)
def test_sgemm_takes_numpys_blas_on_amd_and_torchs_elsewhere(
    vendor: str | None, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = f"processor\t: 0\nvendor_id\t: {vendor}\nflags\t\t: avx2\n" if vendor else ""
    monkeypatch.setattr(arithmetic.Path, "read_text", lambda self: text)
    assert arithmetic.sgemm() == engine
    e = prepare(torch.randn(40, 8), "q", low_dtype=torch.float32, device=CPU, chunk=16)
    assert arithmetic.block(CPU)(e.low)._numpy == (engine == "numpy")


def test_either_float32_engine_gives_the_same_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    """What lets a small evaluation take torch's product unmeasured: on near-duplicates and mixed
    norms, numpy's and torch's float32 products rank to the same metrics, to the last digit."""
    x, labels = hard_rows(64, 3), torch.arange(300) // 5
    got = {}
    for engine in ("numpy", "torch"):
        monkeypatch.setattr(arithmetic, "sgemm", lambda engine=engine: engine)
        ev = RetrievalEvaluator("same_set", (1, 2, 4), device="cpu", arithmetic="float32")
        got[engine] = ev.evaluate(x, labels)
    assert got["numpy"] == got["torch"]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"arithmetic": "int4"}, "arithmetic must be one of"),
        ({"arithmetic": "int8"}, "int8 was removed: it was never faster than auto's pick"),
        ({"arithmetic": "bfloat16", "backend": "faiss"}, "backend='faiss' computes float32"),
    ],
)
def test_arithmetic_errors(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        RetrievalEvaluator("same_set", (1,), **kwargs)
