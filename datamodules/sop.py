"""Stanford Online Products (Oh Song et al., CVPR 2016): `Ebay_train.txt` / `Ebay_test.txt`.

59,551 training images of 11,318 products and 60,502 test images of 11,316 others; some
images are grayscale (the image Dataset converts every image to RGB).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from datamodules._files import DatasetInfo, read_rows, resolve_root
from datamodules.base import RetrievalDataModule, RetrievalProtocol, Split, Splits

INFO = DatasetInfo(
    name="sop",
    title="Stanford Online Products",
    homepage="https://cvgl.stanford.edu/projects/lifted_struct/",
    licence="research use only; images from eBay; cite Oh Song et al., CVPR 2016",
    layout="  Stanford_Online_Products/Ebay_train.txt, Ebay_test.txt, "
    "<category>_final/<product>_<n>.JPG",
    obtain="The project page's FTP link (Stanford_Online_Products.zip, 2.9 GB) is no longer "
    "reliable; request it from the authors or use a mirror that keeps the official files.",
    counts={"train": (59551, 11318), "query": (60502, 11316)},
)

HEADER = ["image_id", "class_id", "super_class_id", "path"]


def _read_list(root: Path, name: str) -> Split:
    path = root / name
    if not path.is_file():
        raise INFO.missing(root, name)
    header = path.read_text().split("\n", 1)[0].split()
    if header != HEADER:
        raise ValueError(
            f"{INFO.title}: {path} starts with {header}, expected the header {HEADER}; "
            "is it the official list file?"
        )
    rows = read_rows(path, INFO, 4, header=True, numbers=dict(enumerate(HEADER[:3])))
    return Split(
        [str(root / row[3]) for row in rows], [int(row[1]) for row in rows], [-1] * len(rows)
    )


def sop_splits(root: str | Path, *, test: bool = True) -> Splits:
    """Train from `Ebay_train.txt`, query (= gallery) from `Ebay_test.txt`; labels: class_id.
    `test` False leaves `Ebay_test.txt` unread (the query is empty)."""
    root = resolve_root(root, "Ebay_train.txt", ["Stanford_Online_Products"])
    query = _read_list(root, "Ebay_test.txt") if test else Split([], [], [])
    return Splits(train=_read_list(root, "Ebay_train.txt"), query=query, gallery=None)


class SOPDataModule(RetrievalDataModule):
    """Stanford Online Products, `same_set`: `Ebay_train.txt` train, `Ebay_test.txt` query.

    Most products have 2–12 images, so K > 2 repeats images (PKSampler's `small_classes`).
    """

    dataset_name: ClassVar[str] = "sop"
    protocol: ClassVar[RetrievalProtocol] = "same_set"
    default_recall_ks: ClassVar[tuple[int, ...]] = (1, 10, 100, 1000)
    info: ClassVar[DatasetInfo] = INFO

    def __init__(self, root: str | Path, **kwargs: Any) -> None:
        super().__init__(root, **kwargs)

    def load_splits(self) -> Splits:
        return sop_splits(self.root_dir)

    def load_train(self) -> Split:
        return sop_splits(self.root_dir, test=False).train
