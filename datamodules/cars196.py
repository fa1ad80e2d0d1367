"""Cars196 (Krause et al., 3dRR 2013): classes 1–98 train (8,054 images), 99–196 test (8,131).

Two official layouts hold the same 16,185 labelled images: `cars_annos.mat` + `car_ims/`
(the one metric-learning papers use) and the classification devkit (`devkit/` + `cars_train/`
+ `cars_test/`, with the test labels in `cars_test_annos_withlabels.mat`). Both are split by
class, ignoring their train/test flags, which are the classification split.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np

from datamodules._files import DatasetInfo, split_by_class
from datamodules.base import RetrievalDataModule, RetrievalProtocol, Split, Splits

INFO = DatasetInfo(
    name="cars196",
    title="Cars196 (Stanford Cars)",
    homepage="https://ai.stanford.edu/~jkrause/cars/car_dataset.html",
    licence="non-commercial research use under ImageNet-style terms; images © their web owners; "
    "cite Krause et al., 3dRR 2013",
    layout="  cars_annos.mat and car_ims/<000001..016185>.jpg\n"
    "  or devkit/cars_train_annos.mat, cars_test_annos_withlabels.mat (in devkit/ or the root), "
    "cars_train/<00001>.jpg, cars_test/<00001>.jpg",
    obtain="The Stanford page no longer serves the archives; request them from the authors or "
    "use a mirror that keeps the official file names (car_ims.tgz + cars_annos.mat, or "
    "cars_train.tgz + cars_test.tgz + car_devkit.tgz + cars_test_annos_withlabels.mat).",
    counts={"train": (8054, 98), "query": (8131, 98)},
)

TEST_LABELS = "cars_test_annos_withlabels.mat"


def mat_annotations(path: Path, name_field: str) -> list[tuple[str, int]]:
    """`(name_field, class)` of each entry of the MATLAB struct array `annotations` in `path`."""
    from scipy.io import loadmat  # imported where used: only Cars196 needs scipy
    from scipy.io.matlab import MatReadError

    try:
        variables = loadmat(path, squeeze_me=True)
    except (MatReadError, ValueError, OSError) as error:
        raise ValueError(
            f"{INFO.title}: cannot read {path} as a MATLAB file ({error}); download it again"
        ) from error
    if "annotations" not in variables:
        found = sorted(k for k in variables if not k.startswith("__"))
        raise ValueError(
            f"{INFO.title}: {path} holds no variable 'annotations' (it holds {found}); "
            "is it the right annotation file?"
        )
    records = np.atleast_1d(variables["annotations"])
    columns = []
    for field in (name_field, "class"):
        if records.dtype.names is None or field not in records.dtype.names:
            raise ValueError(
                f"{INFO.title}: the annotations in {path} have no field {field!r} "
                f"(fields: {records.dtype.names}); is it the right annotation file?"
            )
        columns.append(
            [v.item() if isinstance(v, np.ndarray | np.generic) else v for v in records[field]]
        )
    names, classes = columns
    for entry, value in enumerate(classes, start=1):
        whole = isinstance(value, int | float) and not isinstance(value, bool)
        if not (whole and float(value).is_integer()):
            raise ValueError(
                f"{INFO.title}: {path} entry {entry} of the annotations has class={value!r}, "
                "not a whole number; the file is damaged, download it again"
            )
    return [(name, int(label)) for name, label in zip(names, classes, strict=True)]


def devkit_annotations(root: Path, part: Literal["train", "test"]) -> list[tuple[str, int]]:
    """`(path relative to root, class 1..196)` for one half of the devkit layout.

    Reads metadata only, so it works on the devkit alone. The devkit ships test annotations
    without labels; the labelled ones come separately as `cars_test_annos_withlabels.mat`.
    """
    if part == "train":
        path = root / "devkit" / "cars_train_annos.mat"
    else:
        candidates = [root / "devkit" / TEST_LABELS, root / TEST_LABELS]
        path = next((p for p in candidates if p.is_file()), candidates[0])
    if not path.is_file():
        note = " (the devkit's cars_test_annos.mat has no labels)" if part == "test" else ""
        raise INFO.missing(root, f"{path.relative_to(root)}, the labelled {part} annotations{note}")
    return [(f"cars_{part}/{name}", label) for name, label in mat_annotations(path, "fname")]


def cars196_splits(root: str | Path, train_classes: int = 98, *, test: bool = True) -> Splits:
    """Classes 1..`train_classes` train, the rest query (= gallery), from either layout; labels
    are the official class ids (1..196). `test` False lists no test image (the query is empty).

    Both layouts list every class in the same annotations (the devkit's train/test halves are the
    classification split: each holds classes of both), so all annotations are read either way.
    """
    root = Path(root).expanduser()
    if (root / "cars_annos.mat").is_file():
        if not (root / "car_ims").is_dir():
            raise INFO.missing(root, "car_ims/ beside cars_annos.mat")
        annotations = mat_annotations(root / "cars_annos.mat", "relative_im_path")
    elif (root / "devkit").is_dir():
        for folder in ("cars_train", "cars_test"):
            if not (root / folder).is_dir():
                raise INFO.missing(root, f"{folder}/ beside devkit/")
        annotations = devkit_annotations(root, "train") + devkit_annotations(root, "test")
    else:
        raise INFO.missing(root, "cars_annos.mat and car_ims/, or devkit/, cars_train/, cars_test/")
    images = [(root / name, label) for name, label in annotations]
    return split_by_class(INFO, root, images, train_classes, test=test)


class Cars196DataModule(RetrievalDataModule):
    """Cars196, `same_set`: classes 1..`train_classes` train, the rest query = gallery.

    Args:
        train_classes: classes 1..N train, N+1..196 test; 98 is the official split.
    """

    dataset_name: ClassVar[str] = "cars196"
    protocol: ClassVar[RetrievalProtocol] = "same_set"
    default_recall_ks: ClassVar[tuple[int, ...]] = (1, 2, 4, 8)
    info: ClassVar[DatasetInfo] = INFO

    def __init__(self, root: str | Path, train_classes: int = 98, **kwargs: Any) -> None:
        super().__init__(root, **kwargs)
        self.train_classes = train_classes

    def load_splits(self) -> Splits:
        return cars196_splits(self.root_dir, self.train_classes)

    def load_train(self) -> Split:
        return cars196_splits(self.root_dir, self.train_classes, test=False).train
