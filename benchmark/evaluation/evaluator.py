"""RetrievalEvaluator: exact Recall@K / CMC, mAP, MAP@R, R-Precision (and NMI) on any backend.

Ranking is by the reference cosine similarity (`similarity`), and `ranks` counts each
positive's position without sorting; backends differ only in who computes the shortlist
blocks, so they all return the same numbers.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from benchmark.evaluation import arithmetic as _arithmetic
from benchmark.evaluation import choice as _choice
from benchmark.evaluation.arithmetic import ARITHMETICS, Arithmetic
from benchmark.evaluation.faiss_blocks import FAISS_GPU_HINT, faiss_has_gpu, import_faiss
from benchmark.evaluation.hardest_pairs import HardestPairs, hardest_pair_similarities
from benchmark.evaluation.metrics import (
    DEFAULT_METRICS,
    METRIC_NAMES,
    kmeans_nmi,
    metric,
    retrieval_metrics,
)
from benchmark.evaluation.ranks import positive_ranks
from benchmark.evaluation.rerank import KReciprocal, RerankMethod, rerank_method, reranked_ranks
from benchmark.evaluation.sets import PROTOCOLS, RetrievalProtocol, evaluation_sets
from benchmark.evaluation.similarity import prepare, unit_rows
from core.devices import chosen_device
from core.threads import like_torch

BACKENDS = ("auto", "torch", "faiss")


@dataclass(frozen=True)
class EvaluationReport:
    """What one `evaluate` call measured and how: the metrics (fractions), the backend that
    computed them, how many queries were counted and skipped (no positive in the gallery), the
    re-ranking that ordered the gallery ("" for none: by cosine similarity), and how many query
    chunks were recounted in float32 because the backend's band overflowed (`ranks`)."""

    metrics: dict[str, float]
    backend: str
    queries: int
    skipped_queries: int
    rerank: str = ""
    fallbacks: int = 0


class RetrievalEvaluator:
    """Exact retrieval metrics for the `same_set` and `query_gallery` protocols.

    Args:
        protocol: `same_set` or `query_gallery` (who is excluded: `sets`); queries without a
            positive are skipped and counted.
        ks: the K of `R@K` (CMC rank-K for re-ID), each ≥ 1.
        metrics: names from the registry `evaluation.metrics.METRICS`.
        backend: "torch" (shortlist products by torch, in `arithmetic`), "faiss" (float32
            shortlist by faiss, CPU or GPU) or "auto" (torch on the chosen device).
        device: "cpu", "cuda" or "auto" (CUDA when available).
        arithmetic: the torch shortlist's arithmetic, "bfloat16", "float16", "float32", or
            "auto": the environment variable CIRCLEBENCH_EVAL_ARITHMETIC, else `choice`'s rule.
        chunk_size: queries per similarity block; memory is about chunk_size × gallery × 2 bytes.
        nmi_seed: the seed of NMI's k-means.
        rerank: None (rank by cosine similarity), "k-reciprocal" (Zhong et al. 2017, k1=20,
            k2=6, λ=0.3) or a `rerank.KReciprocal`; `query_gallery` only, always on the CPU
            with float32 products (`backend` and `device` then choose nothing but NMI's copy).
    """

    def __init__(
        self,
        protocol: RetrievalProtocol,
        ks: Sequence[int] = (1,),
        metrics: Sequence[str] = DEFAULT_METRICS,
        backend: Literal["auto", "torch", "faiss"] = "auto",
        device: Literal["auto", "cpu", "cuda"] = "auto",
        chunk_size: int = 1024,
        nmi_seed: int = 0,
        arithmetic: Arithmetic = "auto",
        rerank: RerankMethod | KReciprocal | None = None,
    ) -> None:
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {list(PROTOCOLS)}, got {protocol!r}")
        if np.ndim(ks) != 1 or np.ndim(metrics) != 1:
            raise ValueError(
                f"ks and metrics are sequences, e.g. ks=(1, 4) and metrics=('mAP',); got ks={ks!r} "
                f"and metrics={metrics!r}"
            )
        ks = tuple(ks)
        if any(not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k <= 0 for k in ks):
            raise ValueError(f"ks must be positive integers, got {ks!r}")
        unknown = sorted(set(metrics) - set(METRIC_NAMES))
        if unknown:
            raise ValueError(f"metrics: unknown {unknown}; choose from {list(METRIC_NAMES)}")
        elsewhere = [m for m in metrics if protocol not in metric(m).protocols]
        if elsewhere:
            raise ValueError(f"metrics {elsewhere} are not defined for the {protocol} protocol")
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {list(BACKENDS)}, got {backend!r}")
        if device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"device must be 'auto', 'cpu' or 'cuda', got {device!r}")
        if (
            not isinstance(chunk_size, (int, np.integer))
            or isinstance(chunk_size, bool)
            or chunk_size <= 0
        ):
            raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
        if arithmetic not in ARITHMETICS:
            raise ValueError(_arithmetic.refusal(arithmetic, "arithmetic"))
        if backend == "faiss" and arithmetic not in ("auto", "float32"):
            raise ValueError(
                f"backend='faiss' computes float32 blocks, got arithmetic={arithmetic!r}; "
                "use backend='torch' for other arithmetics"
            )
        self.protocol, self.ks, self.metrics = protocol, ks, tuple(metrics)
        self.backend, self.device, self.chunk_size = backend, device, int(chunk_size)
        self.nmi_seed, self.arithmetic = nmi_seed, arithmetic
        if rerank is not None and protocol != "query_gallery":
            raise ValueError(
                f"rerank={rerank!r} re-ranks a gallery for each query: it needs "
                f"protocol='query_gallery', got {protocol!r}; pass rerank=None"
            )
        self.rerank = rerank_method(rerank) if rerank is not None else None
        self.last_report: EvaluationReport | None = None

    @property
    def last_backend(self) -> str:
        """The backend of the last `evaluate` call ("" before the first)."""
        return self.last_report.backend if self.last_report is not None else ""

    def _device(self) -> torch.device:
        """This call's device; the CPU for a faiss built without GPU support, with a warning."""
        try:
            cuda = chosen_device(self.device).type == "cuda"
        except ValueError as error:
            raise ValueError(f"device='cuda' but {error}; use device='cpu'") from None
        if cuda and self.backend == "faiss" and not faiss_has_gpu(import_faiss()):
            warnings.warn(
                "backend='faiss' on CUDA: this faiss has no GPU support, so its CPU "
                f"product runs instead; to run it on the GPU, {FAISS_GPU_HINT}",
                stacklevel=3,
            )
            cuda = False
        return torch.device("cuda" if cuda else "cpu")

    @like_torch()  # the compiled scans and re-checks: as many threads as torch's
    def evaluate(
        self,
        query_emb: Tensor | np.ndarray,
        query_labels: Tensor | np.ndarray,
        gallery_emb: Tensor | np.ndarray | None = None,
        gallery_labels: Tensor | np.ndarray | None = None,
        query_cams: Tensor | np.ndarray | None = None,
        gallery_cams: Tensor | np.ndarray | None = None,
    ) -> dict[str, float]:
        """Metrics as fractions in [0, 1], keyed as the registry names them (`R@1`, `mAP`).

        `last_report` keeps them with the backend and the counted and skipped queries.

        Raises:
            ValueError: on malformed inputs, and when no query has a positive in the gallery
                (every metric would be 0: usually labels that do not match between the sets).
        """
        sets = evaluation_sets(
            self.protocol, query_emb, query_labels, gallery_emb, gallery_labels,
            query_cams, gallery_cams,
        )  # fmt: skip
        device, faiss = self._device(), self.backend == "faiss"
        arithmetic = "float32" if faiss else _arithmetic.requested(self.arithmetic)
        if self.rerank is not None:  # the re-ranked distance is float32 (`reranked_ranks`)
            arithmetic = "float32"
        elif arithmetic == "auto":
            arithmetic = _choice.choose(sets, device)
        low = _arithmetic.LOW_DTYPES[arithmetic]
        embed = functools.partial(prepare, low_dtype=low, device=device, chunk=self.chunk_size)
        qe = embed(sets.query, "query_emb")
        if self.rerank is not None:  # the gallery ordered by the re-ranked distance d*
            name, ranks = "torch-cpu-float32", reranked_ranks(sets, self.rerank, self.chunk_size)
        else:
            ge = qe if sets.same_set else embed(sets.gallery, "gallery_emb")
            block = _arithmetic.block(device, faiss=faiss)
            name = f"{'faiss' if faiss else 'torch'}-{device.type}-{arithmetic}"
            ranks = positive_ranks(qe, ge, sets, block=block, chunk_size=self.chunk_size)
        skipped = int((ranks.counts == 0).sum())
        if skipped == len(ranks.counts):
            raise ValueError(
                f"no query has a positive in the gallery ({skipped} queries, protocol "
                f"{self.protocol}): every metric would be 0. Check that query and gallery "
                "labels use the same ids and that each class has two or more images"
            )
        # R@K with K at or past the number of ranked items is 1.0 for every query: say so.
        ranked = sets.gallery.shape[0] - (1 if sets.same_set else 0)
        too_large = [k for k in self.ks if k >= ranked] if "recall" in self.metrics else []
        if too_large:
            warnings.warn(
                f"R@K for K = {too_large} ranks the whole gallery ({ranked} items per query), "
                "so it is 1.0 for every query with a positive; choose K below the gallery size",
                stacklevel=3,
            )
        out = retrieval_metrics(ranks, self.ks, self.metrics)
        if "NMI" in self.metrics:
            unit = unit_rows(qe.raw, qe.norms).numpy()
            out["NMI"] = kmeans_nmi(unit, sets.query_labels.numpy(), seed=self.nmi_seed)
        rerank = str(self.rerank) if self.rerank is not None else ""
        self.last_report = EvaluationReport(
            dict(out), name, len(ranks.counts) - skipped, skipped, rerank, ranks.fallbacks
        )
        return out

    def hardest_pairs(
        self,
        query_emb: Tensor | np.ndarray,
        query_labels: Tensor | np.ndarray,
        gallery_emb: Tensor | np.ndarray | None = None,
        gallery_labels: Tensor | np.ndarray | None = None,
        query_cams: Tensor | np.ndarray | None = None,
        gallery_cams: Tensor | np.ndarray | None = None,
        *,
        max_queries: int = 2000,
    ) -> HardestPairs:
        """Lowest positive and highest negative similarity per query, on `evaluate`'s sets."""
        sets = evaluation_sets(
            self.protocol, query_emb, query_labels, gallery_emb, gallery_labels,
            query_cams, gallery_cams,
        )  # fmt: skip
        return hardest_pair_similarities(sets, max_queries=max_queries)
