"""MSMT17 (Wei et al., CVPR 2018): 1,041 training identities, 3,060 test identities, 15 cameras.

Splits come from the official `list_*.txt` files (`<pid>/<name>.jpg <pid>` per line). Names
are `PPPP_III_CC_<date><time>_FFFF_B[_ex].jpg` and the camera is `CC` (1–15). V1 keeps images
in `train/` and `test/`; V2 (faces masked) in `mask_train_v2/` and `mask_test_v2/`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from datamodules._files import DatasetInfo, read_rows, resolve_root
from datamodules.base import ImageSize, RetrievalDataModule, RetrievalProtocol, Split, Splits

INFO = DatasetInfo(
    name="msmt17",
    title="MSMT17",
    homepage="https://www.pkuvmc.com/dataset.html",
    licence="non-commercial research after a signed agreement; no redistribution; "
    "cite Wei et al., CVPR 2018",
    layout="  MSMT17_V1/list_train.txt, list_val.txt, list_query.txt, list_gallery.txt, "
    "train/, test/\n  or MSMT17_V2/ with the same lists and mask_train_v2/, mask_test_v2/",
    obtain="MSMT17 is released only on request: sign the agreement linked from "
    "https://www.pkuvmc.com/dataset.html and the authors send the archive.",
    counts={"train": (30248, 1041), "query": (11659, 3060), "gallery": (82161, 3060)},
)

Version = Literal["V1", "V2"]
IMAGE_DIRS: dict[Version, tuple[str, str]] = {
    "V1": ("train", "test"),
    "V2": ("mask_train_v2", "mask_test_v2"),
}


def msmt17_version(root: Path) -> Version:
    """V1 or V2, from the image folders present, else from the folder name `MSMT17_V*`."""
    for version, (train_dir, _) in IMAGE_DIRS.items():
        if _image_dir(root, train_dir).is_dir():
            return version
    for version in IMAGE_DIRS:
        if root.name.upper().endswith(f"_{version}"):
            return version
    raise INFO.missing(root, "train/ and test/ (V1) or mask_train_v2/ and mask_test_v2/ (V2)")


def _image_dir(root: Path, name: str) -> Path:
    upper = root / name.replace("v2", "V2")  # some copies of V2 spell the folders _V2
    return upper if upper.is_dir() and not (root / name).is_dir() else root / name


def _read_lists(root: Path, names: list[str], images: Path) -> Split:
    """The images of the list files `names` in `images`, with person ids and 0-based cameras."""
    items, ids, cameras = [], [], []
    for name in names:
        for relative, pid in read_rows(root / name, INFO, 2, numbers={1: "person_id"}):
            fields = relative.rsplit("/", 1)[-1].split("_")  # str ops: 126k lines, Path is slow
            if len(fields) < 3 or not fields[2].isdigit():
                raise ValueError(
                    f"{INFO.title}: {root / name} lists {relative!r}, whose name does not hold a "
                    "camera in its third field (PPPP_III_CC_...); is it the official list?"
                )
            items.append(f"{images}/{relative}")
            ids.append(int(pid))
            cameras.append(int(fields[2]) - 1)
    return Split(items, ids, cameras)


def msmt17_splits(root: str | Path, include_val: bool = False, *, test: bool = True) -> Splits:
    """Train (`list_train.txt`, + `list_val.txt` if `include_val`), query, gallery; list pids.

    Reads the list files only, so it works where the images are absent; `test` False leaves the
    query and gallery lists unread (and the splits empty).
    """
    root = resolve_root(root, "list_train.txt", ["MSMT17_V1", "MSMT17_V2"])
    train_lists = ["list_train.txt", "list_val.txt"] if include_val else ["list_train.txt"]
    test_lists = ["list_query.txt", "list_gallery.txt"]
    for name in train_lists + (test_lists if test else []):
        if not (root / name).is_file():
            raise INFO.missing(root, name)
    train_dir, test_dir = (_image_dir(root, name) for name in IMAGE_DIRS[msmt17_version(root)])
    train = _read_lists(root, train_lists, train_dir)  # val: training identities and folder
    query, gallery = (_read_lists(root, [name] if test else [], test_dir) for name in test_lists)
    return Splits(train, query, gallery)


class MSMT17DataModule(RetrievalDataModule):
    """MSMT17 V1 or V2, `query_gallery`: re-ID ranks 1, 5, 10 and mAP; 256×128 by default.

    Args:
        include_val: train on `list_train.txt` + `list_val.txt` (32,621 images) instead of
            `list_train.txt` alone (30,248). Papers differ, so results rows record it.
    """

    dataset_name: ClassVar[str] = "msmt17"
    protocol: ClassVar[RetrievalProtocol] = "query_gallery"
    default_recall_ks: ClassVar[tuple[int, ...]] = (1, 5, 10)
    info: ClassVar[DatasetInfo] = INFO

    def __init__(
        self,
        root: str | Path,
        include_val: bool = False,
        image_size: ImageSize = (256, 128),
        **kwargs: Any,
    ) -> None:
        super().__init__(root, image_size=image_size, **kwargs)
        self.include_val = include_val

    @property
    def official_counts(self) -> dict[str, tuple[int, int]]:
        """Official `(images, identities)` per split under this `include_val`."""
        return {**INFO.counts, "train": (32621, 1041)} if self.include_val else INFO.counts

    def load_splits(self) -> Splits:
        return msmt17_splits(self.root_dir, self.include_val)

    def load_train(self) -> Split:
        return msmt17_splits(self.root_dir, self.include_val, test=False).train
