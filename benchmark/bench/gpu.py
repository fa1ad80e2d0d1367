"""`python -m benchmark.bench gpu`: what one CUDA machine does with a paper config, in one run.

Three sections, each next to a baseline measured in the same run:

* train: the config's `MetricLearningModule` fitted by a Lightning Trainer (what `circlebench
  fit` runs, without checkpoints and evaluation) on generated images of the config's size and
  P×K (rendered once and served from memory, so the renderer does not limit it), in 32-true,
  bf16-mixed, and bf16-mixed with channels-last; a bare PyTorch loop over the same loader (the
  baseline); the same loop on one batch held on the GPU (no loading: the GPU's own training
  images/s). Each with its GPU memory peak.
* loaders: images/s of the training loaders alone with `--workers` processes (default: every
  core), images generated as they are read and a folder of 400×300 JPEGs in the CUB layout,
  against the GPU's training images/s: whether the machine's cores keep its GPU busy.
* eval: `RetrievalEvaluator` on CUDA at SOP and MSMT17 size (`bench eval`'s data), each
  arithmetic and faiss-gpu, its metrics checked equal to the CPU evaluator's, its time against
  faiss-gpu's flat top-k, and its GPU memory peak.

Without CUDA it says so and exits 0. The measuring lives in `benchmark.bench.gpu_runs`.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import get_args

import torch

from benchmark.bench.gpu_steps import Result, Section, Step
from benchmark.bench.timing import bench_parser, machine
from core.devices import float32_modes

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
DEFAULT_CONFIG = EXPERIMENTS / "cub200" / "circle.yaml"  # BN-Inception, 512-D, P=16 K=5, 224 px
SECTIONS: tuple[Section, ...] = get_args(Section)
EVAL_PATHS = ("float32", "float16", "bfloat16", "auto", "faiss")


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = bench_parser("gpu", __doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--config",
        type=Path,
        default=DEFAULT_CONFIG,
        help="a paper config (pair-wise labels): its model, P×K and size",
    )
    parser.add_argument("--steps", type=int, default=200, help="timed training steps per run")
    parser.add_argument("--warmup", type=int, default=20, help="untimed steps first")
    parser.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        help="loader processes (default: every core)",
    )
    parser.add_argument(
        "--case",
        action="append",
        choices=["sop", "msmt17"],
        help="evaluation sizes (default: both)",
    )
    parser.add_argument(
        "--subset", type=float, default=1.0, help="scale the evaluation sizes by this fraction"
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=2,
        help="evaluation runs per path after the checked first one (median)",
    )
    parser.add_argument(
        "--skip", action="append", choices=SECTIONS, default=[], help="leave a section out"
    )
    args = parser.parse_args(argv)
    # 0 workers: loading in the main process
    for name, least in (("steps", 1), ("repeat", 1), ("warmup", 0), ("workers", 0)):
        if getattr(args, name) < least:
            parser.error(f"--{name} must be >= {least}, got {getattr(args, name)}")
    if not args.config.is_file():
        parser.error(f"--config {args.config}: no such file; pass an experiments/*/*.yaml")
    return args


def plan(args: argparse.Namespace) -> list[Step]:
    """Every measurement of this run, in order."""
    steps: list[Step] = []
    if "train" not in args.skip:
        steps += [
            Step("train", "fit 32-true", "fit", "32-true"),
            Step("train", "fit bf16-mixed", "fit", "bf16-mixed"),
            Step("train", "fit bf16-mixed, channels-last", "fit", "bf16-mixed", True),
            Step("train", "bare loop bf16, channels-last", "bare", "bf16-mixed", True),
            Step("train", "compute only bf16, channels-last", "compute", "bf16-mixed", True),
            Step("train", "compute only 32-true", "compute", "32-true"),
        ]
    if "loaders" not in args.skip:
        workers = f"{args.workers} workers"
        steps += [
            Step("loaders", f"generated images, {workers}", data="synthetic"),
            Step("loaders", f"JPEG folder (CUB layout), {workers}", data="jpeg"),
        ]
    if "eval" not in args.skip:
        for case in args.case or ["sop", "msmt17"]:
            steps += [Step("eval", f"{case} {path}", case=case, path=path) for path in EVAL_PATHS]
            steps.append(Step("eval", f"{case} faiss-gpu top-k", case=case, path="faiss-top-k"))
    return steps


def table(results: list[Result]) -> str:
    """The figures as one table per section, each with its ratio to the section's baseline:
    the bare loop (train), the GPU's compute-only rate (loaders), faiss-gpu top-k (eval)."""
    train = [r for r in results if r.step.section == "train"]
    bare = next((r.value for r in train if r.step.loop == "bare"), None)
    # the GPU's fastest compute-only rate: what the loaders must keep up with
    compute = max((r.value for r in train if r.step.loop == "compute"), default=None)
    lines: list[str] = []
    for section in SECTIONS:
        rows = [r for r in results if r.step.section == section]
        if not rows:
            continue
        lines.append(f"-- {section} " + "-" * (70 - len(section)))
        for r in rows:
            gpu = f"  GPU peak {r.gpu_peak / 2**30:5.2f} GiB" if r.gpu_peak else ""
            if section == "eval":
                peer, name = _peer_seconds(results, r.step.case)
                ratio = f"  x{peer / r.value:5.2f} vs {name}" if peer else ""
                same = {None: "", True: "  = CPU", False: "  DIFFERS FROM CPU"}[r.equal]
                shown = f"{r.value:8.2f} s {ratio}{same}"
            else:
                base = bare if section == "train" else compute
                what = "bare loop" if section == "train" else "GPU compute"
                ratio = f"  {r.value / base:5.2f}x {what}" if base else ""
                shown = f"{r.value:8.1f} images/s{ratio}"
            lines.append(f"{r.step.name:44s}{shown}{gpu}{f'  {r.note}' if r.note else ''}")
    busy = [r for r in results if r.step.section == "loaders"]
    if busy and compute:
        slowest = min(r.value for r in busy)
        verdict = "yes" if slowest >= compute else "NO: the GPU waits for its loaders"
        lines.append(f"loaders keep the GPU busy ({compute:.0f} images/s): {verdict}")
    return "\n".join(lines)


def without_cpu_faiss(steps: list[Step]) -> list[Step]:
    """`steps` less the faiss ones when this faiss cannot use the GPU: they would time faiss's
    CPU product (an exhaustive CPU search at the cases' sizes) and say nothing of the GPU."""
    from benchmark.evaluation.faiss_blocks import faiss_has_gpu, import_faiss

    kept = [s for s in steps if s.path not in ("faiss", "faiss-top-k")]
    if len(kept) == len(steps):  # a plan without faiss steps (--skip eval) needs no faiss
        return steps
    try:
        faiss = import_faiss()
    except ImportError as error:  # missing, or faiss-cpu beside faiss-gpu: the fix is in it
        print(f"{error}; the faiss steps are left out")
        return kept
    if not faiss_has_gpu(faiss):
        print(
            "faiss here has no GPU support, so its steps are left out; for them keep one faiss: "
            'pip uninstall -y faiss-cpu && pip install "circlebench[gpu]"'
        )
        return kept
    return steps


def _peer_seconds(results: list[Result], case: str) -> tuple[float | None, str]:
    """The case's baseline: faiss-gpu top-k, or the float32 product where faiss was left out."""
    for path, name in (("faiss-top-k", "faiss-gpu top-k"), ("float32", "float32")):
        found = [r.value for r in results if r.step.case == case and r.step.path == path]
        if found:
            return found[0], name
    return None, ""


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    if not torch.cuda.is_available():
        print(
            "bench gpu: torch sees no CUDA device here, so there is nothing to measure; run it "
            "on a CUDA machine (`python -m benchmark.bench train|eval|data` measure the CPU)"
        )
        return
    from benchmark.bench import gpu_runs  # imports Lightning and the datamodules

    print(machine())
    device = torch.device("cuda")
    print(
        f"GPU {torch.cuda.get_device_name(device)}, torch CUDA {torch.version.cuda}, "
        f"float32 {float32_modes('cuda')}; config {args.config}"
    )
    steps = without_cpu_faiss(plan(args))
    print(f"plan ({len(steps)} measurements): " + "; ".join(s.name for s in steps))
    start, results = time.perf_counter(), []
    runner = gpu_runs.Runner(args, device)
    for step in steps:
        results.append(runner.run(step))
        r, took = results[-1], time.perf_counter() - start
        same = {None: "", True: ", = CPU", False: ", DIFFERS FROM CPU"}[r.equal]
        note = f", {r.note}" if r.note else ""
        print(f"  {step.name}: {r.value:.2f}{same}{note} ({took:.0f} s so far)")
    print(table(results))
    print(f"bench gpu took {time.perf_counter() - start:.0f} s")
