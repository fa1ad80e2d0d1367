"""How the tests shrink a documented command to tiny data (the manual's "Docs that run").

The repository's configs train real backbones on full synthetic sets; the tests run the same
commands with these arguments added, so each finishes in seconds on a CPU:

- `circlebench fit|validate|test --config experiments/...`: after the last `--config` from
  `experiments/`, `TRAINER` and the arguments for its embedder and data (`config_shrink`). The
  block's own later arguments and configs still win, so a documented override is exercised.
  Configs a page writes itself are small already and are not shrunk.
- `circlebench leaderboard --suite S`: the suite file is rewritten to its first seed, each
  group's first config and its floor, the groups without `requires:` (absent data would
  only skip them), and each group's overrides gain `config_shrink` of its configs; the command
  gains `--isolation in-process --jobs 1 --no-wandb`. `--aggregate-only` runs as documented.
- `python -m benchmark.bench WHAT`: `BENCH[WHAT]` appended (argparse: the last value wins).
- Everything else (`circlebench data list|info`, `dashboard`, `--help`) runs as documented.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

EMBEDDER = "benchmark.training.embedders.Embedder"
FEATURE_HEAD = "benchmark.training.embedders.FeatureHead"
SYNTHETIC = "datamodules.SyntheticDataModule"
CACHED = "datamodules.CachedFeatureDataModule"

TRAINER = [
    "--trainer.max_epochs=1",
    "--trainer.limit_train_batches=1",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
    "--wandb=false",
]
# timm's 256-feature test network at 32 px, no weights to read.
TINY_BACKBONE = ["backbone=test_efficientnet", "pretrained=false"]
BENCH = {
    "losses": ["--batch-sizes", "200", "--dim", "16", "--rounds", "1"],  # 4 timed calls a case
    "data": [
        "--classes",
        "17",  # 16 training classes: one P-K batch of 16 x 5
        "--per-class",
        "5",
        "--batches",
        "1",
        "--repeat",
        "1",
        "--workers",
        "0",
    ],
    "eval": ["--subset", "0.01", "--repeat", "1", "--baseline-queries", "16"],
    "train": ["--steps", "1", "--warmup", "0", "--cells", "0"],
}


def config_shrink(config: dict[str, Any]) -> list[str]:
    """Arguments that make the experiment `config` tiny: its embedder and its data."""
    model, data = config.get("model") or {}, config.get("data") or {}
    embedder = (model.get("embedder") or {}).get("class_path")
    args = []
    if embedder == EMBEDDER:
        args += [f"--model.embedder.init_args.{a}" for a in [*TINY_BACKBONE, "head=linear"]]
    elif embedder == FEATURE_HEAD:  # the class-level losses keep their embedding_dim
        args += [
            "--model.embedder.init_args.in_features=256",
            "--model.embedder.init_args.kind=linear",
            "--model.embedder.init_args.rank=null",  # a linear head has none
        ]
    kind, init = data.get("class_path"), data.get("init_args") or {}
    if kind == SYNTHETIC:
        args += _synthetic("--data.init_args", init)
    elif kind == CACHED:
        images = init.get("images") or {}
        args += _synthetic("--data.init_args.images.init_args", images.get("init_args") or {})
        args += [f"--data.init_args.extractor.init_args.{a}" for a in TINY_BACKBONE]
    elif kind is not None:
        args += ["--data.init_args.image_size=32"]
    return args


def _synthetic(prefix: str, init: dict[str, Any]) -> list[str]:
    # Re-ID mode needs an image per camera and more for the gallery; training classes stay,
    # since the class-level losses are configured with their count.
    per_class = 8 if init.get("mode") == "reid" else 4
    return [
        f"{prefix}.image_size=32",
        f"{prefix}.images_per_class={per_class}",
        f"{prefix}.num_test_classes=8",
    ]


def training_args(argv: list[str], root: Path) -> list[str]:
    """`circlebench fit|validate|test` arguments with the shrink after the last repository
    config (see the module docstring); unchanged when no config is from `experiments/`."""
    last = None
    for i, word in enumerate(argv[:-1]):
        if word in ("--config", "-c") and argv[i + 1].startswith("experiments/"):
            last = i + 1
    if last is None:
        return argv
    config = yaml.safe_load((root / argv[last]).read_text()) or {}
    return [*argv[: last + 1], *TRAINER, *config_shrink(config), *argv[last + 1 :]]


def shrink_suite(name: str, root: Path) -> None:
    """Rewrite `root/experiments/suites/<name>.yaml` to a few tiny cells (module docstring)."""
    path = root / "experiments" / "suites" / f"{name}.yaml"
    spec = yaml.safe_load(path.read_text())
    spec["seeds"] = spec.get("seeds", [0])[:1]
    spec.pop("check_seeds", None)
    groups = {}
    for group, gspec in spec["groups"].items():
        if gspec.get("requires"):
            continue
        configs = gspec["configs"]
        configs = (
            sorted(str(p.relative_to(root)) for p in root.glob(configs))
            if isinstance(configs, str)
            else list(configs)
        )
        gspec["configs"] = configs[:1]
        gspec.pop("seeds", None)
        stems = {Path(c).stem for c in gspec["configs"]}
        overrides = gspec.get("config_overrides") or {}
        gspec["config_overrides"] = {k: v for k, v in overrides.items() if k in stems}
        first = yaml.safe_load((root / configs[0]).read_text()) or {}
        gspec["overrides"] = [*gspec.get("overrides", []), *TRAINER[:-1], *config_shrink(first)]
        groups[group] = gspec
    spec["groups"] = groups
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
