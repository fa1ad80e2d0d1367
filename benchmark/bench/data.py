"""Training-loader throughput: synthetic and JPEG folders vs torchvision ImageFolder, 0/2 workers.

A temporary CUB-200-2011 folder of 400×300 JPEGs is read by `CUB200DataModule` (P-K loader)
and by a plain `torchvision.datasets.ImageFolder` with the same transform and shuffled batches
of the same size; images/s are medians over `--repeat` passes of `--batches` batches.
`--threads` (the main process's torch threads; workers use one) defaults to 1: per-image
transforms gain nothing from more, and on a loaded machine threads wait on each other
(docs/benchmarks/data.md).
"""

from __future__ import annotations

import argparse
import tempfile
from itertools import islice
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader
from torchvision.datasets import ImageFolder

from benchmark.bench.timing import bench_parser, machine, median_seconds
from datamodules import CUB200DataModule, SyntheticDataModule
from datamodules.transforms import fine_grained_transform


def write_jpeg_folder(root: Path, classes: int, per_class: int) -> Path:
    """A CUB_200_2011/ folder of `classes × per_class` 400×300 JPEGs with smooth content."""
    base = root / "CUB_200_2011"
    rng = np.random.default_rng(0)
    images: list[str] = []
    labels: list[str] = []
    y, x = np.mgrid[0:300, 0:400]
    for c in range(1, classes + 1):
        for n in range(per_class):
            image_id = len(images) + 1
            name = f"{c:03d}.Class_{c}/Class_{c}_{n:04d}.jpg"
            waves = [np.sin(x / 37 + p) + np.cos(y / 23 - p) for p in rng.uniform(0, 6.3, 3)]
            pixels = np.stack(waves, axis=-1) * 60 + 128 + rng.normal(0, 12, (300, 400, 3))
            path = base / "images" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(pixels.clip(0, 255).astype(np.uint8)).save(path, quality=90)
            images.append(f"{image_id} {name}")
            labels.append(f"{image_id} {c}")
    (base / "images.txt").write_text("\n".join(images) + "\n")
    (base / "image_class_labels.txt").write_text("\n".join(labels) + "\n")
    return base


def images_per_second(loader: DataLoader, batches: int, repeat: int) -> float:
    """Images delivered per second over `batches` batches from a fresh iterator (median)."""
    counted = []

    def one_pass() -> None:
        counted.append(sum(len(batch[0]) for batch in islice(iter(loader), batches)))

    seconds = median_seconds(one_pass, warmup=1, repeat=repeat)
    return counted[-1] / seconds


def main(argv: list[str] | None = None) -> None:
    parser = bench_parser("data", __doc__)
    parser.add_argument("--classes", type=int, default=32, help="classes in the JPEG folder")
    parser.add_argument("--per-class", type=int, default=20, help="JPEGs per class")
    parser.add_argument("--batches", type=int, default=5, help="batches per timed pass")
    parser.add_argument("--repeat", type=int, default=3, help="timed passes (median)")
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    parser.add_argument("--threads", type=int, default=1, help="main-process torch threads")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(machine())
    p, k, size = 16, 5, 224
    with tempfile.TemporaryDirectory() as tmp:
        root = write_jpeg_folder(Path(tmp), args.classes, args.per_class)
        print(
            f"P×K = {p}×{k} = {p * k} images per batch, {args.batches} batches per pass, "
            f"median of {args.repeat}; JPEGs 400×300 → {size} px; {args.threads} torch thread(s)"
        )
        print(f"{'loader':<44}{'workers':>8}{'images/s':>10}{'vs ImageFolder':>16}")
        for workers in args.workers:
            common = {"p": p, "k": k, "num_workers": workers, "image_size": size}
            folder = ImageFolder(str(root / "images"), fine_grained_transform(size, train=True))
            loader = DataLoader(
                folder,
                p * k,
                shuffle=True,
                drop_last=True,
                num_workers=workers,
                persistent_workers=workers > 0,
            )
            baseline = images_per_second(loader, args.batches, args.repeat)
            rows = [("torchvision ImageFolder (baseline)", baseline)]
            cub = CUB200DataModule(root, train_classes=args.classes - 1, **common)
            rows.append(("CUB200DataModule, JPEG folder, P-K", _train(cub, args)))
            for synthetic_size in (size, 64):
                synthetic = SyntheticDataModule(**{**common, "image_size": synthetic_size})
                rows.append(
                    (f"SyntheticDataModule at {synthetic_size} px", _train(synthetic, args))
                )
            for name, rate in rows:
                print(f"{name:<44}{workers:>8}{rate:>10.0f}{rate / baseline:>15.2f}×")


def _train(dm: CUB200DataModule | SyntheticDataModule, args: argparse.Namespace) -> float:
    dm.setup("fit")
    return images_per_second(dm.train_dataloader(), args.batches, args.repeat)
