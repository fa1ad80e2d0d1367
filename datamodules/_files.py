"""What each real dataset is (source, licence, layout, official counts) and how to read its files.

The five dataset modules share this record and these readers, so that an error raised while
parsing, `circlebench data info` and `circlebench data verify` tell the same story.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from datamodules.splits import Split, Splits


@dataclass(frozen=True)
class DatasetInfo:
    """A real dataset: where it comes from, its on-disk layout and its official split sizes.

    Args:
        counts: official `(images, classes)` per split name (`train`, `query`, `gallery`) under
            the default arguments of the DataModule.
        download_url: a direct public URL of the archive, or "" where none exists.
        download_md5: md5 of that archive, checked before it is extracted.
    """

    name: str
    title: str
    homepage: str
    licence: str
    layout: str
    obtain: str
    counts: dict[str, tuple[int, int]] = field(default_factory=dict)
    download_url: str = ""
    download_md5: str = ""

    def missing(self, root: Path, expected: str) -> FileNotFoundError:
        """The error for a root that lacks `expected`: what, where, and how to get it."""
        return FileNotFoundError(
            f"{self.title} not found in {root}: expected {expected}. Expected layout:\n"
            f"{self.layout}\n{self.obtain} Then pass --data.init_args.root=<dir> "
            f"(`circlebench data info {self.name}` repeats this)."
        )


def resolve_root(root: str | Path, marker: str, subfolders: Iterable[str]) -> Path:
    """`root` itself if it holds `marker`, else the first `root/<subfolder>` that does.

    People point `--root` either at the extracted folder or at its parent, so both work; when
    neither holds `marker`, `root` is returned and the caller's check reports it.
    """
    root = Path(root).expanduser()
    candidates = [root, *(root / name for name in subfolders)]
    return next((folder for folder in candidates if (folder / marker).exists()), root)


def read_rows(
    path: Path,
    info: DatasetInfo,
    columns: int,
    *,
    header: bool = False,
    numbers: Mapping[int, str] | None = None,
) -> list[list[str]]:
    """Whitespace-separated rows of a metadata file, each checked to have `columns` fields.

    Args:
        numbers: `{column index: column name}` of the fields that must be whole numbers (ids,
            labels); each is checked here, so the caller's `int(row[i])` cannot fail and a
            damaged value is reported with its file, line, column and value.
    """
    if not path.is_file():
        raise info.missing(path.parent, f"the file {path.name}")
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        row = line.split()
        if (header and number == 1) or not row:
            continue
        if len(row) != columns:
            raise ValueError(
                f"{info.title}: {path} line {number} has {len(row)} fields, expected {columns} "
                f"({' '.join(row)!r}); the file is damaged, extract it again from the archive"
            )
        for column, name in (numbers or {}).items():
            digits = row[column].removeprefix("-")  # what int() reads, but not `1_0` or `٣`
            if not (digits.isascii() and digits.isdigit()):
                raise ValueError(
                    f"{info.title}: {path} line {number} column {column + 1} ({name}) holds "
                    f"{row[column]!r}, not a whole number; the file is damaged, extract it "
                    "again from the archive"
                )
        rows.append(row)
    return rows


def split_by_class(
    info: DatasetInfo, root: Path, images: list[tuple[Path, int]], train_classes: int, *, test: bool
) -> Splits:
    """Images of classes 1..`train_classes` train, the rest query (= gallery), in their order.

    `images` are `(path, class id)`; `test` False leaves the query empty (tuning reads no test
    image). The official number of training classes is `info.counts["train"][1]`.
    """
    largest = max((label for _, label in images), default=0)
    if not 1 <= train_classes < largest:
        raise ValueError(
            f"{info.title}: train_classes={train_classes} leaves no training or no test class; "
            f"{root} has classes 1..{largest}, so choose 1 <= train_classes < {largest} "
            f"({info.counts['train'][1]} is the official split)"
        )
    every = Split([str(path) for path, _ in images], [c for _, c in images], [-1] * len(images))
    train = [i for i, c in enumerate(every.labels) if c <= train_classes]
    held = [i for i, c in enumerate(every.labels) if test and c > train_classes]
    return Splits(every.subset(train), every.subset(held), None)


def check_images_present(info: DatasetInfo, root: Path, splits: Split | Splits) -> None:
    """Raise unless the first image of each split in `splits` exists: catches metadata without
    images in a few stats (`circlebench data verify` checks every file)."""
    if isinstance(splits, Split):
        named = [("train", splits)]
    else:
        named = [("train", splits.train), *splits.test_sets()]
    for name, split in named:
        if len(split) and not Path(str(split.items[0])).is_file():
            raise info.missing(root, f"the {name} images, e.g. {split.items[0]}")
