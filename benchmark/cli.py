"""The `circlebench` command: a dispatcher to the package that owns each sub-command
(`COMMANDS`). Each package is imported only when its command runs, so `circlebench data list`
does not pay for Lightning.
"""

from __future__ import annotations

import sys
from contextlib import nullcontext

from benchmark.errors import short_errors, take_debug_flag
from benchmark.launch.frozen import import_frozen
from benchmark.manual import PAGES, page_url

# command -> (module whose `main(argv)` runs it, one line for `circlebench --help`)
COMMANDS = {
    "fit": ("benchmark.training.cli", "train a config, then test it (one results row)"),
    "validate": ("benchmark.training.cli", "evaluate the validation split of a config"),
    "test": ("benchmark.training.cli", "evaluate the test split (--ckpt_path: trained weights)"),
    "tune": ("benchmark.tuning.command", "tune a loss on class-disjoint folds (equal budget)"),
    "leaderboard": ("benchmark.leaderboard.command", "run a suite and write its leaderboard"),
    "dashboard": ("benchmark.leaderboard.dashboard", "write (--publish: save) a suite's W&B view"),
    "data": ("benchmark.data.command", "list, describe, verify or download the datasets"),
}
TRAINING = ("fit", "validate", "test")  # LightningCLI sub-commands: they keep their own name
# Commands that fork their runs from a server importing the training stack, and the options
# with which they run none here. Started before the command's own imports, the server imports
# beside them.
_NO_RUNS_HERE = ("--launcher", "--plan", "-h", "--help")
FORKING = {
    "leaderboard": ("--status", "--aggregate-only", "--isolation", *_NO_RUNS_HERE),
    "tune": _NO_RUNS_HERE,
}


def usage() -> str:
    """The command list that `circlebench --help` and an unknown command print, with the
    manual's page of each command (a file under docs/, and its `mkdocs serve` URL)."""
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {text}" for name, (_, text) in COMMANDS.items()]
    pages = {name: PAGES[name] for name in (*COMMANDS, "circlebench")}
    files = max(len(page) for page in pages.values()) + len("docs/")
    links = [
        f"  {'(all)' if name == 'circlebench' else name:<{width}}  "
        f"{'docs/' + page:<{files}}  {page_url(page)}"
        for name, page in pages.items()
    ]
    return (
        "usage: circlebench COMMAND [ARGS] (COMMAND --help for its options)\n\ncommands:\n"
        + "\n".join(lines)
        + '\n\nmanual (pip install -e ".[docs]" && mkdocs serve, then open the URL):\n'
        + "\n".join(links)
    )


def forks_runs_here(command: str, args: list[str]) -> bool:
    """Whether `circlebench <command> <args>` forks runs on this machine (from the fork server)."""
    return command in FORKING and not any(a.split("=")[0] in FORKING[command] for a in args)


def main(argv: list[str] | None = None) -> None:
    """Run the sub-command named by the first argument. From the shell (`argv` None) a
    mistake gets a short answer (`benchmark.errors`; `--debug` anywhere shows the traceback)."""
    args = take_debug_flag(list(sys.argv[1:] if argv is None else argv))
    command = args[0] if args else ""
    # A caller in Python (a test, a notebook) gets the exception itself.
    with short_errors(f"circlebench {command}".strip()) if argv is None else nullcontext():
        if command in ("-h", "--help"):
            print(usage())
            return
        if command not in COMMANDS:
            what = f"unknown command {command!r}" if command else "no command given"
            choices = ", ".join(COMMANDS)
            raise SystemExit(f"circlebench: {what}; choose one of: {choices}\n\n{usage()}")
        if forks_runs_here(command, args[1:]):
            from benchmark.launch.fork_server import start_fork_server

            start_fork_server()
        module = import_frozen(COMMANDS[command][0])  # the training stack, without GC passes
        module.main(args if command in TRAINING else args[1:])  # LightningCLI parses the command


if __name__ == "__main__":
    main()
