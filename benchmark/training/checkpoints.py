"""Checkpoints that survive: every epoch, on SIGINT/SIGTERM, resumable, and checked on load.

Each run folder keeps `checkpoints/last.ckpt` (after every training epoch: a run killed in
epoch e resumes from the end of epoch e-1 and ends with the uninterrupted run's weights),
`checkpoints/best.ckpt` (the best `val/R@1`, with a validation split) and, after Ctrl-C or
SIGTERM, `checkpoints/interrupted.ckpt` (the state at the signal, mid-epoch).
"""

from __future__ import annotations

import copy
import os
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
import yaml
from pytorch_lightning.callbacks import Callback, ModelCheckpoint
from pytorch_lightning.utilities.exceptions import SIGTERMException

LAST, INTERRUPTED = "last.ckpt", "interrupted.ckpt"
# Data arguments that change where or how fast data is read, not what is trained or tested,
# and those that only shape training batches (free to differ when evaluating a checkpoint).
DATA_LOCATION = ("root", "num_workers", "eval_batch_size", "cache_dir")
DATA_BATCHES = ("p", "k", "batches_per_epoch")
FROZEN_PARTS = ("images", "extractor")  # the frozen track's objects, saved as their config


class LastCheckpoint(ModelCheckpoint):
    """`last.ckpt` after every training epoch (after its validation), written atomically, and
    `interrupted.ckpt` when Ctrl-C or SIGTERM stops training; with or without a monitored
    metric (`save_last=True` refreshes it only with a top-k save). It saves no top-k file, and
    being a `ModelCheckpoint` keeps Lightning from adding its default one."""

    def __init__(self) -> None:
        super().__init__(save_top_k=0)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._save(trainer, LAST)

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        if isinstance(exception, (KeyboardInterrupt, SIGTERMException)):
            self._save(trainer, INTERRUPTED)

    def _save(self, trainer: pl.Trainer, name: str) -> None:
        if trainer.sanity_checking or self.dirpath is None:
            return
        path = Path(self.dirpath) / name
        tmp = path.with_name(f".{name}.tmp")  # one name on every rank
        # Every DDP rank takes part; rank 0 writes the file. The whole state (optimiser too), said
        # outright: Lightning logs a line each epoch when weights_only is left unset.
        trainer.save_checkpoint(tmp, weights_only=False)
        if trainer.is_global_zero:  # a kill during the write leaves the previous file
            os.replace(tmp, path)
        trainer.strategy.barrier()


def checkpoint_callbacks(validated: bool) -> list[Callback]:
    """`last.ckpt` after every training epoch; with a validation split also `best.ckpt`."""
    callbacks: list[Callback] = []
    if validated:  # select the model on validation, never on test
        callbacks.append(ModelCheckpoint(monitor="val/R@1", mode="max", filename="best"))
    # Last: both save at the end of a training epoch, so `last.ckpt` holds the best-model state
    # this epoch's validation updated (else a resumed run forgets that epoch's score).
    callbacks.append(LastCheckpoint())
    return callbacks


def best_checkpoint(trainer: pl.Trainer) -> str | None:
    """The path of `best.ckpt` if this run validated and saved one, else None."""
    for callback in trainer.checkpoint_callbacks:
        if isinstance(callback, ModelCheckpoint) and callback.monitor and callback.best_model_path:
            return callback.best_model_path
    return None


@dataclass(frozen=True)
class CheckpointInfo:
    """What a results row records of the weights it evaluated."""

    path: str
    epoch: int  # training epochs completed when it was saved
    global_step: int
    # The P-K batches it was trained with (None: the running DataModule's); `test` may use others
    p: int | None = None
    k: int | None = None

    @staticmethod
    def read(path: str | Path) -> CheckpointInfo:
        state = load_checkpoint(path)
        # Lightning's "epoch" is the index of the epoch being trained when it saved, the same
        # before and after that epoch's end; the loop's progress counts finished epochs.
        progress = state["loops"]["fit_loop"]["epoch_progress"]["total"]
        data = state.get("datamodule_hyper_parameters", {})
        if "p" not in data:  # the frozen track: the wrapped image DataModule's (`cli`)
            data = data.get("images", {}).get("init_args", {})
        return CheckpointInfo(
            str(path), int(progress["processed"]), int(state["global_step"]), data.get("p"),
            data.get("k"),
        )  # fmt: skip


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """A Lightning checkpoint's contents (memory-mapped). Raises ValueError naming the file
    when it is not a PyTorch checkpoint (corrupt, truncated, another format) or not one that
    Lightning wrote (no `state_dict`, `hyper_parameters` or loop progress)."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=False, mmap=True)
    except (RuntimeError, OSError, EOFError, ValueError, pickle.UnpicklingError) as error:
        first = str(error).splitlines()[0][:200] if str(error) else type(error).__name__
        raise ValueError(
            f"{path} is not a PyTorch checkpoint that can be read ({first}); pass a .ckpt that "
            "`circlebench fit` wrote (<run folder>/checkpoints/last.ckpt)"
        ) from None
    missing = [k for k in ("state_dict", "hyper_parameters", "loops") if k not in state]
    if not isinstance(state, dict) or missing:
        raise ValueError(
            f"{path} is not a checkpoint of `circlebench fit` (it lacks {missing or 'a dict'}); "
            "pass a .ckpt that a fit wrote (<run folder>/checkpoints/last.ckpt)"
        )
    return state


def newest_run(runs: Path, ours: Callable[[dict], bool], depth: int = 1) -> Path | None:
    """The newest run folder `depth` levels under `runs` that has a `checkpoints/last.ckpt` and
    whose saved `config.yaml` is `ours`; None when no such run finished an epoch."""
    lasts = sorted(
        runs.glob("*/" * depth + f"checkpoints/{LAST}"),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for last in lasts:
        saved = last.parents[1] / "config.yaml"
        if saved.is_file() and ours(yaml.safe_load(saved.read_text()) or {}):
            return last.parents[1]
    return None


def check_matches_config(ckpt_path: str | Path, config: dict[str, Any], *, training: bool) -> None:
    """Raise if the checkpoint was trained with another loss, embedder or data than `config`;
    evaluation settings, the data's location and loaders, and P, K and the epoch length unless
    `training`, may differ (the config's values are used)."""
    state = load_checkpoint(ckpt_path)
    model = state.get("hyper_parameters", {})
    data = dict(state.get("datamodule_hyper_parameters", {}))
    problems = []
    for part in ("loss", "embedder"):
        saved, wanted = model.get(part), config["model"].get(part)
        if part == "embedder":  # which initial weights does not matter (the checkpoint replaces
            # them), whether there were any does: they set the input normalisation and Lite0's
            # BatchNorm epsilon, which the checkpoint does not hold
            saved, wanted = _weights_given(saved), _weights_given(wanted)
        if saved is not None and saved != wanted:
            problems.append(f"model.{part}: checkpoint {_short(saved)}, config {_short(wanted)}")
    if data:
        ignored = DATA_LOCATION if training else (*DATA_LOCATION, *DATA_BATCHES)
        saved_class, wanted_class = data.pop("_class_path", None), config["data"].get("class_path")
        wanted = config["data"].get("init_args", {})
        differing = _differing(data, wanted, ignored)
        for part in FROZEN_PARTS:  # the frozen track's image DataModule and extractor, whose
            # weights' path may move, not whether it has any
            saved_part, wanted_part = (_weights_given(side.get(part)) for side in (data, wanted))
            if isinstance(saved_part, dict) and isinstance(wanted_part, dict):
                classes = (saved_part.get("class_path"), wanted_part.get("class_path"))
                if classes[0] != classes[1]:
                    differing[part] = classes
                args = _differing(
                    saved_part.get("init_args", {}), wanted_part.get("init_args", {}), ignored
                )
                differing |= {f"{part}.{k}": v for k, v in args.items()}
        if saved_class != wanted_class or differing:
            problems.append(
                f"data: checkpoint {saved_class} vs config {wanted_class}; "
                f"differing (checkpoint, config): {differing}"
            )
    if problems:
        raise ValueError(
            f"{ckpt_path} was trained with another setting than this config:\n  "
            + "\n  ".join(problems)
            + "\nPass the config the checkpoint was trained with (its run folder's config.yaml);"
            " only evaluation settings (--model.recall_ks, --model.protocol, "
            "--model.eval_backend, --model.eval_metrics, --model.rerank, the data root, "
            "feature cache and loaders) may be changed."
        )


def _differing(saved: dict, wanted: dict, ignored: tuple[str, ...]) -> dict[str, tuple]:
    """{argument: (saved, wanted)} of the plain arguments that differ, but the `ignored` ones."""
    return {
        k: (v, wanted[k]) for k, v in saved.items()
        if not k.startswith("_") and k not in (*ignored, *FROZEN_PARTS) and k in wanted
        and wanted[k] != v
    }  # fmt: skip


def _weights_given(spec: Any) -> Any:
    """`spec` with `pretrained` reduced to whether pretrained weights were given."""
    if not isinstance(spec, dict):
        return spec
    spec = copy.deepcopy(spec)
    args = spec.get("init_args", {})
    if "pretrained" in args:
        args["pretrained"] = args["pretrained"] not in (False, None)
    return spec


def _short(spec: Any) -> str:
    if isinstance(spec, dict) and "class_path" in spec:
        name = str(spec["class_path"]).rsplit(".", 1)[-1]
        return f"{name}({spec.get('init_args', {})})"
    return repr(spec)
