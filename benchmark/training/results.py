"""What a finished run records: its results row (`rows.ResultRow`), built from the objects that
ran, never re-derived from config strings, and `similarities.npz`."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, cast

import numpy as np
import pytorch_lightning as pl

from benchmark.training.checkpoints import CheckpointInfo
from benchmark.training.embedders import PooledBackbone
from benchmark.training.rows import FLOOR_LOSS, ResultRow
from core.atomic import replaced
from core.devices import gpu_name, precision_label
from datamodules.feature_cache import content_key
from datamodules.features import CachedFeatureDataModule
from datamodules.msmt17 import MSMT17DataModule
from datamodules.transforms import as_hw

if TYPE_CHECKING:
    from benchmark.training.module import MetricLearningModule
    from datamodules.base import RetrievalDataModule


def result_row(
    model: MetricLearningModule,
    datamodule: RetrievalDataModule,
    *,
    cell_id: str,
    loss_params: str,
    trained: CheckpointInfo | None,
    seed: int,
    provenance: dict[str, str | float],
    tuning: str = "",
) -> ResultRow:
    """The row of a finished test, read from the objects that ran it: `loss_params` are the
    loss's configured arguments (JSON), `trained` the evaluated checkpoint (None: the untrained
    model, recorded as the floor), `provenance` the wall time, git sha, config hash, run folder
    and cell recipe, `tuning` the budget of a tuned setting ("" as configured)."""
    if model.test_result is None:
        raise ValueError("result_row: the model has not been tested (no test_result)")
    report = model.test_result.report
    # The backbone that made the embeddings and the image DataModule (MSMT17's include_val is
    # its own): the frozen track's cache wraps both.
    backbone, images = cast(PooledBackbone, model.embedder), datamodule
    if isinstance(datamodule, CachedFeatureDataModule):
        backbone, images = cast(PooledBackbone, datamodule.extractor), datamodule.images
    height, width = as_hw(datamodule.image_size)
    return ResultRow(
        cell_id=cell_id,
        dataset=datamodule.dataset_name,
        track=datamodule.track,
        protocol=model.protocol,
        labels=model.loss.paradigm if trained else "",
        loss=model.loss.name if trained else FLOOR_LOSS,
        loss_params=loss_params if trained else "",
        backbone=backbone.backbone_name,
        pretrained=backbone.pretrained_source,
        embedding_dim=model.embedder.embedding_dim,
        image_size=f"{height}x{width}",
        p=trained.p if trained and trained.p is not None else datamodule.p,
        k=trained.k if trained and trained.k is not None else datamodule.k,
        epochs=trained.epoch if trained else 0,
        seed=seed,
        include_val=str(images.include_val) if isinstance(images, MSMT17DataModule) else "",
        rerank=report.rerank,
        tuning=tuning if trained else "",
        metrics={name: 100.0 * value for name, value in report.metrics.items()},
        eval_backend=report.backend,
        skipped_queries=report.skipped_queries,
        checkpoint=trained.path if trained else "",
        global_step=trained.global_step if trained else 0,
        **provenance,  # type: ignore[arg-type]
        **where_it_ran(model.trainer),  # type: ignore[arg-type]
    )


def where_it_ran(trainer: pl.Trainer) -> dict[str, str]:
    """The `device`, `gpu` and `precision` columns of a run on `trainer`."""
    device = trainer.strategy.root_device
    count = f" ×{trainer.world_size}" if trainer.world_size > 1 else ""
    return {
        "device": f"{device.type}{count}",
        "gpu": gpu_name(device),
        "precision": precision_label(str(trainer.precision), device.type),
    }


# What a run writes or a reader edits without changing what a run computes: a checkout whose
# only changes lie here is not dirty (a run rewrites the committed results files itself).
NOT_CODE = (":(exclude)results", ":(exclude)docs", ":(exclude,glob)**/*.md")


def git_sha(cwd: str | Path | None = None) -> str:
    """HEAD of the checkout holding this package, `+dirty` when a tracked file that can change
    a run (anything but `NOT_CODE`: results, the manual, Markdown) differs from it; "" outside
    git."""
    cwd = Path(cwd) if cwd is not None else Path(__file__).resolve().parent
    try:
        top = _git(cwd, "rev-parse", "--show-toplevel")
        sha = _git(cwd, "rev-parse", "HEAD")
        dirty = _git(Path(top), "status", "--porcelain", "--untracked-files=no", "--", *NOT_CODE)
    except (OSError, subprocess.CalledProcessError):
        return ""
    return sha + ("+dirty" if dirty else "")


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True
    ).stdout.strip()


def config_hash(config: dict) -> str:
    """First 12 hex digits of the SHA-256 of `config` as canonical JSON (`content_key`)."""
    return content_key(config)[:12]


def save_similarities(path: str | Path, sp: np.ndarray, sn: np.ndarray) -> None:
    """Write `sp` and `sn` (float32) to `path` (.npz) atomically."""
    with replaced(path) as tmp, open(tmp, "wb") as f:
        np.savez(f, sp=sp.astype(np.float32), sn=sn.astype(np.float32))
