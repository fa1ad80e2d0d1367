"""Every shortlist path of the evaluator, forced even where this machine lacks it natively."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from benchmark.evaluation import RetrievalEvaluator, arithmetic
from benchmark.evaluation.faiss_blocks import faiss_has_gpu, import_faiss

# faiss float32, then torch in each arithmetic (float32 products by torch and by numpy's BLAS);
# "cuda-*" the GPU paths where a GPU exists.
PATHS = ["faiss", "float32", "float32-numpy", "bfloat16", "float16"] + (
    ["cuda-float32", "cuda-bfloat16", "cuda-float16"] if torch.cuda.is_available() else []
)
HAS_FAISS = importlib.util.find_spec("faiss") is not None
if torch.cuda.is_available() and HAS_FAISS and faiss_has_gpu(import_faiss()):
    PATHS.append("cuda-faiss")  # faiss's GPU kernel over the gallery kept on the GPU


def force(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make `path` run as named where a choice would otherwise be measured or detected."""
    if path in ("float32", "float32-numpy"):
        monkeypatch.setattr(arithmetic, "sgemm", lambda: path.partition("-")[2] or "torch")


@pytest.fixture(params=PATHS)
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """One shortlist path, forced (see `force`)."""
    force(request.param, monkeypatch)
    return request.param


def evaluator(protocol: str, ks=(1, 2, 4), path: str = "float32", **kwargs) -> RetrievalEvaluator:
    """RetrievalEvaluator on `path` (see PATHS) with the five ranking metrics."""
    backend = "faiss" if path.endswith("faiss") else "torch"
    device = "cuda" if path.startswith("cuda-") else "cpu"
    name = path.removeprefix("cuda-").replace("-emulated", "").replace("-numpy", "")
    metrics = ("recall", "mAP", "MAP@R", "R-Precision", "mINP")
    return RetrievalEvaluator(
        protocol,
        ks,
        metrics,
        backend=backend,
        device=device,
        arithmetic="auto" if backend == "faiss" else name,
        **kwargs,
    )


def ranking_metrics(ranking: list[tuple[float, int]], ks) -> dict[str, float] | None:
    """Brute-force metrics of one query from its sorted (key, relevant) ranking; None when the
    query has no positive. The definitions every reference in these tests shares."""
    positions = [p + 1 for p, (_, rel) in enumerate(ranking) if rel]
    r = len(positions)
    if r == 0:
        return None
    row = {f"R@{k}": float(positions[0] <= k) for k in ks}
    row["mAP"] = sum((k + 1) / p for k, p in enumerate(positions)) / r
    row["MAP@R"] = sum((k + 1) / p for k, p in enumerate(positions) if p <= r) / r
    row["R-Precision"] = sum(p <= r for p in positions) / r
    row["mINP"] = r / positions[-1]  # INP: R over the hardest (last) positive's position
    return row
