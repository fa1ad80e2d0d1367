"""Base LightningDataModule: P-K training batches, (image, label, camera) evaluation sets.

Every DataModule yields images as float tensors in [0, 1], RGB, [3, H, W]. The embedder owns
its input normalisation (BN-Inception's BGR 0–255 mean subtraction, timm's mean/std), so one
DataModule serves every backbone and the backbone is named once, in the model config.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, cast

import pytorch_lightning as pl
from PIL import Image, UnidentifiedImageError
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from core.protocols import RetrievalProtocol
from datamodules._files import DatasetInfo, check_images_present
from datamodules.splits import Split, Splits, carve_validation, fold_split, relabel
from datamodules.transforms import fine_grained_transform, reid_transform
from samplers import PKSampler, SamplerMode

ImageSize = int | tuple[int, int]


class ImageFileDataset(Dataset):
    """Items `(image [3, H, W] float in [0, 1], label, camera)` from image files, converted to
    RGB; a missing, truncated or corrupt file raises an error naming it."""

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

    Subclasses set `dataset_name`, `protocol`, `default_recall_ks` and, for a real dataset,
    `info`, and implement `load_splits()` and `load_train()` (the training split alone: while
    tuning the test split is never built). `verify()` and `make_dataset()` default to image files
    (the protocol's transforms). `PKSampler` shards the training batches across DDP ranks by the
    Trainer's `world_size` and `global_rank`, so the Trainer runs with
    `use_distributed_sampler=False` (set in `experiments/base.yaml`).

    Args:
        root: dataset folder (None for datasets without files).
        p: classes per training batch (`PKSampler`).
        k: images per class in a training batch.
        image_size: output size, an int (square) or `(H, W)`.
        num_workers: DataLoader worker processes (persistent when > 0).
        eval_batch_size: batch size of the evaluation loaders.
        val_classes: training classes held out (chosen by `seed`) as a class-disjoint validation
            split; 0 for none.
        seed: seed of the P-K sampler and of the validation split; None: the run's
            `seed_everything` under `circlebench` (other seeds, other batches), else 0.
        batches_per_epoch: training batches per epoch and rank; default one pass.
        sampler_mode: `PKSampler`'s `mode`: `coverage` (every training image once per epoch
            where class sizes allow) or `independent` (each batch drawn afresh).
        folds: tuning mode when >= 2 (`circlebench tune` sets it): the training classes are
            dealt into `folds` class-disjoint folds, fold `fold` validates, the others train,
            and the test split is never read; 0 for a normal run.
        fold: the held-out fold, 0..folds-1.
    """

    dataset_name: ClassVar[str]
    protocol: ClassVar[RetrievalProtocol]
    default_recall_ks: ClassVar[tuple[int, ...]]
    info: ClassVar[DatasetInfo | None] = None  # a real dataset's source, layout, official counts
    # "end-to-end" (images, a fine-tuned backbone) or "frozen" (`CachedFeatureDataModule`)
    track: ClassVar[str] = "end-to-end"
    # arguments that are objects, not settings: kept out of the pickled `hparams`
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
        folds: int = 0,
        fold: int = 0,
    ) -> None:
        super().__init__()
        if folds and val_classes:
            raise ValueError(
                f"{type(self).__name__}: val_classes={val_classes} and folds={folds} both carve a "
                "validation split; use folds (tuning) or val_classes, not both"
            )
        self.save_hyperparameters(ignore=list(self.unsaved_arguments))
        self.root = Path(root) if root is not None else None
        self.p, self.k, self.image_size = p, k, image_size
        self.num_workers, self.eval_batch_size = num_workers, eval_batch_size
        self.val_classes, self.batches_per_epoch = val_classes, batches_per_epoch
        self.seed = 0 if seed is None else seed
        self.sampler_mode = sampler_mode
        self.folds, self.fold = folds, fold
        self._splits: tuple[Split, Splits | None, Splits | None] | None = None
        self._full_train: Split | None = None
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

    def verify(self) -> None:
        """Raise FileNotFoundError/ValueError naming the dataset, path, layout and source: by
        default, where `info` is set, for metadata or first images missing of the splits this
        run reads (the training split alone while tuning)."""
        if self.info is not None:
            on_disk = self.load_train() if self.folds else self.load_splits()
            check_images_present(self.info, self.root_dir, on_disk)

    @property
    def official_counts(self) -> dict[str, tuple[int, int]]:
        """Official `(images, classes)` per split under these arguments; {} where none apply
        (no official counts, or a class split other than the official one)."""
        if self.info is None:
            return {}
        official = self.info.counts["train"][1]
        return self.info.counts if getattr(self, "train_classes", official) == official else {}

    @abstractmethod
    def load_splits(self) -> Splits:
        """Parse the metadata into the protocol's train / query / gallery splits."""

    def load_train(self) -> Split:
        """`load_splits().train` (the dataset's own labels), which tuning reads; our datasets
        override it so that no test file is listed or checked while tuning."""
        return self.load_splits().train

    def make_dataset(self, split: Split, *, train: bool) -> Dataset:
        """A dataset whose items are `(image [3, H, W] float in [0, 1], label, camera)`."""
        reid = self.protocol == "query_gallery"
        transform = reid_transform if reid else fine_grained_transform
        return ImageFileDataset(split, transform(self.image_size, train=train))

    def prepare_data(self) -> None:
        self.verify()

    def splits(self) -> tuple[Split, Splits | None, Splits | None]:
        """`(train relabelled 0..C-1, validation or None, test)`; while tuning the validation
        split is fold `fold` and the test split is None (neither built nor read)."""
        if self._splits is None:
            if self.folds:
                full = self.load_train()
                fold = fold_split(full, self.folds, self.fold, protocol=self.protocol)
                self._full_train, self._splits = full, (fold.train, fold, None)
                return self._splits
            test = self.load_splits()
            train, val = relabel(test.train), None
            if self.val_classes:
                val = carve_validation(
                    test.train, self.val_classes, seed=self.seed, protocol=self.protocol
                )
                train = val.train
            self._full_train, self._splits = test.train, (train, val, test)
        return self._splits

    def full_train_split(self) -> Split:
        """Every training image with its own label, before a validation split or fold is carved
        out (the feature cache's unit)."""
        self.splits()
        return cast(Split, self._full_train)  # set together with _splits

    @property
    def num_classes(self) -> int:
        """Training classes (after carving the validation split); reads metadata if needed."""
        return len(set(self.splits()[0].labels))

    def setup(self, stage: str | None = None) -> None:
        if self._datasets:
            return
        train, val, test = self.splits()
        self._datasets["train"] = self.make_dataset(train, train=True)
        for prefix, splits in (("val", val), ("test", test)):
            for part, split in splits.test_sets() if splits is not None else []:
                self._datasets[f"{prefix}_{part}"] = self.make_dataset(split, train=False)

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
        self.setup("fit")
        return self._loader(self._datasets["train"], batch_sampler=sampler)

    def _loader(self, dataset: Dataset, **kwargs: Any) -> DataLoader:
        """A loader with `num_workers` workers, page-locked when the Trainer runs on CUDA (which
        alone gains from it: not merely where CUDA is visible)."""
        trainer = self.trainer
        return DataLoader(
            dataset,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            pin_memory=trainer is not None and trainer.strategy.root_device.type == "cuda",
            **kwargs,
        )

    def val_dataloader(self) -> list[DataLoader]:
        """`[query]` (same_set) or `[query, gallery]` (query_gallery); [] without val_classes."""
        return self._eval_loaders("val")

    def test_dataloader(self) -> list[DataLoader]:
        """`[query]` (same_set, the query is also the gallery) or `[query, gallery]`."""
        if self.folds:
            raise ValueError(
                f"{type(self).__name__} is a tuning fold (folds={self.folds}, fold={self.fold}): "
                "it has no test split by design, so that tuning never sees the test classes; "
                "evaluate the test set in a run without folds (fit with --test_after_fit false "
                "while tuning)"
            )
        return self._eval_loaders("test")

    def _eval_loaders(self, prefix: str) -> list[DataLoader]:
        self.setup("validate" if prefix == "val" else "test")  # CachedFeatureDataModule's stages
        return [
            self._loader(self._datasets[name], batch_size=self.eval_batch_size, shuffle=False)
            for name in (f"{prefix}_query", f"{prefix}_gallery")
            if name in self._datasets
        ]
