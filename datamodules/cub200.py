"""CUB-200-2011 (Wah et al., 2011): classes 1–100 train (5,864 images), 101–200 test (5,924).

The metric-learning split is by class; `train_test_split.txt` is the classification split of
the same classes and is ignored on purpose.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from datamodules._files import DatasetInfo, read_rows, resolve_root, split_by_class
from datamodules.base import RetrievalDataModule, RetrievalProtocol, Split, Splits

INFO = DatasetInfo(
    name="cub200",
    title="CUB-200-2011",
    homepage="https://www.vision.caltech.edu/datasets/cub_200_2011/",
    licence="non-commercial research and educational use; images © their Flickr photographers; "
    "cite Wah et al., CNS-TR-2011-001",
    layout="  CUB_200_2011/images.txt, image_class_labels.txt, images/<class>/<image>.jpg",
    obtain="Download CUB_200_2011.tgz (`circlebench data download cub200 --root DIR`, or from "
    "https://data.caltech.edu/records/65de6-vp158) and extract it.",
    counts={"train": (5864, 100), "query": (5924, 100)},
    download_url="https://data.caltech.edu/records/65de6-vp158/files/CUB_200_2011.tgz?download=1",
    download_md5="97eceeb196236b17998738112f37df78",
)


def cub200_splits(root: str | Path, train_classes: int = 100, *, test: bool = True) -> Splits:
    """Classes 1..`train_classes` train, the rest query (= gallery); labels are the class ids.

    `train_classes` scales the split to subsets (classes 1–6 with 3: 178 / 145 images); `test`
    False lists no test image (the query is empty).
    """
    root = resolve_root(root, "images.txt", ["CUB_200_2011"])
    if not (root / "images").is_dir():
        raise INFO.missing(root, "images.txt and the folder images/")
    paths = dict(read_rows(root / "images.txt", INFO, 2, numbers={0: "image_id"}))
    labels = read_rows(
        root / "image_class_labels.txt", INFO, 2, numbers={0: "image_id", 1: "class_id"}
    )
    classes = {image: int(label) for image, label in labels}
    if paths.keys() != classes.keys():
        raise ValueError(
            f"{INFO.title}: images.txt and image_class_labels.txt in {root} list different "
            f"image ids ({len(paths)} vs {len(classes)}); extract both from the same archive"
        )
    images = [(root / "images" / paths[i], classes[i]) for i in sorted(paths, key=int)]
    return split_by_class(INFO, root, images, train_classes, test=test)


class CUB200DataModule(RetrievalDataModule):
    """CUB-200-2011, `same_set`: classes 1..`train_classes` train, the rest query = gallery.

    Args:
        train_classes: classes 1..N train, N+1..200 test; 100 is the official split, smaller
            values split subsets (3 for classes 1–6, 25 for classes 1–50).
    """

    dataset_name: ClassVar[str] = "cub200"
    protocol: ClassVar[RetrievalProtocol] = "same_set"
    default_recall_ks: ClassVar[tuple[int, ...]] = (1, 2, 4, 8)
    info: ClassVar[DatasetInfo] = INFO

    def __init__(self, root: str | Path, train_classes: int = 100, **kwargs: Any) -> None:
        super().__init__(root, **kwargs)
        self.train_classes = train_classes

    def load_splits(self) -> Splits:
        return cub200_splits(self.root_dir, self.train_classes)

    def load_train(self) -> Split:
        return cub200_splits(self.root_dir, self.train_classes, test=False).train
