"""Writers of tiny datasets in each official on-disk layout (8×8 JPEGs, real name patterns).

Each image's colour comes from a unique id, so the same picture written into two layouts
(Cars196's `car_ims/` and devkit) can be matched by content.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image
from scipy.io import savemat


def write_jpeg(path: Path, seed: int, *, mode: str = "RGB") -> None:
    """An 8×8 JPEG whose pixels are a function of `seed`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.random.default_rng(seed).integers(0, 256, (8, 8, 3), dtype=np.uint8)
    Image.fromarray(pixels).convert(mode).save(path, quality=95)


def write_cub(root: Path, classes: int = 4, *, grayscale: tuple[int, ...] = ()) -> Path:
    """CUB_200_2011/ with class c holding c + 1 images (ids contiguous per class, as official)."""
    base = root / "CUB_200_2011"
    images, labels, split = [], [], []
    image_id = 0
    for c in range(1, classes + 1):
        folder = f"{c:03d}.Bird_{c}"
        for n in range(c + 1):
            image_id += 1
            name = f"{folder}/Bird_{c}_{n + 1:04d}_{790000 + image_id}.jpg"
            mode = "L" if image_id in grayscale else "RGB"
            write_jpeg(base / "images" / name, image_id, mode=mode)
            images.append(f"{image_id} {name}")
            labels.append(f"{image_id} {c}")
            split.append(f"{image_id} {image_id % 2}")  # the classification split: ignored
    (base / "images.txt").write_text("\n".join(images) + "\n")
    (base / "image_class_labels.txt").write_text("\n".join(labels) + "\n")
    (base / "train_test_split.txt").write_text("\n".join(split) + "\n")
    (base / "classes.txt").write_text(
        "".join(f"{c} {c:03d}.Bird_{c}\n" for c in range(1, classes + 1))
    )
    return base


def cars_images(classes: int = 4) -> list[tuple[int, int, bool]]:
    """`(image id, class 1..classes, is test)`: class c has c + 1 images, every third is test."""
    spec, image_id = [], 0
    for c in range(1, classes + 1):
        for _ in range(c + 1):
            image_id += 1
            spec.append((image_id, c, image_id % 3 == 0))
    return spec


def _struct(rows: list[dict[str, np.ndarray]]) -> np.ndarray:
    """A (1, N) MATLAB struct array with the fields of `rows`, as scipy reads the real files."""
    array = np.zeros((1, len(rows)), dtype=[(name, "O") for name in rows[0]])
    for i, row in enumerate(rows):
        array[0, i] = tuple(row.values())
    return array


def _box(image_id: int) -> dict[str, np.ndarray]:
    return {
        f"bbox_{k}": np.array([[v]], dtype=np.uint16)
        for k, v in {"x1": 1, "y1": 1, "x2": 7, "y2": 7 + image_id % 2}.items()
    }


def write_cars_annos(root: Path, classes: int = 4) -> Path:
    """cars_annos.mat + car_ims/000001.jpg ..., fields as in the official file."""
    rows = []
    for image_id, c, test in cars_images(classes):
        name = f"car_ims/{image_id:06d}.jpg"
        write_jpeg(root / name, image_id)
        rows.append(
            {
                "relative_im_path": np.array([name]),
                **_box(image_id),
                "class": np.array([[c]], dtype=np.uint8),
                "test": np.array([[int(test)]], dtype=np.uint8),
            }
        )
    names = np.array([[np.array([f"Car {c}"]) for c in range(1, classes + 1)]], dtype=object)
    savemat(root / "cars_annos.mat", {"annotations": _struct(rows), "class_names": names})
    return root


def write_cars_devkit(root: Path, classes: int = 4, *, test_labels: bool = True) -> Path:
    """devkit/ (cars_meta, cars_train_annos, cars_test_annos[_withlabels]) + cars_{train,test}/."""
    halves: dict[str, list[dict[str, np.ndarray]]] = {"train": [], "test": []}
    for image_id, c, test in cars_images(classes):
        part = "test" if test else "train"
        name = f"{len(halves[part]) + 1:05d}.jpg"
        write_jpeg(root / f"cars_{part}" / name, image_id)
        halves[part].append(
            {**_box(image_id), "class": np.array([[c]], dtype=np.uint8), "fname": np.array([name])}
        )
    devkit = root / "devkit"
    devkit.mkdir(parents=True, exist_ok=True)
    names = np.array([[np.array([f"Car {c}"]) for c in range(1, classes + 1)]], dtype=object)
    savemat(devkit / "cars_meta.mat", {"class_names": names})
    savemat(devkit / "cars_train_annos.mat", {"annotations": _struct(halves["train"])})
    unlabelled = [{k: v for k, v in row.items() if k != "class"} for row in halves["test"]]
    savemat(devkit / "cars_test_annos.mat", {"annotations": _struct(unlabelled)})
    if test_labels:
        savemat(root / "cars_test_annos_withlabels.mat", {"annotations": _struct(halves["test"])})
    return root


def write_sop(root: Path) -> Path:
    """Stanford_Online_Products/: products 1–3 train, 4–6 test, product p with p + 1 images."""
    base = root / "Stanford_Online_Products"
    lists: dict[str, list[str]] = {"train": [], "test": []}
    image_id = 0
    for product in range(1, 7):
        part = "train" if product <= 3 else "test"
        category = ["bicycle", "chair"][product % 2]
        for n in range(product + 1):
            image_id += 1
            name = f"{category}_final/{111085122870 + product}_{n}.JPG"
            write_jpeg(base / name, image_id, mode="L" if image_id == 2 else "RGB")
            lists[part].append(f"{len(lists[part]) + 1} {product} {product % 2 + 1} {name}")
    for part, lines in lists.items():
        text = "image_id class_id super_class_id path\n" + "\n".join(lines) + "\n"
        (base / f"Ebay_{part}.txt").write_text(text)
    return base


MARKET = {  # folder: [(person id, camera)]; -1 junk, 0 distractor
    "bounding_box_train": [(2, 1), (2, 2), (7, 3), (7, 1), (7, 5), (10, 6)],
    "query": [(1, 1), (3, 2), (3, 4)],
    "bounding_box_test": [(1, 2), (1, 1), (3, 5), (0, 3), (0, 6), (-1, 1), (-1, 4), (3, 2)],
}


def write_market(root: Path) -> Path:
    """Market-1501-v15.09.15/ with junk and distractors in the gallery and a Thumbs.db."""
    base = root / "Market-1501-v15.09.15"
    for i, (folder, boxes) in enumerate(MARKET.items()):
        for j, (pid, cam) in enumerate(boxes):
            person = "-1" if pid == -1 else f"{pid:04d}"
            write_jpeg(base / folder / f"{person}_c{cam}s1_{1000 + j:06d}_0{i}.jpg", 100 * i + j)
        (base / folder / "Thumbs.db").write_bytes(b"\0")
    return base


MSMT17 = {  # list: [(person id, camera 1..15)]
    "list_train.txt": [(0, 1), (0, 12), (1, 3), (2, 15)],
    "list_val.txt": [(1, 4), (3, 2)],
    "list_query.txt": [(0, 1), (1, 14)],
    "list_gallery.txt": [(0, 2), (1, 14), (1, 9)],
}


def write_msmt17(root: Path, version: str = "V1", *, images: bool = True) -> Path:
    """MSMT17_V1/ (train/, test/) or MSMT17_V2/ (mask_train_v2/, mask_test_v2/) + list_*.txt."""
    base = root / f"MSMT17_{version}"
    train_dir, test_dir = (
        ("train", "test") if version == "V1" else ("mask_train_v2", "mask_test_v2")
    )
    base.mkdir(parents=True)
    for i, (name, entries) in enumerate(MSMT17.items()):
        folder = train_dir if name in ("list_train.txt", "list_val.txt") else test_dir
        lines = []
        for j, (pid, cam) in enumerate(entries):
            relative = f"{pid:04d}/{pid:04d}_{j:03d}_{cam:02d}_0303morning_{i:04d}_{j % 3}.jpg"
            if images:
                write_jpeg(base / folder / relative, 10 * i + j)
            lines.append(f"{relative} {pid}")
        (base / name).write_text("\n".join(lines) + "\n")
    return base
