"""What a run records: one results row (appended atomically to a CSV) and `similarities.npz`.

The row is the unit the leaderboard aggregates, so it carries everything that makes two runs
comparable (dataset, protocol, loss and its hyper-parameters, backbone, image size, P×K, seed,
...), the metrics in percent, and where it came from (git sha, config hash, run directory).
"""

from __future__ import annotations

import csv
import fcntl
import hashlib
import io
import json
import os
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

# Metric columns in the order the evaluator names them; R@k columns come first, sorted by k.
METRIC_COLUMNS = ("mAP", "MAP@R", "R-Precision")
# Columns after the metrics: how the numbers were obtained, not what was run.
PROVENANCE_COLUMNS = ("eval_backend", "wall_time_s", "git_sha", "config_hash", "run_dir")


@dataclass(frozen=True)
class ResultRow:
    """One finished run; metrics in percent, keyed as the evaluator names them (`R@1`)."""

    cell_id: str
    dataset: str
    protocol: str
    labels: str
    loss: str
    loss_params: str
    backbone: str
    pretrained: str
    embedding_dim: int
    image_size: str
    p: int
    k: int
    epochs: int
    seed: int
    include_val: str
    metrics: dict[str, float] = field(default_factory=dict)
    eval_backend: str = ""
    wall_time_s: float = 0.0
    git_sha: str = ""
    config_hash: str = ""
    run_dir: str = ""

    def as_flat_dict(self) -> dict[str, str | int | float]:
        """Columns in a fixed order: identity, `R@k` by k, the other metrics, provenance."""
        row = asdict(self)
        metrics = row.pop("metrics")
        recall = sorted((k for k in metrics if k.startswith("R@")), key=lambda k: int(k[2:]))
        others = [k for k in METRIC_COLUMNS if k in metrics]
        extra = sorted(set(metrics) - set(recall) - set(others))
        head = {k: v for k, v in row.items() if k not in PROVENANCE_COLUMNS}
        tail = {k: row[k] for k in PROVENANCE_COLUMNS}
        return {**head, **{k: round(metrics[k], 4) for k in recall + others + extra}, **tail}


def append_row(path: str | Path, row: ResultRow) -> None:
    """Append `row` to the CSV at `path`, safe when several processes finish at once.

    An exclusive `fcntl` lock on a sidecar `.lock` file serialises writers; the new content (old
    rows + this one, with the header widened if this row brings new metric columns) goes to a
    temporary file in the same folder and replaces the CSV with `os.replace`, so a reader never
    sees a half-written file and a crash never truncates it.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    new = row.as_flat_dict()
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        rows: list[dict[str, str]] = []
        header: list[str] = []
        if path.exists():
            with open(path, newline="") as f:
                reader = csv.DictReader(f)
                header = list(reader.fieldnames or [])
                rows = list(reader)
        header += [k for k in new if k not in header]
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=header, restval="", lineterminator="\n")
        writer.writeheader()
        writer.writerows([*rows, new])
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "w", newline="") as f:
            f.write(buffer.getvalue())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)


def git_sha(cwd: str | Path | None = None) -> str:
    """HEAD of the checkout holding this package (`+dirty` if modified); "" outside git."""
    cwd = Path(cwd) if cwd is not None else Path(__file__).resolve().parent
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""
    return sha + ("+dirty" if dirty else "")


def config_hash(config: dict) -> str:
    """First 12 hex digits of the SHA-256 of `config` as canonical JSON (sorted keys)."""
    text = json.dumps(config, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def hardest_pair_similarities(
    query: Tensor,
    query_labels: Tensor,
    gallery: Tensor | None = None,
    gallery_labels: Tensor | None = None,
    query_cams: Tensor | None = None,
    gallery_cams: Tensor | None = None,
    *,
    max_queries: int = 2000,
    chunk: int = 256,
) -> tuple[np.ndarray, np.ndarray]:
    """Per query: lowest positive and highest negative cosine similarity (the paper's Fig. 4/5).

    Same-set protocol (`gallery` None): the query set is the gallery and each query's own entry
    is excluded. Query-gallery protocol: gallery entries with the query's id AND camera are
    excluded, as are junk entries (label -1), following the re-ID evaluation. At most
    `max_queries` queries, evenly spaced; queries without a positive or a negative are dropped.

    Returns:
        `(sp, sn)`, float32 arrays of equal length.
    """
    same_set = gallery is None
    gallery = query if same_set else gallery
    gallery_labels = query_labels if same_set else gallery_labels
    q = F.normalize(query.float(), dim=1)  # [Q, D]
    g = F.normalize(gallery.float(), dim=1)  # [G, D]
    picked = torch.linspace(0, len(q) - 1, min(max_queries, len(q))).round().long().unique()
    sp_all, sn_all = [], []
    for start in range(0, len(picked), chunk):
        rows = picked[start : start + chunk]
        sim = q[rows] @ g.T  # [c, G]
        same = query_labels[rows, None] == gallery_labels[None, :]  # [c, G]
        valid = (gallery_labels != -1)[None, :].expand_as(same).clone()
        if same_set:
            valid[torch.arange(len(rows)), rows] = False
        elif query_cams is not None and gallery_cams is not None:
            valid &= ~(same & (query_cams[rows, None] == gallery_cams[None, :]))
        pos, neg = same & valid, ~same & valid
        sp = torch.where(pos, sim, torch.inf).amin(dim=1)
        sn = torch.where(neg, sim, -torch.inf).amax(dim=1)
        keep = pos.any(1) & neg.any(1)
        sp_all.append(sp[keep])
        sn_all.append(sn[keep])
    return torch.cat(sp_all).numpy(), torch.cat(sn_all).numpy()


def save_similarities(path: str | Path, sp: np.ndarray, sn: np.ndarray) -> None:
    """Write `sp` and `sn` to `path` (.npz) through a temporary file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.npz")
    np.savez(tmp, sp=sp.astype(np.float32), sn=sn.astype(np.float32))
    os.replace(tmp, path)
