"""The embeddings `bench eval` times the evaluator on: real datasets' sizes, and distributions
that stress the shortlist arithmetic.

Every case is deterministic (seeded) and scales with `--subset`. The clustered cases mimic
trained embeddings at the sizes of SOP, MSMT17 and Market-1501; the others are the data on
which a low-precision shortlist leaves many pairs to the exact re-check:

- `isotropic`: SOP's size, 10,083 classes of 6, each item its class centre plus Gaussian noise
  of norm ≈ 2.2 in the full 512-D space (no low-dimensional structure), normalised;
- `collapsed`: 30,000 × 256, 3,000 classes of 10 around a large shared direction, so every
  cosine similarity lies above ≈ 0.9 (a barely trained or collapsed model, like the pooled
  ReLU features of our floors);
- `duplicates`: SOP's size, where a fifth of the items are exact copies of another item of
  their class and 1 % copies of an item of another class (ties at every precision);
- `low-rank`: SOP's size, clustered in a 6-D subspace of 512-D (a head that collapsed onto a
  few directions): classes crowd each other in the few dimensions left.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import torch
from torch import Tensor

from benchmark.evaluation import RetrievalEvaluator

Kind = Literal["clustered", "isotropic", "collapsed", "duplicates", "low-rank"]


@dataclass(frozen=True)
class Case:
    """One benchmark data set: the dataset it mimics, its protocol and its distribution."""

    name: str
    protocol: str
    n_query: int
    n_gallery: int  # 0 for same_set
    dim: int
    n_classes: int
    n_cams: int
    ks: tuple[int, ...]
    metrics: tuple[str, ...]
    noise: float  # norm of the Gaussian noise around the unit class centre
    kind: Kind = "clustered"
    latent: int = 64  # dimensions the classes live in (clustered, duplicates, low-rank)


_SOP_METRICS = ("recall", "mAP", "MAP@R", "R-Precision")
_SOP_KS = (1, 10, 100, 1000)
CASES = {
    "sop": Case("sop", "same_set", 60_502, 0, 512, 11_316, 0, _SOP_KS, _SOP_METRICS, 1.1),
    "msmt17": Case("msmt17", "query_gallery", 11_659, 82_161, 2048, 3_060, 15, (1, 5, 10),
                   ("recall", "mAP"), 1.1),
    "market": Case("market", "query_gallery", 3_368, 15_913, 2048, 751, 6, (1, 5, 10),
                   ("recall", "mAP"), 1.1),
    "isotropic": Case("isotropic", "same_set", 60_498, 0, 512, 10_083, 0, _SOP_KS, _SOP_METRICS,
                      2.2, "isotropic"),
    "collapsed": Case("collapsed", "same_set", 30_000, 0, 256, 3_000, 0, (1, 2, 4, 8),
                      _SOP_METRICS, 1.5, "collapsed"),
    "duplicates": Case("duplicates", "same_set", 60_502, 0, 512, 11_316, 0, _SOP_KS,
                       _SOP_METRICS, 1.1, "duplicates"),
    "low-rank": Case("low-rank", "same_set", 60_502, 0, 512, 11_316, 0, _SOP_KS, _SOP_METRICS,
                     0.6, "low-rank", latent=6),
}  # fmt: skip
REAL_SIZES = ("market", "msmt17", "sop")  # the cases `bench eval` runs by default
# The shared direction of `collapsed`: its weight against the unit class part.
COLLAPSED_SHARED = 3.0


def clustered(labels: Tensor, centres: Tensor, basis: Tensor, noise: float, seed: int) -> Tensor:
    """float32 [n, D]: class centre plus noise in a latent space, mapped to D dimensions.

    Trained embeddings occupy a low-dimensional part of their space, so their similarities
    spread (std ≈ 0.12 with 64 latent dimensions) far more than isotropic D-dimensional noise
    would (≈ 1/√D).
    """
    gen = torch.Generator().manual_seed(seed)
    out = torch.empty(labels.numel(), basis.shape[0])
    latent = centres.shape[1]
    for start in range(0, labels.numel(), 8192):
        lab = labels[start : start + 8192]
        z = centres[lab] + noise * torch.randn(lab.numel(), latent, generator=gen) / latent**0.5
        out[start : start + 8192] = z @ basis.T  # [n, D]
    return out


def make_data(case: Case, seed: int = 0) -> dict[str, Tensor]:
    """Deterministic embeddings, labels and cameras for `case`."""
    gen = torch.Generator().manual_seed(seed)
    latent = case.dim if case.kind in ("isotropic", "collapsed") else case.latent
    centres = torch.nn.functional.normalize(torch.randn(case.n_classes, latent, generator=gen))
    if latent == case.dim:
        basis = torch.eye(case.dim)
    else:
        basis = torch.linalg.qr(torch.randn(case.dim, latent, generator=gen)).Q  # [D, latent]
    q_labels = _labels(case, case.n_query, gen)
    query = clustered(q_labels, centres, basis, case.noise, seed + 1)
    if case.kind == "collapsed":
        shared = torch.nn.functional.normalize(torch.randn(case.dim, generator=gen), dim=0)
        query = torch.nn.functional.normalize(query) + COLLAPSED_SHARED * shared
    elif case.kind == "duplicates":
        query = _with_copies(query, q_labels, gen)
    data = {"query_labels": q_labels, "query_emb": query}
    if case.protocol == "query_gallery":
        g_labels = torch.randint(0, case.n_classes, (case.n_gallery,), generator=gen)
        data["gallery_labels"] = g_labels
        data["gallery_emb"] = clustered(g_labels, centres, basis, case.noise, seed + 2)
        data["query_cams"] = torch.randint(0, case.n_cams, (case.n_query,), generator=gen)
        data["gallery_cams"] = torch.randint(0, case.n_cams, (case.n_gallery,), generator=gen)
    return data


def evaluator(case: Case, path: str, device: str) -> RetrievalEvaluator:
    """Our evaluator on `path`: faiss (its arithmetic `auto`), or torch in that arithmetic."""
    backend, arithmetic = ("faiss", "auto") if path == "faiss" else ("torch", path)
    return RetrievalEvaluator(case.protocol, case.ks, case.metrics, backend=backend,  # type: ignore[arg-type]
                              device=device, arithmetic=arithmetic)  # type: ignore[arg-type]  # fmt: skip


def _labels(case: Case, n: int, gen: torch.Generator) -> Tensor:
    """Random labels, or for the cases named by their class size, every class equally often."""
    if case.kind in ("isotropic", "collapsed"):
        per_class = -(-n // case.n_classes)
        return torch.arange(case.n_classes).repeat_interleave(per_class)[:n]
    return torch.randint(0, case.n_classes, (n,), generator=gen)


def _with_copies(emb: Tensor, labels: Tensor, gen: torch.Generator) -> Tensor:
    """`emb` where about a fifth of the rows copy another row of their class (a third of the
    label-order neighbours are drawn, some of whose sources are drawn too) and 1 % a row of
    another class (float32 copies: every arithmetic sees exact ties)."""
    out = emb.clone()
    n = labels.numel()
    order = torch.argsort(labels, stable=True)
    sorted_labels = labels[order]
    # Within the class: each chosen item copies the item before it in label order.
    same = torch.nonzero(
        (sorted_labels[1:] == sorted_labels[:-1]) & (torch.rand(n - 1, generator=gen) < 0.34)
    ).flatten()
    out[order[same + 1]] = emb[order[same]]
    # Across classes: a random item of (almost surely) another class.
    chosen = torch.randperm(n, generator=gen)[: n // 100]
    sources = torch.randint(0, n, (chosen.numel(),), generator=gen)
    keep = labels[sources] != labels[chosen]
    out[chosen[keep]] = out[sources[keep]]
    return out


def scaled_case(case: Case, fraction: float) -> Case:
    """`case` with its item and class counts scaled by `fraction` (quick iterations)."""
    if fraction == 1.0:
        return case
    return replace(case, n_query=max(2, int(case.n_query * fraction)),
                   n_gallery=int(case.n_gallery * fraction),
                   n_classes=max(1, int(case.n_classes * fraction)))  # fmt: skip
