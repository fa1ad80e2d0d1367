"""The `circlebench` command: `fit|validate|test` (LightningCLI), `leaderboard`, `data`."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    """Dispatch to the sub-command named by the first argument."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv else ""
    if command == "data":
        from benchmark.data_cli import main as data_main

        data_main(argv[1:])
        return
    raise SystemExit(f"circlebench: unknown command {command!r}; choose one of: data")


if __name__ == "__main__":
    main()
