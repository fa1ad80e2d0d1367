"""RetrievalEvaluator: exact Recall@K / CMC, mAP, MAP@R, R-Precision (and NMI) on any backend.

Ranking is by cosine similarity of L2-normalised embeddings (inner product of unit vectors);
`similarity` defines the reference similarity exactly and `ranks` counts each positive's
position without sorting. Backends differ only in who computes the shortlist block, so they all
return the same numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from benchmark.evaluation import arithmetic as _arithmetic
from benchmark.evaluation.arithmetic import ARITHMETICS, Arithmetic
from benchmark.evaluation.inputs import check_cameras, check_embeddings, check_labels
from benchmark.evaluation.metrics import kmeans_nmi, retrieval_metrics
from benchmark.evaluation.ranks import Block, positive_ranks
from benchmark.evaluation.similarity import UnitEmbeddings, prepare, unit_rows

METRICS = ("recall", "mAP", "MAP@R", "R-Precision", "NMI")
BACKENDS = ("auto", "torch", "faiss")
FAISS_GPU_HINT = (
    'install faiss with GPU support (pip install "circlebench[gpu]", i.e. faiss-gpu), '
    'or use backend="torch" (exact on CUDA too) or backend="auto"'
)


class RetrievalEvaluator:
    """Exact retrieval metrics for the `same_set` and `query_gallery` protocols.

    Args:
        protocol: `same_set` (every sample queries all others, itself excluded) or
            `query_gallery` (gallery items with the query's id and camera excluded, junk
            gallery labels -1 ignored, queries without a positive skipped and counted).
        ks: the K of `R@K` (CMC rank-K for re-ID), each ≥ 1.
        metrics: any of "recall", "mAP", "MAP@R", "R-Precision", "NMI".
        backend: "torch" (shortlist products by torch, in `arithmetic`), "faiss" (float32
            shortlist by faiss, CPU or GPU) or "auto" (torch on the chosen device).
        device: "cpu", "cuda" or "auto" (CUDA when available).
        arithmetic: the torch shortlist's arithmetic, "bfloat16", "float16", "float32",
            "int8" (CPU) or "auto": the environment variable CIRCLEBENCH_EVAL_ARITHMETIC, else
            the fastest native one by a short probe (`benchmark.evaluation.arithmetic`).
        chunk_size: queries per similarity block; memory is about chunk_size × gallery × 2 bytes.
    """

    def __init__(
        self,
        protocol: Literal["same_set", "query_gallery"],
        ks: Sequence[int] = (1,),
        metrics: Sequence[str] = ("recall", "mAP", "MAP@R", "R-Precision"),
        backend: Literal["auto", "torch", "faiss"] = "auto",
        device: Literal["auto", "cpu", "cuda"] = "auto",
        chunk_size: int = 1024,
        nmi_seed: int = 0,
        arithmetic: Arithmetic = "auto",
    ) -> None:
        if protocol not in ("same_set", "query_gallery"):
            raise ValueError(f"protocol must be 'same_set' or 'query_gallery', got {protocol!r}")
        ks = tuple(ks)
        if any(not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k <= 0 for k in ks):
            raise ValueError(f"ks must be positive integers, got {ks!r}")
        unknown = sorted(set(metrics) - set(METRICS))
        if unknown:
            raise ValueError(f"metrics: unknown {unknown}; choose from {list(METRICS)}")
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {list(BACKENDS)}, got {backend!r}")
        if device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"device must be 'auto', 'cpu' or 'cuda', got {device!r}")
        if not isinstance(chunk_size, int) or chunk_size <= 0:
            raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
        if arithmetic not in ARITHMETICS:
            raise ValueError(f"arithmetic must be one of {list(ARITHMETICS)}, got {arithmetic!r}")
        if backend == "faiss" and arithmetic not in ("auto", "float32"):
            raise ValueError(
                f"backend='faiss' computes float32 blocks, got arithmetic={arithmetic!r}; "
                "use backend='torch' for other arithmetics"
            )
        self.arithmetic = arithmetic
        self.protocol, self.ks, self.metrics = protocol, ks, tuple(metrics)
        self.backend, self.device, self.chunk_size, self.nmi_seed = (
            backend,
            device,
            chunk_size,
            nmi_seed,
        )
        self.last_backend: str = ""
        self.last_skipped_queries: int = 0

    def _resolve(self) -> tuple[str, torch.device, Block, torch.dtype]:
        """(name, device, block function, shortlist dtype) for this call; the name says the
        arithmetic (`torch-cpu-int8`), which `auto` measures once per process."""
        if self.device == "cuda" and not torch.cuda.is_available():
            raise ValueError("device='cuda' but torch sees no CUDA device; use device='cpu'")
        cuda = self.device == "cuda" or (self.device == "auto" and torch.cuda.is_available())
        device = torch.device("cuda" if cuda else "cpu")
        if self.backend == "faiss":
            import faiss

            if cuda and not hasattr(faiss, "StandardGpuResources"):
                raise ImportError(f"backend='faiss' on CUDA needs faiss-gpu: {FAISS_GPU_HINT}")
            name = f"faiss-{'gpu' if cuda else 'cpu'}-float32"
            return name, device, _arithmetic.faiss_block(device), torch.float32
        arithmetic = _arithmetic.resolve(self.arithmetic, device)
        low_dtype = _arithmetic.LOW_DTYPES[arithmetic]
        name = f"torch-{device.type}-{arithmetic}"
        return name, device, _arithmetic.block(arithmetic, device), low_dtype

    def evaluate(
        self,
        query_emb: Tensor | np.ndarray,
        query_labels: Tensor | np.ndarray,
        gallery_emb: Tensor | np.ndarray | None = None,
        gallery_labels: Tensor | np.ndarray | None = None,
        query_cams: Tensor | np.ndarray | None = None,
        gallery_cams: Tensor | np.ndarray | None = None,
    ) -> dict[str, float]:
        """Metrics as fractions in [0, 1]: keys `R@{k}`, `mAP`, `MAP@R`, `R-Precision`, `NMI`."""
        q = check_embeddings(query_emb, "query_emb")
        q_labels = check_labels(query_labels, "query_labels", q.shape[0], "query_emb")
        same_set = self.protocol == "same_set"
        if same_set:
            if gallery_emb is not None or gallery_labels is not None or gallery_cams is not None:
                raise ValueError(
                    "same_set uses the queries as the gallery: pass gallery_emb, gallery_labels "
                    "and gallery_cams as None, or use protocol='query_gallery'"
                )
            g, g_labels, q_cams, g_cams = q, q_labels, None, None
        else:
            if gallery_emb is None or gallery_labels is None:
                raise ValueError(
                    "query_gallery needs gallery_emb and gallery_labels; "
                    "for a single set use protocol='same_set'"
                )
            g = check_embeddings(gallery_emb, "gallery_emb")
            if g.shape[1] != q.shape[1]:
                raise ValueError(
                    f"gallery_emb has dimension {g.shape[1]} but query_emb has {q.shape[1]}"
                )
            g_labels = check_labels(gallery_labels, "gallery_labels", g.shape[0], "gallery_emb")
            q_cams, g_cams = check_cameras(query_cams, gallery_cams, q.shape[0], g.shape[0])
            kept = g_labels != -1  # junk: ignored by every query
            if not bool(kept.all()):
                g, g_labels = g[kept], g_labels[kept]
                g_cams = g_cams[kept] if g_cams is not None else None
            if g.shape[0] == 0:
                raise ValueError("gallery_labels: every gallery item is junk (-1)")
        name, device, block, low_dtype = self._resolve()
        qe = prepare(q, "query_emb", low_dtype=low_dtype, device=device, chunk=self.chunk_size)
        ge = (
            qe
            if same_set
            else prepare(
                g, "gallery_emb", low_dtype=low_dtype, device=device, chunk=self.chunk_size
            )
        )
        ranks = positive_ranks(
            qe,
            ge,
            q_labels,
            g_labels,
            same_set=same_set,
            q_cams=q_cams,
            g_cams=g_cams,
            block=block,
            chunk_size=self.chunk_size,
        )
        self.last_backend = name
        self.last_skipped_queries = int((ranks.counts == 0).sum())
        out = retrieval_metrics(ranks, self.ks, self.metrics)
        if "NMI" in self.metrics:
            out["NMI"] = kmeans_nmi(_unit_numpy(qe), q_labels.numpy(), seed=self.nmi_seed)
        return out


def _unit_numpy(e: UnitEmbeddings) -> np.ndarray:
    return unit_rows(e.raw, e.norms).numpy()
