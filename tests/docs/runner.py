"""Run one page of the manual: its files, Python, YAML and commands, in a folder of its own.

A command in a `parse-only` block is parsed, not run, except `leaderboard` and `tune`, which run
with `--plan`: the suite, its cells, budgets, data checks and configs are resolved for real and
nothing trains. Each page runs in a fresh temporary folder that holds a copy of `experiments/`
and `results/` (so what a command writes stays there) and is on `sys.path` (so a config's
`class_path: my_module.X` imports a module the page wrote, as `PYTHONPATH=.` does). The page's
blocks run in order and share that folder and one Python namespace. Commands run in this
process: `circlebench` and `python -m benchmark.cli` through `benchmark.cli.main`,
`python -m benchmark.bench` through its `main`; any other command must be marked.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.docs import shell, shrink
from tests.docs.blocks import Block

REPO = Path(__file__).resolve().parents[2]
BENCH_PROG = "python -m benchmark.bench"
RUNS_NOTHING = {"--aggregate-only", "--fold-only", "--help", "-h"}  # leaderboard: no cells
PLANNED = ("leaderboard", "tune")  # parse-only blocks of these run with --plan


class ParsedOnly(Exception):
    """Raised by argparse in parse-only mode once a command line has parsed."""

    def __init__(self, namespace: argparse.Namespace) -> None:
        super().__init__("parsed")
        self.namespace = namespace


def prepare(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The page's working folder: copies of experiments/ and results/, offline settings."""
    shutil.copytree(REPO / "experiments", folder / "experiments")
    # What git tracks of results/ (.gitignore): a developer's regenerated board leaves GBs of
    # runs, logs and studies there, and forty pages each copying them filled the disk.
    untracked = shutil.ignore_patterns(
        "runs", "logs", "wandb", "tuning", "quick", "*.lock", "*.tmp"
    )
    shutil.copytree(REPO / "results", folder / "results", ignore=untracked)
    monkeypatch.chdir(folder)
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setattr(sys, "argv", ["circlebench"])  # LightningCLI compares args with it
    for name, value in {
        "WANDB_MODE": "offline",
        "HF_HUB_OFFLINE": "1",
        "CIRCLEBENCH_CACHE": str(folder / "cache"),
        "CIRCLEBENCH_DEBUG": "0",  # restored after the page: a `--debug` command sets it
    }.items():
        monkeypatch.setenv(name, value)


def run_block(block: Block, namespace: dict[str, Any], folder: Path) -> None:
    """Write, parse or run `block` as its language and mark say."""
    if block.title:
        path = folder / block.title
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(block.text)
        importlib.invalidate_caches()
    if block.mode == "skip":
        return
    if block.lang == "yaml":
        yaml.safe_load(block.text)
    elif block.lang == "python" and not block.title:
        code = compile(block.text, block.where, "exec")
        exec(code, namespace)  # the page's own example, run as a reader would run it
    elif block.lang == "bash":
        for command in shell.commands(block.text):
            run_command(command, block, folder)


def run_command(command: shell.Command, block: Block, folder: Path) -> None:
    """Run (or, in parse-only mode, parse) one documented command; fail on a non-zero exit."""
    argv = command.argv
    with _environment(command.env, folder):
        if argv[0] == "circlebench" or argv[:3] == ["python", "-m", "benchmark.cli"]:
            args = argv[1:] if argv[0] == "circlebench" else argv[3:]
            _circlebench(args, block, folder)
        elif argv[:3] == ["python", "-m", "benchmark.bench"]:
            _bench(argv[3:], block)
        else:
            pytest.fail(
                f"{block.where}: `{' '.join(argv)}` is not a command the tests can run; mark "
                "the block `<!-- docs-test: skip REASON -->` (see docs/development/docs.md)"
            )


def _circlebench(args: list[str], block: Block, folder: Path) -> None:
    from benchmark.cli import main

    command = args[0] if args else ""
    if command in ("fit", "validate", "test"):
        args = shrink.training_args(args, folder)
        if block.mode == "parse-only":
            args = [*args, "--print_config"]
    elif command == "leaderboard" and block.mode == "run" and not RUNS_NOTHING & set(args):
        shrink.shrink_suite(args[args.index("--suite") + 1], folder)
        args = [*args, "--isolation", "in-process", "--jobs", "1", "--no-wandb"]
    if block.mode == "parse-only" and command in PLANNED and not RUNS_NOTHING & set(args):
        # Resolved for real: every cell or study, its budget, data check and config, and the
        # plan of what it would run; nothing trains.
        at = args.index("--") if "--" in args else len(args)  # before tune's fit overrides
        _exits_zero(main, [*args[:at], "--plan", *args[at:]], block)
        return
    if block.mode == "parse-only" and command not in ("fit", "validate", "test"):
        with _parse_only() as parsed:
            _exits_zero(main, args, block)
        if command == "leaderboard":
            from benchmark.leaderboard.suite import load_suite

            assert load_suite(parsed[0].suite, folder).cells(), f"{block.where}: no cells"
        return
    _exits_zero(main, args, block)


def _bench(args: list[str], block: Block) -> None:
    from benchmark.bench.__main__ import main

    if block.mode == "parse-only":
        with _parse_only():
            _exits_zero(main, args, block)
        return
    if args and args[0] in shrink.BENCH and "--help" not in args:
        args = [*args, *shrink.BENCH[args[0]]]
    _exits_zero(main, args, block)


def _exits_zero(main: Any, args: list[str], block: Block) -> None:
    try:
        main(args)
    except SystemExit as stop:
        if stop.code not in (0, None):
            pytest.fail(f"{block.where}: `{' '.join(args)}` exited with {stop.code!r}")
    except ParsedOnly:
        pass


@contextlib.contextmanager
def _parse_only() -> Iterator[list[argparse.Namespace]]:
    """argparse parses every command line of the block, then stops it (the dispatcher of
    `python -m benchmark.bench` is let through to its benchmark's own parser)."""
    parsed: list[argparse.Namespace] = []
    original = argparse.ArgumentParser.parse_args

    def parse_args(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
        namespace = original(self, *args, **kwargs)
        if self.prog == BENCH_PROG:
            return namespace
        parsed.append(namespace)
        raise ParsedOnly(namespace)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(argparse.ArgumentParser, "parse_args", parse_args)
        yield parsed
    if not parsed:
        pytest.fail("parse-only: the command parsed nothing")


@contextlib.contextmanager
def _environment(env: dict[str, str], folder: Path) -> Iterator[None]:
    """A command's `NAME=value` assignments; PYTHONPATH entries also go on sys.path."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
            if name == "PYTHONPATH":
                for entry in value.split(os.pathsep):
                    patch.syspath_prepend(str((folder / entry).resolve()))
        yield


def forget_modules(folder: Path) -> None:
    """Unload the modules a page wrote, so the next page's files of the same name are read."""
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None) or ""
        if path.startswith(str(folder)):
            del sys.modules[name]
