"""Every shortlist path of the evaluator, forced even where this machine lacks it natively."""

from __future__ import annotations

import pytest
import torch

from benchmark.evaluation import RetrievalEvaluator, arithmetic

# faiss float32, then torch in each arithmetic (float32 products by torch and by numpy's BLAS);
# "int8-emulated" is the exact slow form that CPUs without fbgemm run, "cuda-*" the GPU paths
# where a GPU exists.
PATHS = ["faiss", "float32", "float32-numpy", "bfloat16", "float16", "int8", "int8-emulated"] + (
    ["cuda-float32", "cuda-bfloat16", "cuda-float16"] if torch.cuda.is_available() else []
)


def force(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make `path` run as named where a choice would otherwise be measured or detected."""
    if path == "int8-emulated":
        monkeypatch.setattr(arithmetic, "_has_fbgemm", lambda: False)
    elif path == "int8" and not arithmetic._has_fbgemm():
        pytest.skip("this torch has no fbgemm; int8-emulated checks the same arithmetic")
    elif path in ("float32", "float32-numpy"):
        monkeypatch.setattr(arithmetic, "sgemm", lambda: path.partition("-")[2] or "torch")


@pytest.fixture(params=PATHS)
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """One shortlist path, forced (see `force`)."""
    force(request.param, monkeypatch)
    return request.param


def evaluator(protocol: str, ks=(1, 2, 4), path: str = "float32", **kwargs) -> RetrievalEvaluator:
    """RetrievalEvaluator on `path` (see PATHS) with the five ranking metrics."""
    backend = "faiss" if path == "faiss" else "torch"
    device = "cuda" if path.startswith("cuda-") else "cpu"
    name = path.removeprefix("cuda-").replace("-emulated", "").replace("-numpy", "")
    metrics = ("recall", "mAP", "MAP@R", "R-Precision", "mINP")
    return RetrievalEvaluator(
        protocol,
        ks,
        metrics,
        backend=backend,
        device=device,
        arithmetic="auto" if path == "faiss" else name,
        **kwargs,
    )
