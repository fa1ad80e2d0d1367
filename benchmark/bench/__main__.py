"""Benchmarks (not tests): `python -m benchmark.bench {losses,data,eval,train,gpu,backbones}`.

Each prints its figures next to a plain baseline measured in the same run, because the
machines are noisy and only the ratio is comparable across runs.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from benchmark.manual import manual_line

# What each benchmark measures, and the module that measures it.
BENCHMARKS = {
    "losses": ("loss forward+backward time vs plain autograd", "benchmark.bench.losses"),
    "data": ("training-loader images/s vs torchvision ImageFolder", "benchmark.bench.data"),
    "eval": ("retrieval evaluation time and peak memory vs full sort", "benchmark.bench.eval"),
    "train": ("training images/s for the default CPU config", "benchmark.bench.train"),
    "gpu": ("a paper config's training, loaders and evaluator on CUDA", "benchmark.bench.gpu"),
    "backbones": ("training and extraction images/s per backbone", "benchmark.bench.backbones"),
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmark.bench", description=__doc__, epilog=manual_line("bench")
    )
    parser.add_argument("what", choices=sorted(BENCHMARKS), help="which benchmark to run")
    argv = sys.argv[1:] if argv is None else argv
    # Only the first word is ours: `losses --help` is the help of the losses benchmark.
    args = parser.parse_args(argv[:1])
    module = importlib.import_module(BENCHMARKS[args.what][1])
    module.main(argv[1:])


if __name__ == "__main__":
    main(sys.argv[1:])
