"""The shortlist arithmetics: their error bounds and their blocks."""

from __future__ import annotations

import pytest
import torch

from benchmark.evaluation import RetrievalEvaluator, arithmetic
from benchmark.evaluation.similarity import Levels, output_error, prepare, shortlist_error

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


@pytest.mark.parametrize("name", ["bfloat16", "float16", "float32", "int8"])
@pytest.mark.parametrize("dim", [3, 64, 2048])
def test_shortlist_error_bounds_the_copies_product(name: str, dim: int) -> None:
    x = hard_rows(dim, 0)
    e = prepare(x, "x", low_dtype=arithmetic.LOW_DTYPES[name], device=CPU, chunk=64)
    q, g = e.query, e.gallery
    approx = ((q.values.double() - q.zero) * q.scale) @ ((g.values.double() - g.zero) * g.scale).T
    error = (approx - reference(x, e.norms)).abs().max().item()
    assert error <= shortlist_error(e, e)
    if name != "float32":
        assert error > shortlist_error(e, e) / 100  # measured, not vacuous


@pytest.mark.parametrize("name", ["bfloat16", "float16", "float32", "int8", "int8-emulated"])
def test_block_scores_stay_within_their_bound(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each block's output, rounding included, brackets the reference similarity."""
    if name == "int8-emulated":
        monkeypatch.setattr(arithmetic, "_has_fbgemm", lambda: False)
    elif name == "int8" and not arithmetic._has_fbgemm():
        pytest.skip("this torch has no fbgemm")
    x = hard_rows(512, 1)
    low_dtype = arithmetic.LOW_DTYPES[name.removesuffix("-emulated")]
    e = prepare(x, "x", low_dtype=low_dtype, device=CPU, chunk=64)
    s = reference(x, e.norms)
    eps = shortlist_error(e, e)
    shortlist = arithmetic.block(name.removesuffix("-emulated"), CPU)(e.query, e.gallery)
    readout = shortlist.readout(-0.4 - eps, 1.0 + eps)
    scores = shortlist(e.query.values, 0).clone()
    if isinstance(readout, Levels):
        v = scores.double()
        inside = (v > 0) & (v < 255)
        low = (v - readout.zero - readout.slack) * readout.step - eps
        high = (v - readout.zero + readout.slack) * readout.step + eps
        assert ((low <= s) | (v == 0)).all() and ((s <= high) | (v == 255)).all()
        assert inside.float().mean() > 0.5
    else:
        bound = eps + output_error(readout, s.abs().clamp_max(1.0).flatten(), eps).view_as(s)
        assert ((scores.double() - s).abs() <= bound).all()


def test_int8_blocks_equal_their_exact_emulation() -> None:
    """fbgemm's levels are the emulated ones, bit for bit, over ragged slabs and panel starts."""
    if not arithmetic._has_fbgemm():
        pytest.skip("this torch has no fbgemm")
    e = prepare(hard_rows(64, 2), "x", low_dtype=torch.int8, device=CPU, chunk=64)
    fast = arithmetic.Int8Shortlist(e.query, e.gallery, fbgemm=True)
    slow = arithmetic.Int8Shortlist(e.query, e.gallery, fbgemm=False)
    for shortlist in (fast, slow):
        shortlist._SLAB = 32  # type: ignore[misc]  # ragged last slab, starts mid-slab
        shortlist.readout(-0.3, 0.9)
    for rows, start in [
        (slice(0, 40), 0),
        (slice(40, 90), 45),
        (slice(0, 1), 299),
        (slice(0, 300), 64),
    ]:
        q = e.query.values[rows]
        assert torch.equal(fast(q, start), slow(q, start))


@pytest.fixture
def deterministic_run():
    """What a Lightning `deterministic: true` run sets for its whole process."""
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(False)


def test_int8_runs_in_a_deterministic_run_and_leaves_it_so(deterministic_run: None) -> None:
    """torch refuses its quantized ops under deterministic algorithms; their sums are exact,
    so the evaluator allows them for the block and sets the flag back."""
    if not arithmetic._has_fbgemm():
        pytest.skip("this torch has no fbgemm")
    emb, labels = hard_rows(64, 3), torch.arange(300) % 8
    ev = RetrievalEvaluator("same_set", (1, 4), ("recall", "mAP"), arithmetic="int8")
    result = ev.evaluate(emb, labels)
    assert ev.last_backend == "torch-cpu-int8"
    assert torch.are_deterministic_algorithms_enabled()
    reference = RetrievalEvaluator(
        "same_set", (1, 4), ("recall", "mAP"), device="cpu", arithmetic="float32"
    )
    assert result == reference.evaluate(emb, labels)


@pytest.mark.parametrize("name", ["bfloat16", "float32", "float32-numpy", "float16"])
def test_cpu_blocks_tile_and_reuse_their_buffer(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(arithmetic.CpuShortlist, "_TILE", 7)  # ragged last tile
    low_dtype = arithmetic.LOW_DTYPES[name.removesuffix("-numpy")]
    e = prepare(torch.randn(60, 16), "x", low_dtype=low_dtype, device=CPU, chunk=8)
    shortlist = arithmetic.CpuShortlist(e.gallery, name.partition("-")[2] or "torch")
    low = e.gallery.values.double()
    atol = 2.0**-8 if name == "bfloat16" else 1e-6  # bfloat16 output rounding
    for rows, start in [
        (slice(0, 20), 0),
        (slice(20, 30), 25),
        (slice(0, 1), 59),
        (slice(30, 60), 30),
    ]:
        got = shortlist(e.query.values[rows], start)
        assert got.is_contiguous() and got.shape == (len(range(60)[rows]), 60 - start)
        torch.testing.assert_close(got.double(), low[rows] @ low[start:].T, rtol=0, atol=atol)
    assert shortlist._buffer.numel() == 20 * 60  # the largest block, allocated once


def test_levels_decide_each_side_correctly() -> None:
    """A level below lo is surely below t, one at or above hi surely at or above (ε = 0)."""
    gen = torch.Generator().manual_seed(3)
    levels = Levels.covering(-0.35, 0.97, 1.0)
    t = torch.rand(200, generator=gen, dtype=torch.float64) * 1.2 - 0.3
    lo, hi = levels.keys(t, 0.0)
    assert lo.min() >= 1 and hi.max() <= 255  # 0 (masked) is below every threshold
    v = torch.linspace(-1.0, 1.0, 20001, dtype=torch.float64)
    level = (torch.round(v / levels.step) + levels.zero).clamp(0, 255).long().numpy()
    for ti, lo_k, hi_k in zip(t.tolist(), lo.tolist(), hi.tolist(), strict=True):
        assert (v[level >= hi_k] >= ti).all()
        assert (v[level < lo_k] < ti).all()
        assert hi_k - lo_k <= 3  # the band is one or two levels wide


def test_env_var_and_argument_override_auto(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(arithmetic.ENV_VAR, "int8")
    assert arithmetic.requested("auto") == "int8"
    assert arithmetic.requested("float32") == "float32"  # the argument wins
    ev = RetrievalEvaluator("same_set", (1,), device="cpu")
    ev.evaluate(torch.randn(20, 4), torch.arange(20) % 4)
    assert ev.last_backend == "torch-cpu-int8"
    monkeypatch.setenv(arithmetic.ENV_VAR, "int4")
    with pytest.raises(ValueError, match="CIRCLEBENCH_EVAL_ARITHMETIC='int4' is not"):
        arithmetic.requested("auto")


def test_auto_is_left_to_the_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(arithmetic.ENV_VAR, raising=False)
    assert arithmetic.resolve("auto", CPU) == "auto"
    assert arithmetic.resolve("bfloat16", CPU) == "bfloat16"


def test_sgemm_names_an_engine() -> None:
    assert arithmetic.sgemm() in ("numpy", "torch")


def test_small_evaluation_skips_the_sgemm_measurement(monkeypatch: pytest.MonkeyPatch) -> None:
    """Below SMALL_MACS float32 takes torch's product unmeasured (the measurement took 0.38 s
    before a frozen-track cell's 0.02 s evaluation); from it on, sgemm's pick."""
    monkeypatch.setattr(arithmetic, "sgemm", lambda: "numpy")
    e = prepare(torch.randn(40, 8), "q", low_dtype=torch.float32, device=CPU, chunk=16)
    small = arithmetic.block("float32", CPU, arithmetic.SMALL_MACS - 1)(e.query, e.gallery)
    large = arithmetic.block("float32", CPU, arithmetic.SMALL_MACS)(e.query, e.gallery)
    unknown = arithmetic.block("float32", CPU)(e.query, e.gallery)
    assert [s._numpy for s in (small, large, unknown)] == [False, True, True]


def test_either_float32_engine_gives_the_same_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    """What lets a small evaluation take torch's product unmeasured: on near-duplicates and mixed
    norms, numpy's and torch's float32 products rank to the same metrics, to the last digit."""
    x, labels = hard_rows(64, 3), torch.arange(300) // 5
    monkeypatch.setattr(arithmetic, "SMALL_MACS", 0)  # every evaluation takes sgemm's engine
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
        ({"arithmetic": "int8", "backend": "faiss"}, "backend='faiss' computes float32"),
    ],
)
def test_arithmetic_errors(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        RetrievalEvaluator("same_set", (1,), **kwargs)


def test_int8_is_refused_on_cuda() -> None:
    with pytest.raises(ValueError, match="'int8' is a CPU shortlist"):
        arithmetic.resolve("int8", torch.device("cuda"))
