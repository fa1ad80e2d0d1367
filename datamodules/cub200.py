"""CUB-200-2011 (Wah et al., 2011): classes 1–100 train (5,864 images), 101–200 test (5,924).

The metric-learning split is by class; `train_test_split.txt` is the classification split of
the same classes and is ignored on purpose.
"""

from __future__ import annotations

from pathlib import Path

from datamodules._files import DatasetInfo, contiguous, read_rows, resolve_root
from datamodules.base import Split, Splits

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


def cub200_splits(root: str | Path, train_classes: int = 100) -> Splits:
    """Classes 1..`train_classes` train, the rest query (= gallery); labels from the files.

    Training labels are 0..train_classes-1, query labels the official class id minus 1.
    `train_classes` scales the split to subsets (classes 1–6 with 3: 178 / 145 images).
    """
    root = resolve_root(root, "images.txt", ["CUB_200_2011"])
    if not (root / "images").is_dir():
        raise INFO.missing(root, "images.txt and the folder images/")
    paths = dict(read_rows(root / "images.txt", INFO, 2))
    classes = {
        image: int(label) for image, label in read_rows(root / "image_class_labels.txt", INFO, 2)
    }
    if paths.keys() != classes.keys():
        raise ValueError(
            f"{INFO.title}: images.txt and image_class_labels.txt in {root} list different "
            f"image ids ({len(paths)} vs {len(classes)}); extract both from the same archive"
        )
    largest = max(classes.values(), default=0)
    if not 1 <= train_classes < largest:
        raise ValueError(
            f"{INFO.title}: train_classes={train_classes} leaves no training or no test class; "
            f"{root} has classes 1..{largest}, so choose 1 <= train_classes < {largest} "
            "(100 is the official split)"
        )
    train, test = [], []
    for image in sorted(paths, key=int):
        (train if classes[image] <= train_classes else test).append(image)
    images = root / "images"
    train_labels = contiguous([classes[i] for i in train])
    return Splits(
        train=Split([str(images / paths[i]) for i in train], train_labels, [-1] * len(train)),
        query=Split(
            [str(images / paths[i]) for i in test], [classes[i] - 1 for i in test], [-1] * len(test)
        ),
        gallery=None,
    )
