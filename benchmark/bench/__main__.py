"""Benchmarks (not tests): `python -m benchmark.bench {losses,data,eval,train,gpu,backbones}`.

Each prints its figures next to a plain baseline measured in the same run, because the
machines are noisy and only the ratio is comparable across runs.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from benchmark.manual import manual_line

BENCHMARKS = ("losses", "data", "eval", "train", "gpu", "backbones")  # benchmark.bench.<name>


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmark.bench", description=__doc__, epilog=manual_line("bench")
    )
    parser.add_argument("what", choices=sorted(BENCHMARKS), help="which benchmark to run")
    argv = sys.argv[1:] if argv is None else argv
    # Only the first word is ours: `losses --help` is the help of the losses benchmark.
    args = parser.parse_args(argv[:1])
    module = importlib.import_module(f"benchmark.bench.{args.what}")
    module.main(argv[1:])


if __name__ == "__main__":
    main(sys.argv[1:])
