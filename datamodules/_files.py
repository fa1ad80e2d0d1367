"""What each real dataset is (source, licence, layout, official counts) and how to say it's missing.

The five dataset modules parse their own metadata; they share this record so that an error
raised while parsing, `circlebench data info` and `circlebench data verify` all tell the same
story about where a dataset comes from and what its folder must hold.
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
    if (root / marker).exists():
        return root
    for name in subfolders:
        if (root / name / marker).exists():
            return root / name
    return root


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
            if not _is_whole_number(row[column]):
                raise ValueError(
                    f"{info.title}: {path} line {number} column {column + 1} ({name}) holds "
                    f"{row[column]!r}, not a whole number; the file is damaged, extract it "
                    "again from the archive"
                )
        rows.append(row)
    return rows


def _is_whole_number(text: str) -> bool:
    """True for what `int()` reads as a plain decimal: `7`, `007`, `-1`; not `1x`, `1.0`, `1_0`."""
    return text.removeprefix("-").isascii() and text.removeprefix("-").isdigit()


def check_images_present(info: DatasetInfo, root: Path, splits: Split | Splits) -> None:
    """Raise unless the first image of every split exists: catches metadata without images.

    `splits` is what the run reads (`RetrievalDataModule.on_disk()`): every split, or the training
    split alone while tuning, whose test images may be absent. A full scan of every file is
    `circlebench data verify`'s job; this costs a few stats.
    """
    named = (
        [("train", splits)]
        if isinstance(splits, Split)
        else [("train", splits.train), ("query", splits.query), ("gallery", splits.gallery)]
    )
    for name, split in named:
        if split is not None and len(split) and not Path(str(split.items[0])).is_file():
            raise info.missing(root, f"the {name} images, e.g. {split.items[0]}")
