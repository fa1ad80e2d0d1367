"""Short answers to a user's mistakes: what is wrong and the fix, in at most `MAX_LINES` lines.

Every `circlebench` command runs under `short_errors`: an exception becomes its message, with
the classes of a module when a class path is unknown, and the process exits non-zero without a
traceback; `--debug` (anywhere on the command line) or `CIRCLEBENCH_DEBUG=1` shows it instead.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import yaml

T = TypeVar("T")

MAX_LINES = 5
DEBUG_FLAG = "--debug"
DEBUG_ENV = "CIRCLEBENCH_DEBUG"
DEBUG_HINT = f"(the traceback: rerun with {DEBUG_FLAG} or {DEBUG_ENV}=1)"
# What a user's mistake raises; anything else is reported as a possible bug.
USER_ERRORS = (
    ValueError,
    FileNotFoundError,
    NotADirectoryError,
    PermissionError,
    KeyError,
    ImportError,
)


def debugging() -> bool:
    """Whether the user asked for tracebacks (`take_debug_flag` turns the flag into this)."""
    return os.environ.get(DEBUG_ENV, "") not in ("", "0")


def take_debug_flag(argv: list[str]) -> list[str]:
    """`argv` less `--debug`, which no sub-command parses; given, it sets CIRCLEBENCH_DEBUG=1
    for this process and the runs it starts."""
    if DEBUG_FLAG in argv:
        os.environ[DEBUG_ENV] = "1"
    return [a for a in argv if a != DEBUG_FLAG]


def shortened(message: str, hint: str = "") -> str:
    """`message` and `hint` in at most MAX_LINES lines: the hint whole, the message's first
    line (what failed) and its last ones (a nested error's innermost cause: the value)."""
    lines = [line.rstrip() for line in message.strip().splitlines() if line.strip()]
    room = max(MAX_LINES - len(hint.splitlines()), 2)
    if len(lines) > room:
        lines = [lines[0] + " [...]", *lines[len(lines) - room + 1 :]]
    return "\n".join([*lines, *([hint] if hint else [])])


def class_hint(message: str) -> str:
    """For "module 'losses' has no attribute 'NoSuchLoss'", the classes that module offers."""
    found = re.search(r"module '([\w.]+)' has no attribute '(\w+)'", message)
    if found is None:
        return ""
    try:
        module = importlib.import_module(found.group(1))
    except ImportError:
        return ""
    names = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
    classes = sorted(n for n in names if inspect.isclass(getattr(module, n, None)))
    return f"{found.group(1)} has: {', '.join(classes)}" if classes else ""


@contextlib.contextmanager
def short_errors(prog: str) -> Iterator[None]:
    """Run the body; an exception becomes a short message on stderr and exit status 1."""
    try:
        yield
    except Exception as error:
        if debugging():
            raise
        # The error's own message, led by its type unless it is a plain user error.
        text = str(error.args[0]) if isinstance(error, KeyError) and error.args else str(error)
        user = isinstance(error, USER_ERRORS)
        message = text if user and text else f"{type(error).__name__}: {text}"
        hint = class_hint(message)
        if hint and hint not in message:
            message = f"{message}\n{hint}"
        if not user:
            message += "\nthis may be a bug in circlebench: report it with the traceback"
        sys.stderr.write(f"{shortened(f'{prog}: error: {message}', DEBUG_HINT)}\n")
        raise SystemExit(1) from None


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser whose errors are the message and where the options are, not the
    usage block first; abbreviated options are refused (`--trial` is not `--trials`)."""

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        if debugging():
            handled = sys.exc_info()[1]  # a command's `except E: parser.error(...)`
            if handled is not None:
                raise handled
            super().error(message)
        self.exit(2, shortened(f"{self.prog}: error: {message}", f"({self.prog} --help)") + "\n")

    def loaded(self, load: Callable[[], T]) -> T:
        """`load()`; a KeyError, ValueError or FileNotFoundError (a suite, group or config the
        command line names that is absent or wrong) is this parser's error."""
        try:
            return load()
        except (KeyError, ValueError, FileNotFoundError) as error:
            self.error(str(error.args[0]))


def read_yaml(path: Path) -> Any:
    """The YAML file at `path`, parsed. Raises ValueError naming the file, line and column
    when it is not valid YAML (PyYAML names none of them for a string it is handed)."""
    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        what = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise ValueError(f"{path}: not valid YAML{where}: {what}") from None
