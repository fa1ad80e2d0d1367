"""`circlebench fit|validate|test`: the LightningCLI over `MetricLearningModule`.

`fit` trains a config over the defaults of `experiments/base.yaml`, evaluates the test set once
at the end and appends one results row (`benchmark.training.results`), as `test --ckpt_path`
does. `python -m benchmark.training.cli fit ...` is the same without the dispatcher.
"""

from __future__ import annotations

import copy
import itertools
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any, NoReturn

from pytorch_lightning.cli import LightningArgumentParser, LightningCLI
from pytorch_lightning.loggers import Logger
from pytorch_lightning.utilities import rank_zero_only

from benchmark.errors import class_hint, debugging, read_yaml, shortened
from benchmark.manual import manual_line
from benchmark.training.checkpoints import (
    DATA_LOCATION,
    LAST,
    CheckpointInfo,
    best_checkpoint,
    check_matches_config,
    checkpoint_callbacks,
    newest_run,
)
from benchmark.training.loggers import (
    ConfigToLoggersCallback,
    RunLabels,
    build_loggers,
    finish_wandb_runs,
    run_version,
)
from benchmark.training.module import MetricLearningModule
from benchmark.training.results import config_hash, git_sha, result_row, save_similarities
from benchmark.training.rows import append_row, keep_earlier_metrics
from datamodules.base import RetrievalDataModule
from datamodules.features import CachedFeatureDataModule
from losses import ExternalLoss
from losses.external import PML_INSTALL, pml_installed

BASE_CONFIG = Path(__file__).resolve().parents[2] / "experiments" / "base.yaml"
# Our top-level options, name: (type, default, help); none changes what a run computes.
RUN_OPTIONS: dict[str, tuple[type, Any, str]] = {
    "results_csv": (str, "results/runs.csv", "CSV the results row goes to"),
    "cell_id": (str, "", "leaderboard cell of this run"),
    "cell_recipe": (str, "", "that cell's recipe (set by leaderboard)"),
    "suite": (str, "", "leaderboard suite of this run"),
    "tuning": (str, "", "the budget of the tuned setting this run trains (set by leaderboard)"),
    "wandb": (bool, True, "log to W&B (offline unless configured)"),
    "test_after_fit": (bool, True, "fit: evaluate the test set at the end"),
}
# Options that change where and how a run is recorded, not what it computes: not hashed.
UNHASHED = {
    "": (*RUN_OPTIONS, "ckpt_path", "config", "verbose"),
    "trainer": ("logger", "default_root_dir", "enable_progress_bar", "enable_model_summary"),
    "data.init_args": DATA_LOCATION,
    # The image DataModule inside `CachedFeatureDataModule`:
    "data.init_args.images.init_args": DATA_LOCATION,
}


class CircleBenchParser(LightningArgumentParser):
    """LightningCLI's parser, whose errors about a loss class say how to make it work."""

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        hints = []
        if "pytorch_metric_learning" in message and not pml_installed():
            hints.append(f"pytorch-metric-learning is not installed: {PML_INSTALL}")
        if "does not correspond to a subclass of MetricLoss" in message:
            hints.append(
                "a loss module of your own or from pytorch-metric-learning enters through the "
                "adapter: --model.loss=losses.ExternalLoss --model.loss.init_args.loss=CLASS_PATH "
                "(docs/extending/external-losses.md)"
            )
        hints = [hint for hint in hints if hint not in message]  # a nested parser's already
        if not self.exit_on_error or debugging():
            super().error("\n".join([message, *hints]), ex)
        # The message and where the options are, without jsonargparse's 60 lines of usage.
        parser = getattr(ex, "subcommand_parser", None) or self
        prog = parser.prog.replace(" [options]", "")
        classes = class_hint(message)  # an unknown class: the key, the cause, the choices
        if classes:
            lines = message.splitlines()
            message = "\n".join([lines[0], *[x.strip() for x in lines if "no attribute" in x]])
        hint = "\n".join([*hints, *([classes] if classes else []), f"({prog} --help)"])
        sys.stderr.write(shortened(f"{prog}: error: {message}", hint) + "\n")
        self.exit(2)


class CircleBenchCLI(LightningCLI):
    """LightningCLI over `MetricLearningModule` and any `RetrievalDataModule`, recording results."""

    def __init__(
        self, args: list[str] | None = None, run: bool = True, *, parse_only: bool = False
    ) -> None:
        """Parse `args` and run the sub-command; `parse_only` stops before building anything."""
        self.parse_only = parse_only
        # allow_abbrev: `--trainer.max_epoch=3` is an error, not `max_epochs` taken silently.
        defaults = {"default_config_files": [str(BASE_CONFIG)], "allow_abbrev": False}
        failed = True
        try:
            super().__init__(
                MetricLearningModule,
                RetrievalDataModule,
                subclass_mode_data=True,
                save_config_callback=ConfigToLoggersCallback,
                save_config_kwargs={"overwrite": True},
                parser_kwargs={
                    "allow_abbrev": False,  # the sub-commands' parsers take it from here
                    **{n: {**defaults, "epilog": manual_line(n)} for n in self.subcommands()},
                }
                if run
                else defaults,
                auto_configure_optimizers=False,  # the module builds its own parameter groups
                parser_class=CircleBenchParser,
                args=args,
                run=run,
            )
            failed = False
        finally:
            trainer = getattr(self, "trainer", None)
            if trainer is not None:
                finish_wandb_runs(trainer.loggers, failed=failed)

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        """Lightning's sub-commands but `predict`."""
        commands = LightningCLI.subcommands()
        del commands["predict"]
        return commands

    def add_arguments_to_parser(self, parser) -> None:
        for name, (kind, default, help) in RUN_OPTIONS.items():
            parser.add_argument(f"--{name}", type=kind, default=default, help=help)

    def parse_arguments(self, parser: Any, args: Any) -> None:
        problem = yaml_problem(sys.argv[1:] if args is None else args)
        if problem:  # jsonargparse would name the file `<unicode string>`
            parser.error(problem)
        # Given words, LightningCLI warns if sys.argv holds others too: a leaderboard's cells,
        # tune's folds and the bench commands parse their own words in processes whose sys.argv
        # is another command line. The words given are the whole of it.
        outer = sys.argv
        if args is not None:
            sys.argv = sys.argv[:1]
        try:
            super().parse_arguments(parser, args)
        finally:
            sys.argv = outer
        # Before anything reads the config (the checkpoint check, the saved config, the hash).
        subcommand = self.config.get("subcommand")
        config = self.config[subcommand] if subcommand else self.config
        _data_seed_follows_run(config.get("data"), config.get("seed_everything"))

    def instantiate_classes(self) -> None:
        if not self.parse_only:
            super().instantiate_classes()
            if isinstance(self.datamodule, CachedFeatureDataModule):
                # It saves neither wrapped object; their config, in its saved hyper-parameters,
                # is what the checkpoint check compares and where a row reads P and K.
                self._dump_config()
                given = self.config_dump["data"]["init_args"]
                self.datamodule.hparams.update(images=given["images"], extractor=given["extractor"])

    def _parse_ckpt_path(self) -> None:
        """Check a checkpoint against the config instead of letting its hyper-parameters
        silently replace the config's (Lightning's default)."""
        subcommand = self.config.get("subcommand")
        ckpt_path = self.config[subcommand].get("ckpt_path") if subcommand else None
        # A local path that is not a file: Lightning would evaluate the untrained model for
        # `last`, and the row step then fail (URLs are Lightning's to read).
        if (
            ckpt_path
            and "://" not in ckpt_path
            and subcommand != "fit"
            and not Path(ckpt_path).is_file()
        ):
            self.parser.error(
                f"--ckpt_path {ckpt_path}: {subcommand} evaluates a checkpoint file, e.g. "
                f"<run folder>/checkpoints/{LAST} or best.ckpt ('last' and a run folder are "
                "for resuming `fit`)"
            )
        if ckpt_path and Path(ckpt_path).is_file():
            self._dump_config()
            try:
                check_matches_config(ckpt_path, self.config_dump, training=subcommand == "fit")
            except ValueError as error:
                self.parser.error(str(error))

    def instantiate_trainer(self, **kwargs: Any) -> Any:
        config = self._get(self.config_init, "trainer", default={})
        dataset = getattr(self.datamodule, "dataset_name", type(self.datamodule).__name__)
        root = Path(config.get("default_root_dir") or "runs")
        loss_name = self.model.loss.name
        resumed = self._resumed_run(root / dataset / loss_name)
        if resumed is not None and getattr(rank_zero_only, "rank", 0) == 0:
            keep_earlier_metrics(resumed)
        loggers = build_loggers(
            root,
            self._labels(dataset, loss_name),
            wandb=self._get(self.config, "wandb"),
            version=resumed.name if resumed else run_version(),
        )
        self.run_dir = Path(str(loggers[0].log_dir))  # fast_dev_run swaps loggers for dummies
        extra = config.get("logger")  # loggers named in a config come after ours
        loggers += [
            x for x in (extra if isinstance(extra, list) else [extra]) if isinstance(x, Logger)
        ]
        callbacks = list(config.get("callbacks") or [])
        if config.get("enable_checkpointing") is not False:
            callbacks += checkpoint_callbacks(self.datamodule.val_classes > 0)
        return super().instantiate_trainer(logger=loggers, callbacks=callbacks, **kwargs)

    def _labels(self, dataset: str, loss_class: str) -> RunLabels:
        """What the run's W&B record is grouped by; the experiment is the last config file's
        stem, plus `.tuned` for a tuned setting (so W&B groups tuned and default runs apart)."""
        configs = self._get(self.config, "config") or []
        tuned = ".tuned" if self._get(self.config, "tuning") else ""
        cell_id = self._get(self.config, "cell_id") or ""
        experiment = f"{Path(str(configs[-1])).stem}{tuned}" if configs else loss_class
        return RunLabels(
            dataset=dataset,
            # a suite cell: its experiment (`floor` for the untrained floor, not its config's stem)
            loss=cell_id.rsplit("/", 2)[-2] if cell_id.count("/") >= 2 else experiment,
            loss_class=loss_class,
            paradigm=str(self.model.loss.paradigm),
            track=self.datamodule.track,
            seed=self._get(self.config, "seed_everything"),
            suite=self._get(self.config, "suite") or "",
            cell_id=cell_id,
            git_sha=git_sha(),
            job_type="train" if self.subcommand == "fit" else "evaluate",
        )

    def _resumed_run(self, runs: Path) -> Path | None:
        """The run folder `fit --ckpt_path last|RUN_DIR` continues (its `last.ckpt` becomes the
        checkpoint Lightning resumes from); None when this fit starts a new run."""
        ckpt_path = self._get(self.config, "ckpt_path") if self.subcommand == "fit" else None
        if ckpt_path is None or Path(ckpt_path).is_file():
            return None
        run = Path(ckpt_path)
        if ckpt_path == "last":
            self._dump_config()
            key = _resume_key(self.config_dump)
            newest = newest_run(runs, lambda config: _resume_key(config) == key)
            if newest is None:
                others = len(list(runs.glob(f"*/checkpoints/{LAST}")))
                raise FileNotFoundError(
                    f"--ckpt_path last: no earlier run of this config with checkpoints/{LAST} "
                    f"under {runs} ({others} run(s) of other configs); run `fit` without "
                    "--ckpt_path first, or pass --ckpt_path <run folder> or <file.ckpt>"
                )
            run = newest
        elif not (run / "checkpoints" / LAST).is_file():
            raise FileNotFoundError(
                f"--ckpt_path {ckpt_path}: neither a checkpoint file, a run folder with "
                f"checkpoints/{LAST}, nor 'last' (the newest run of this config)"
            )
        self.config_init[self.subcommand]["ckpt_path"] = str(run / "checkpoints" / LAST)
        return run

    def before_fit(self) -> None:
        self._start = time.perf_counter()

    before_test = before_fit

    def after_fit(self) -> None:
        if not self._get(self.config, "test_after_fit") or self.trainer.interrupted:
            return
        best = best_checkpoint(self.trainer)
        self.trainer.test(self.model, datamodule=self.datamodule, ckpt_path=best)
        if best is not None:
            self._record(CheckpointInfo.read(best))
        else:  # the final weights (last.ckpt is absent with fast_dev_run)
            final = self.run_dir / "checkpoints" / LAST
            path = str(final) if final.is_file() else ""
            self._record(CheckpointInfo(path, self.trainer.current_epoch, self.trainer.global_step))

    def after_test(self) -> None:
        ckpt_path = self._get(self.config, "ckpt_path")
        self._record(CheckpointInfo.read(ckpt_path) if ckpt_path else None)

    def _record(self, trained: CheckpointInfo | None) -> None:
        """Write `similarities.npz` and append the results row of the evaluated weights (rank
        0); `trained` None: the untrained model, recorded as the floor, with a warning."""
        if not self.trainer.is_global_zero:
            return
        result = self.model.test_result
        if result is None:
            raise RuntimeError("the test loop ended without evaluating; no results row written")
        save_similarities(self.run_dir / "similarities.npz", result.hardest.sp, result.hardest.sn)
        if trained is None:
            warnings.warn(
                "no checkpoint was evaluated: the results row records the untrained model as a "
                "floor (loss 'none (pretrained)', 0 epochs), not as a trained result; pass "
                "--ckpt_path <file.ckpt> to test trained weights",
                stacklevel=2,
            )
        self._dump_config()
        config = self.config_dump
        loss_args = config["model"]["loss"].get("init_args", {})
        if isinstance(self.model.loss, ExternalLoss):  # the row names the wrapped loss
            loss_args = loss_args["loss"].get("init_args", {})
        row = result_row(
            self.model,
            self.datamodule,
            cell_id=config["cell_id"],
            loss_params=json.dumps(loss_args, sort_keys=True),
            trained=trained,
            seed=config["seed_everything"],
            tuning=config.get("tuning") or "",
            provenance={
                "wall_time_s": round(time.perf_counter() - self._start, 1),
                "git_sha": git_sha(),
                "config_hash": config_hash(hashed_config(config)),
                "run_dir": str(self.run_dir),
                "cell_recipe": config.get("cell_recipe") or "",
            },
        )
        append_row(config["results_csv"], row)


def _data_seed_follows_run(data: Any, seed: Any) -> None:
    """Give every DataModule in `data` (a wrapped one too) whose `seed` is unset the run's
    `seed_everything`: the seeds of a leaderboard cell then vary its batches, not only its
    initialisation (a head initialised to the identity has no random initialisation at all)."""
    init_args = data.get("init_args") if data is not None and hasattr(data, "get") else None
    if init_args is None or not isinstance(seed, int):
        return
    if "seed" in init_args and init_args.get("seed") is None:
        init_args["seed"] = seed
    for value in vars(init_args).values() if hasattr(init_args, "__dict__") else ():
        _data_seed_follows_run(value, seed)


def _resume_key(config: dict) -> str:
    """What must match for `--ckpt_path last` to continue a run: the hashed config, except the
    epoch count (a run may be extended) and the trainer's callbacks (monitors may change)."""
    config = hashed_config(config)
    for key in ("max_epochs", "callbacks"):
        config.get("trainer", {}).pop(key, None)
    return config_hash(config)


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
    CircleBenchCLI(args=argv)


def yaml_problem(words: list[str]) -> str:
    """Why the first file given to `--config` in `words` (`--config F` or `--config=F`) is not
    valid YAML (`read_yaml`); "" when all are (a missing file is the parser's to report)."""
    files = [w.split("=", 1)[1] for w in words if w.startswith("--config=")]
    files += [b for a, b in itertools.pairwise(words) if a == "--config"]
    for file in map(Path, files):
        if file.is_file():
            try:
                read_yaml(file)
            except ValueError as error:
                return str(error)
    return ""


if __name__ == "__main__":
    main()
