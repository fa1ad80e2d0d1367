"""The CUDA paths' decisions and arithmetic, checked on the CPU: the product settings, the blocks
of torch builds without `out_dtype`, the host copies, faiss's install check and fallbacks."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from benchmark.evaluation import RetrievalEvaluator, arithmetic, faiss_blocks
from benchmark.evaluation.cuda_blocks import CudaShortlist, HostBlock
from benchmark.evaluation.precision import _fp32_backends, ieee_float32
from benchmark.evaluation.similarity import output_error, prepare, shortlist_error

CPU, CUDA = torch.device("cpu"), torch.device("cuda")
MATMUL = torch.backends.cuda.matmul


@pytest.fixture
def matmul_settings() -> Iterator[None]:
    """Put every float32 and reduction setting back as it was (the tests change them)."""
    with ieee_float32():  # saves them all and restores them on exit
        torch.set_float32_matmul_precision("highest")
        yield


def test_legacy_tf32_flag_is_honoured_and_restored(matmul_settings: None) -> None:
    """Lightning's suggestion (`allow_tf32 = True`) with torch ≥ 2.9's per-backend setting: a
    product inside must see both APIs agree on IEEE float32 (reading the legacy flag runs the
    check a cuBLAS product runs, which raised "mix of the legacy and new APIs")."""
    MATMUL.allow_tf32 = True
    with ieee_float32():
        assert MATMUL.allow_tf32 is False
        assert torch.get_float32_matmul_precision() == "highest"
        assert all(b.fp32_precision == "ieee" for b in _fp32_backends())
    assert MATMUL.allow_tf32 is True


def test_new_api_tf32_is_honoured_and_restored(matmul_settings: None) -> None:
    if not _fp32_backends():
        pytest.skip("this torch has no per-backend fp32_precision (torch < 2.9)")
    MATMUL.fp32_precision = "tf32"  # the legacy getter cannot name this state and raises
    before = [b.fp32_precision for b in _fp32_backends()]
    with ieee_float32():
        assert MATMUL.allow_tf32 is False
    assert [b.fp32_precision for b in _fp32_backends()] == before


def test_reduced_precision_reductions_are_off_inside(matmul_settings: None) -> None:
    MATMUL.allow_bf16_reduced_precision_reduction = True
    MATMUL.allow_fp16_reduced_precision_reduction = True
    with ieee_float32():
        assert not MATMUL.allow_bf16_reduced_precision_reduction
        assert not MATMUL.allow_fp16_reduced_precision_reduction
    assert MATMUL.allow_bf16_reduced_precision_reduction
    assert MATMUL.allow_fp16_reduced_precision_reduction


def _rows(seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(120, 64, generator=gen) * torch.rand(120, 1, generator=gen) * 10
    x[:20] = x[20:40] + 1e-3 * torch.randn(20, 64, generator=gen)  # near-duplicates
    return x


@pytest.mark.parametrize(
    ("name", "out_dtype"),  # torch.mm(out_dtype=) itself runs on CUDA only
    [("bfloat16", False), ("float16", False), ("float32", False), ("float32", True)],
)
def test_cuda_blocks_stay_within_their_bound(name: str, out_dtype: bool) -> None:
    """The GPU block's arithmetic, run on CPU tensors: torch < 2.8 gives bfloat16 blocks in
    bfloat16 and float16 ones as float32 products of their values; each stays within bound."""
    e = prepare(_rows(0), "x", low_dtype=arithmetic.LOW_DTYPES[name], device=CPU, chunk=32)
    shortlist = CudaShortlist(e.low, out_dtype=out_dtype)
    shortlist._TILE = 50  # type: ignore[misc]  # a ragged last tile for the float16 path
    readout = shortlist.readout
    assert readout == (torch.bfloat16 if name == "bfloat16" else torch.float32)
    unit = e.raw / e.norms.float()[:, None]
    s = (unit.double() @ unit.double().T).float().double()
    eps = shortlist_error(e, e)
    for rows, start in [(slice(0, 120), 0), (slice(30, 70), 45)]:
        got = shortlist(e.low.values[rows], start).double()
        ref = s[rows, start:]
        bound = eps + output_error(readout, ref.abs().clamp_max(1.0).flatten(), eps).view_as(ref)
        assert ((got - ref).abs() <= bound).all()


@pytest.mark.parametrize("name", ["bfloat16", "float16"])
@pytest.mark.parametrize("protocol", ["same_set", "query_gallery"])
def test_evaluation_on_blocks_without_out_dtype_is_exact(
    name: str, protocol: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch 2.4-2.7's CUDA blocks, through the whole evaluator: the float32 answers."""
    monkeypatch.setattr(
        arithmetic, "block", lambda device, faiss: lambda g: CudaShortlist(g, out_dtype=False)
    )
    gen = torch.Generator().manual_seed(1)
    x, labels = _rows(2), torch.randint(0, 12, (120,), generator=gen)
    args = (x, labels) if protocol == "same_set" else (
        x[:40], labels[:40], x[40:], labels[40:],
        torch.randint(0, 3, (40,), generator=gen), torch.randint(0, 3, (80,), generator=gen),
    )  # fmt: skip
    metrics = ("recall", "mAP", "MAP@R", "R-Precision")
    ev = RetrievalEvaluator(protocol, (1, 4), metrics, device="cpu", arithmetic=name)  # type: ignore[arg-type]
    got = ev.evaluate(*args)
    monkeypatch.undo()
    reference = RetrievalEvaluator(protocol, (1, 4), metrics, device="cpu", arithmetic="float32")  # type: ignore[arg-type]
    assert got == reference.evaluate(*args)


def test_host_block_reuses_one_buffer() -> None:
    host = HostBlock(torch.float32, pinned=False)
    first = host.copy(torch.ones(4, 5))
    second = host.copy(torch.full((2, 3), 2.0))
    assert second.is_contiguous() and torch.equal(second, torch.full((2, 3), 2.0))
    assert first.untyped_storage().data_ptr() == second.untyped_storage().data_ptr()


def test_two_faiss_distributions_are_a_conflict_with_the_fix() -> None:
    assert faiss_blocks.conflict_message(["faiss-cpu"]) is None
    assert faiss_blocks.conflict_message(["faiss-gpu-cu12"]) is None
    message = faiss_blocks.conflict_message(["faiss-cpu", "faiss-gpu"])
    assert message is not None and "pip uninstall -y faiss-cpu faiss-gpu" in message


def test_import_faiss_refuses_a_conflict(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(faiss_blocks, "installed_faiss", lambda: ["faiss-cpu", "faiss-gpu"])
    with pytest.raises(ImportError, match=r"faiss issue #2892.*pip uninstall -y faiss-cpu"):
        faiss_blocks.import_faiss()
    ev = RetrievalEvaluator("same_set", (1,), backend="faiss", device="cpu")
    with pytest.raises(ImportError, match="installed together"):
        ev.evaluate(torch.randn(20, 4), torch.arange(20) % 4)
