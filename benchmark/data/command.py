"""`circlebench data list|info|verify|download`: the real datasets, their layout and their files.

`verify` parses a root exactly as training will, compares the split sizes with the official
ones, and opens every image, so a run never dies on a missing or truncated file hours in.
"""

from __future__ import annotations

import argparse
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import simplejpeg
from PIL import Image, ImageFile
from rich.console import Console
from rich.table import Table

from benchmark.errors import ArgumentParser
from benchmark.manual import manual_line
from datamodules.base import Split
from datamodules.catalog import DATASETS, datamodule_class

SHOWN = 20  # missing / unreadable files listed by name; the rest are counted


def _parser() -> argparse.ArgumentParser:
    epilog = manual_line("data")
    parser = ArgumentParser(prog="circlebench data", description=__doc__, epilog=epilog)
    commands = parser.add_subparsers(dest="command", required=True)
    about = {
        "list": "the datasets, their protocol and official split sizes",
        "info": "official source, licence and expected layout",
        "verify": "split sizes vs official, missing/bad images",
        "download": "fetch + check + extract where possible",
    }
    sub = {name: commands.add_parser(name, help=about[name], epilog=epilog) for name in about}
    for name in ("info", "verify", "download"):
        sub[name].add_argument("dataset")
    verify, download = sub["verify"], sub["download"]
    verify.add_argument("--root", type=Path, required=True, help="the dataset folder")
    verify.add_argument(
        "--train-classes",
        type=int,
        help="cub200/cars196: classes 1..N train (for subsets; official counts then unchecked)",
    )
    verify.add_argument("--include-val", action="store_true", help="msmt17: train + list_val")
    verify.add_argument(
        "--no-decode", action="store_true", help="only check that the files exist (faster)"
    )
    download.add_argument("--root", type=Path, required=True, help="folder to extract into")
    download.add_argument("--timeout", type=float, default=10.0, help="network timeout, seconds")
    return parser


def _dataset(name: str) -> Any:
    """The DataModule class of a real dataset; Any: it has `info` and `official_counts`, which
    `RetrievalDataModule` (shared with the synthetic data) lacks."""
    try:
        return datamodule_class(name)
    except KeyError as error:
        raise SystemExit(f"circlebench data: {error.args[0]}") from None


def _list(console: Console, args: argparse.Namespace) -> None:
    table = Table(title="datasets (the synthetic default needs no files)")
    for column in ("name", "protocol", "Recall@K", "train", "query", "gallery"):
        table.add_column(column, no_wrap=True)
    for name in DATASETS:
        cls = _dataset(name)
        counts = cls.info.counts
        sizes = [
            f"{counts[s][0]:,} / {counts[s][1]:,}" if s in counts else "= query"
            for s in ("train", "query", "gallery")
        ]
        ks = ",".join(map(str, cls.default_recall_ks))
        table.add_row(name, cls.protocol, ks, *sizes)
    console.print(table)
    console.print("train / query / gallery: images / classes under the official split")


def _info(console: Console, args: argparse.Namespace) -> None:
    name = args.dataset
    cls = _dataset(name)
    info = cls.info
    console.print(f"[bold]{info.title}[/bold]  ({name}, class_path datamodules.{cls.__name__})")
    console.print(f"protocol: {cls.protocol}, Recall@K: {list(cls.default_recall_ks)}")
    console.print(f"source: {info.homepage}")
    console.print(f"licence: {info.licence}")
    console.print(f"expected layout under --root:\n{info.layout}")
    console.print(f"how to obtain: {info.obtain}")
    if info.download_url:
        console.print(f"direct download: circlebench data download {name} --root DIR")


def _unreadable(path: str) -> str:
    """'' if the image decodes completely and cleanly, else why not.

    Run under `_check_files`, where Python warnings are errors and truncation is never loaded.
    """
    try:
        with Image.open(path) as image:
            # a 1/8-scale JPEG draft still reads every byte, so truncation shows, without the
            # full-size inverse DCT (measured: docs/benchmarks/data.md#measurements-behind-the-code)
            image.draft("RGB", (max(1, image.width // 8), max(1, image.height // 8)))
            image.load()
            jpeg = image.format in ("JPEG", "MPO")
        if jpeg:  # Pillow silences libjpeg's warnings: garbled scan data decodes to noise
            simplejpeg.decode_jpeg(Path(path).read_bytes(), strict=True, min_factor=8)
    except FileNotFoundError:
        return "missing"
    except Exception as error:  # any decoder failure (OSError, SyntaxError, ...) is the finding
        return f"{type(error).__name__}: {error}"
    return ""


def _check_files(split: Split, decode: bool) -> tuple[list[str], list[str]]:
    """(missing, unreadable 'path: why') among the split's files."""
    paths = [str(p) for p in split.items]
    if not decode:
        return [p for p in paths if not Path(p).is_file()], []
    truncated = ImageFile.LOAD_TRUNCATED_IMAGES  # some libraries set it; verify never pads
    with warnings.catch_warnings(), ThreadPoolExecutor() as pool:  # PIL decodes without the GIL
        warnings.simplefilter("error")  # a decoder's warning (corrupt EXIF, MPO, ...) is a finding
        warnings.simplefilter("default", DeprecationWarning)
        ImageFile.LOAD_TRUNCATED_IMAGES = False
        try:
            reasons = list(pool.map(_unreadable, paths))
        finally:
            ImageFile.LOAD_TRUNCATED_IMAGES = truncated
    missing = [p for p, why in zip(paths, reasons, strict=True) if why == "missing"]
    bad = [
        f"{p}: {why}" for p, why in zip(paths, reasons, strict=True) if why not in ("", "missing")
    ]
    return missing, bad


def _verify(console: Console, args: argparse.Namespace) -> None:
    cls = _dataset(args.dataset)
    chosen = {"train_classes": args.train_classes, "include_val": args.include_val or None}
    options = {name: value for name, value in chosen.items() if value is not None}
    try:
        dm = cls(root=args.root, **options)
    except TypeError:
        raise SystemExit(
            f"circlebench data verify: {args.dataset} takes no --train-classes/--include-val "
            "(--train-classes: cub200, cars196; --include-val: msmt17)"
        ) from None
    try:
        splits = dm.load_splits()
    except (FileNotFoundError, ValueError) as error:
        raise SystemExit(f"circlebench data verify: {error}") from None
    official = dm.official_counts
    table = Table(title=f"{cls.info.title} in {args.root}")
    for column in ("split", "images", "official", "classes", "official", "missing", "unreadable"):
        table.add_column(column)
    problems, listed = [], []
    for name, split in [("train", splits.train), *splits.test_sets()]:
        images, classes = len(split), len(set(split.labels))
        expected = official.get(name)
        missing, bad = _check_files(split, decode=not args.no_decode)
        listed += missing + bad
        if expected is not None and (images, classes) != expected:
            problems.append(f"{name}: {images:,} images / {classes:,} classes, official {expected}")
        if missing or bad:
            problems.append(f"{name}: {len(missing):,} missing, {len(bad):,} unreadable files")
        official_images, official_classes = expected or (None, None)
        counts = (images, official_images, classes, official_classes, len(missing), len(bad))
        table.add_row(name, *(f"{n:,}" if n is not None else "—" for n in counts))
    console.print(table)
    if not official:
        console.print("no official counts for this class split: sizes not compared")
    for line in listed[:SHOWN]:
        console.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)
    if len(listed) > SHOWN:
        console.print(f"  ... and {len(listed) - SHOWN} more")
    if problems:
        raise SystemExit(f"circlebench data verify {args.dataset}: " + "; ".join(problems))
    console.print(f"{args.dataset}: OK")


def _download(console: Console, args: argparse.Namespace) -> None:
    from benchmark.data.download import download, extract

    cls = _dataset(args.dataset)
    info = cls.info
    if not info.download_url:
        raise SystemExit(
            f"circlebench data download: {info.title} has no direct public download. "
            f"{info.obtain} Source: {info.homepage}. Expected layout:\n{info.layout}"
        )
    console.print(f"downloading {info.download_url} (md5 {info.download_md5}) ...")
    try:
        archive = download(info.download_url, info.download_md5, args.root, timeout_s=args.timeout)
        extract(archive, args.root)
    except (ConnectionError, ValueError) as error:
        raise SystemExit(f"circlebench data download: {error}") from None
    console.print(
        f"extracted {archive.name} into {args.root}; next: "
        f"circlebench data verify {args.dataset} --root {args.root}"
    )


def main(argv: list[str] | None = None) -> None:
    """Run one `circlebench data` command; failures exit non-zero with the reason on stderr."""
    args = _parser().parse_args(argv)
    console = Console(width=max(Console().width, 110))  # tables are unreadable folded at 80
    commands = {"list": _list, "info": _info, "verify": _verify, "download": _download}
    commands[args.command](console, args)
