"""Base LightningDataModule: P-K training batches, (image, label, camera) evaluation sets.

Every DataModule yields images as float tensors in [0, 1], RGB, [3, H, W]. The embedder owns
its input normalisation (BN-Inception's BGR 0–255 mean subtraction, timm's mean/std), so one
DataModule serves every backbone and the backbone is named once, in the model config.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytorch_lightning as pl
import torch
from PIL import Image, UnidentifiedImageError
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from benchmark.evaluation.sets import RetrievalProtocol
from datamodules.transforms import fine_grained_transform, reid_transform
from samplers import PKSampler, SamplerMode

ImageSize = int | tuple[int, int]


@dataclass(frozen=True)
class Split:
    """One set of images: `items[i]` is the image, `labels[i]` its class, `cameras[i]` its camera.

    `items` are file paths for datasets on disk and integer seeds for the synthetic one. Cameras
    are -1 where a dataset has none. Labels are the dataset's own class or person ids as its
    files give them; `RetrievalDataModule.splits()` maps the training split's to 0..C-1.
    """

    items: Sequence[str | int]
    labels: Sequence[int]
    cameras: Sequence[int]

    def __post_init__(self) -> None:
        if not len(self.items) == len(self.labels) == len(self.cameras):
            raise ValueError(
                f"Split: items, labels and cameras differ in length "
                f"({len(self.items)}, {len(self.labels)}, {len(self.cameras)})"
            )

    def __len__(self) -> int:
        return len(self.items)

    def subset(self, indices: Sequence[int]) -> Split:
        """The items at `indices`, in that order."""
        return Split(
            [self.items[i] for i in indices],
            [self.labels[i] for i in indices],
            [self.cameras[i] for i in indices],
        )


@dataclass(frozen=True)
class Splits:
    """Training set and test sets; `gallery` is None under the `same_set` protocol.

    From `load_splits()` every split carries the dataset's own ids; from `carve_validation()`
    and `RetrievalDataModule.splits()` the training split is relabelled 0..C-1.
    """

    train: Split
    query: Split
    gallery: Split | None


def relabel(split: Split) -> Split:
    """The split with its labels mapped to 0..C-1 in ascending order of the original labels."""
    new = {c: i for i, c in enumerate(sorted(set(split.labels)))}
    return Split(split.items, [new[c] for c in split.labels], split.cameras)


def query_gallery_split(split: Split, *, seed: int) -> tuple[Split, Split]:
    """Query and gallery of a re-ID evaluation set built from one labelled, camera-tagged split.

    For each identity seen by two or more cameras, one image per camera (chosen by `seed`) is a
    query; all other images are gallery. Identities seen by a single camera would have no valid
    match (same identity and camera is excluded), so they go wholly to the gallery. Both keep the
    split's order.
    """
    gen = torch.Generator().manual_seed(seed)
    first: dict[tuple[int, int], int] = {}  # (identity, camera) -> its query
    for i in torch.randperm(len(split), generator=gen).tolist():
        first.setdefault((split.labels[i], split.cameras[i]), i)
    cameras_per_id: dict[int, int] = {}
    for label, _ in first:
        cameras_per_id[label] = cameras_per_id.get(label, 0) + 1
    query = sorted(i for (label, _), i in first.items() if cameras_per_id[label] > 1)
    chosen = set(query)
    return split.subset(query), split.subset([i for i in range(len(split)) if i not in chosen])


def carve_validation(
    train: Split, num_classes: int, *, seed: int, protocol: RetrievalProtocol
) -> Splits:
    """Move `num_classes` random training classes (chosen by `seed`) into a validation split.

    Returns `Splits` whose `train` is the remaining training split (relabelled 0..C-1) and whose
    `query` / `gallery` are the class-disjoint validation sets. Under `same_set` all validation
    images form the query (which is also the gallery); under `query_gallery` they are divided by
    `query_gallery_split`.
    """
    classes = sorted(set(train.labels))
    if not 0 < num_classes < len(classes):
        raise ValueError(
            f"val_classes={num_classes} must be between 1 and the number of training classes "
            f"minus one ({len(classes) - 1}); use val_classes=0 for no validation split"
        )
    perm = torch.randperm(len(classes), generator=torch.Generator().manual_seed(seed)).tolist()
    held = {classes[i] for i in perm[:num_classes]}
    val = train.subset([i for i, c in enumerate(train.labels) if c in held])
    remaining = relabel(train.subset([i for i, c in enumerate(train.labels) if c not in held]))
    if protocol == "same_set":
        return Splits(remaining, val, None)
    return Splits(remaining, *query_gallery_split(val, seed=seed))


class ImageFileDataset(Dataset):
    """Items `(image [3, H, W] float in [0, 1], label, camera)` read from image files with PIL.

    Images are converted to RGB (some datasets hold grayscale or CMYK files). A missing,
    truncated or corrupt file raises an error naming the file instead of a bare PIL trace.
    """

    def __init__(self, split: Split, transform: Callable[[Image.Image], Tensor]) -> None:
        self.split, self.transform = split, transform

    def __len__(self) -> int:
        return len(self.split)

    def __repr__(self) -> str:
        """What turns a file into pixels (the feature cache keys its entries with it)."""
        return f"ImageFileDataset(transform={self.transform!r})"

    def __getitem__(self, i: int) -> tuple[Tensor, int, int]:
        path = Path(str(self.split.items[i]))
        try:
            with Image.open(path) as img:
                image = img.convert("RGB")  # convert() decodes the whole file: truncation shows
        except FileNotFoundError as err:
            raise FileNotFoundError(
                f"image file missing: {path}; re-extract the dataset or run "
                "`circlebench data verify <dataset> --root DIR` to list missing files"
            ) from err
        except (UnidentifiedImageError, OSError, SyntaxError) as err:
            raise OSError(
                f"cannot decode image {path} ({err}); the file is corrupt or truncated: "
                "re-extract it from the original archive"
            ) from err
        return self.transform(image), self.split.labels[i], self.split.cameras[i]


class RetrievalDataModule(pl.LightningDataModule):
    """Common behaviour; subclasses declare their protocol and parse their files.

    Subclasses set `dataset_name`, `protocol` and `default_recall_ks`, and implement
    `verify()` (cheap file checks with actionable errors) and `load_splits()`; `make_dataset()`
    defaults to image files with the protocol's transforms (`fine_grained_transform` for
    `same_set`, `reid_transform` for `query_gallery`).

    Training batches come from `PKSampler`, which shards itself across DDP ranks using the
    attached Trainer's `world_size` and `global_rank`: the Trainer must run with
    `use_distributed_sampler=False` (set in `experiments/base.yaml`).

    Args:
        root: dataset folder (None for datasets without files).
        p: classes per training batch.
        k: images per class in a training batch.
        image_size: output size, an int (square) or `(H, W)`.
        num_workers: DataLoader worker processes (persistent when > 0).
        eval_batch_size: batch size of the evaluation loaders.
        val_classes: number of training classes held out as a class-disjoint validation split
            (chosen by `seed`); 0 for none.
        seed: seed of the P-K sampler and of the validation split. None (the default): under
            `circlebench`, the run's `seed_everything`, so that runs with different seeds see
            different batches (and validation classes) as well as different initialisations;
            0 elsewhere.
        batches_per_epoch: training batches per epoch and rank; default one pass.
        sampler_mode: `PKSampler`'s `mode`: `coverage` (every training image once per epoch
            where class sizes allow) or `independent` (each batch drawn afresh).
    """

    dataset_name: ClassVar[str]
    protocol: ClassVar[RetrievalProtocol]
    default_recall_ks: ClassVar[tuple[int, ...]]
    # What the model trains on: images through a backbone it fine-tunes ("end-to-end"), or
    # cached features of a frozen one ("frozen", `datamodules.CachedFeatureDataModule`).
    track: ClassVar[str] = "end-to-end"
    # Constructor arguments that are objects, not settings (a wrapped DataModule, a network):
    # kept out of `hparams`, which every checkpoint pickles.
    unsaved_arguments: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        root: str | Path | None,
        p: int = 16,
        k: int = 5,
        image_size: ImageSize = 224,
        num_workers: int = 4,
        eval_batch_size: int = 64,
        val_classes: int = 0,
        seed: int | None = None,
        batches_per_epoch: int | None = None,
        sampler_mode: SamplerMode = "coverage",
    ) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=list(self.unsaved_arguments))
        self.root = Path(root) if root is not None else None
        self.p, self.k, self.image_size = p, k, image_size
        self.num_workers, self.eval_batch_size = num_workers, eval_batch_size
        self.val_classes, self.batches_per_epoch = val_classes, batches_per_epoch
        self.seed = 0 if seed is None else seed
        self.sampler_mode = sampler_mode
        self._splits: tuple[Split, Splits | None, Splits] | None = None
        self._datasets: dict[str, Dataset] = {}

    @property
    def root_dir(self) -> Path:
        """The dataset folder; a clear error for a dataset on disk constructed without one."""
        if self.root is None:
            raise ValueError(
                f"{type(self).__name__}: root is None; pass the dataset folder, "
                "e.g. --data.init_args.root=<dir> "
                "(`circlebench data info <dataset>` shows the expected layout)"
            )
        return self.root

    @abstractmethod
    def verify(self) -> None:
        """Raise FileNotFoundError/ValueError naming the dataset, path, layout and source."""

    @abstractmethod
    def load_splits(self) -> Splits:
        """Parse the metadata into the protocol's train / query / gallery splits."""

    def make_dataset(self, split: Split, *, train: bool) -> Dataset:
        """A dataset whose items are `(image [3, H, W] float in [0, 1], label, camera)`."""
        if self.protocol == "query_gallery":
            return ImageFileDataset(split, reid_transform(self.image_size, train=train))
        return ImageFileDataset(split, fine_grained_transform(self.image_size, train=train))

    def prepare_data(self) -> None:
        self.verify()

    def splits(self) -> tuple[Split, Splits | None, Splits]:
        """`(train, validation or None, test)`: train relabelled 0..C-1, validation carved out."""
        if self._splits is None:
            test = self.load_splits()
            train, val = relabel(test.train), None
            if self.val_classes:
                val = carve_validation(
                    test.train, self.val_classes, seed=self.seed, protocol=self.protocol
                )
                train = val.train
            self._splits = (train, val, test)
        return self._splits

    @property
    def num_classes(self) -> int:
        """Training classes (after carving the validation split); reads metadata if needed."""
        return len(set(self.splits()[0].labels))

    def setup(self, stage: str | None = None) -> None:
        if self._datasets:
            return
        train, val, test = self.splits()
        self._datasets["train"] = self.make_dataset(train, train=True)
        for name, splits in (("val", val), ("test", test)):
            if splits is not None:
                self._datasets[f"{name}_query"] = self.make_dataset(splits.query, train=False)
                if splits.gallery is not None:
                    self._datasets[f"{name}_gallery"] = self.make_dataset(
                        splits.gallery, train=False
                    )

    def train_dataloader(self) -> DataLoader:
        """P-K batches `(images [P·K, 3, H, W], labels [P·K], cameras [P·K])`."""
        # under a Trainer the world comes from it (also before torch.distributed is initialised)
        trainer = self.trainer
        sampler = PKSampler(
            self.splits()[0].labels,
            self.p,
            self.k,
            self.seed,
            mode=self.sampler_mode,
            num_replicas=trainer.world_size if trainer is not None else None,
            rank=trainer.global_rank if trainer is not None else None,
            batches_per_epoch=self.batches_per_epoch,
        )
        return DataLoader(
            self._dataset("train"),
            batch_sampler=sampler,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            pin_memory=self._pin_memory(),
        )

    def _pin_memory(self) -> bool:
        """Page-locked batches, which only speed up copies to a GPU: when the Trainer runs on
        CUDA (not merely where CUDA is visible: a CPU run would pin for nothing)."""
        trainer = self.trainer
        return trainer is not None and trainer.strategy.root_device.type == "cuda"

    def val_dataloader(self) -> list[DataLoader]:
        """`[query]` (same_set) or `[query, gallery]` (query_gallery); [] without val_classes."""
        return self._eval_loaders("val")

    def test_dataloader(self) -> list[DataLoader]:
        """`[query]` (same_set, the query is also the gallery) or `[query, gallery]`."""
        return self._eval_loaders("test")

    def _dataset(self, name: str) -> Dataset:
        self.setup("fit")
        return self._datasets[name]

    def _eval_loaders(self, prefix: str) -> list[DataLoader]:
        self.setup(
            "validate" if prefix == "val" else "test"
        )  # a stage: see CachedFeatureDataModule
        names = [f"{prefix}_query", f"{prefix}_gallery"]
        return [
            DataLoader(
                self._datasets[name],
                batch_size=self.eval_batch_size,
                shuffle=False,
                num_workers=self.num_workers,
                persistent_workers=self.num_workers > 0,
                pin_memory=self._pin_memory(),
            )
            for name in names
            if name in self._datasets
        ]
