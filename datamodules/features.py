"""Frozen-backbone track: cached features of a frozen network in place of images, any dataset.

Entries (`datamodules.feature_cache`) are per split and view, keyed by everything that changes
the features (the description built in `_features`; docs/training/frozen.md lists it). They
cover the whole training split, before a validation split or a fold is carved out, so every
`seed`, `val_classes` and fold shares them.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from functools import cached_property
from inspect import signature
from pathlib import Path
from typing import Any, ClassVar, cast

import PIL
import torch
import torchvision
from pytorch_lightning.utilities import rank_zero_info
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset

from core.devices import float32_modes, gpu_name
from datamodules.base import RetrievalDataModule, Split, Splits
from datamodules.feature_cache import FeatureCache, content_key, default_cache_dir, items_digest
from datamodules.feature_views import (
    FeatureDataset,
    SeededView,
    ViewBatchSampler,
    extract_features,
    whole_batch,
)
from samplers import PKSampler

CACHE_FORMAT = 1  # bump when the way features are computed changes without changing the key
# The datasets each Lightning stage needs; `setup()` without a stage builds them all.
STAGE_PARTS = {"fit": ("train", "val"), "validate": ("val",), "test": ("test",)}
STAGE_PARTS["predict"] = ("test",)


@dataclass(frozen=True)
class CacheEvent:
    """One cache entry a DataModule used: which split and view, and whether it was computed."""

    split: str
    view: int | None
    key: str
    computed: bool
    seconds: float


class CachedFeatureDataModule(RetrievalDataModule):
    """The images of `images` as features of a frozen `extractor`, cached on disk (frozen track).

    Splits, protocol, Recall@K, the validation split and the P-K sampler settings are those of
    `images`. Loaders yield `(features [b, C], labels, cameras)` in the order of the image
    loaders; `setup` computes (or reads) the features of the splits its stage needs.

    Args:
        images: the image DataModule to embed; its `num_workers` and `eval_batch_size` serve the
            extraction.
        extractor: frozen network, [0, 1] RGB images [B, 3, H, W] -> features [B, C], e.g.
            `benchmark.training.embedders.BackboneFeatures`; it runs in eval mode without grad.
        views: augmented views cached per training image (the training transform of `images`
            seeded from `(aug_seed, view, item)`); each epoch shows one per sample, chosen from
            `(seed, epoch, item)`. Data without training augmentation (synthetic) needs 1.
        aug_seed: seed of those augmentations; separate from `images.seed` so that runs with
            different seeds share the cache.
        cache_dir: cache folder; default `$CIRCLEBENCH_CACHE`, else
            `~/.cache/circlebench/features`.
    """

    track: ClassVar[str] = "frozen"
    unsaved_arguments: ClassVar[tuple[str, ...]] = ("images", "extractor")

    def __init__(
        self,
        images: RetrievalDataModule,
        extractor: nn.Module,
        views: int = 1,
        aug_seed: int = 0,
        cache_dir: str | Path | None = None,
    ) -> None:
        if isinstance(views, bool) or not isinstance(views, int) or views < 1:
            raise ValueError(f"CachedFeatureDataModule: views must be an int >= 1, got {views!r}")
        # every other argument of the image DataModule (attributes of the same names), given
        # once; features are in memory: no workers
        shared = set(signature(RetrievalDataModule.__init__).parameters) - {"self", "root"}
        settings = {name: getattr(images, name) for name in shared} | {"num_workers": 0}
        super().__init__(images.root, **settings)
        self.images, self.extractor, self.views, self.aug_seed = images, extractor, views, aug_seed
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir is not None else None
        self.dataset_name = images.dataset_name  # type: ignore[misc]
        self.protocol = images.protocol  # type: ignore[misc]
        self.default_recall_ks = images.default_recall_ks  # type: ignore[misc]
        self.cache_events: list[CacheEvent] = []
        self._built: set[str] = set()
        self._loaded: dict[str, Tensor] = {}  # key -> features [N, C] read by this DataModule

    @property
    def cache(self) -> FeatureCache:
        """The cache in `cache_dir`, else `$CIRCLEBENCH_CACHE`, else the default folder."""
        return FeatureCache(self.cache_dir if self.cache_dir is not None else default_cache_dir())

    def verify(self) -> None:
        self.images.verify()

    def load_splits(self) -> Splits:
        return self.images.load_splits()

    def load_train(self) -> Split:
        return self.images.load_train()

    def splits(self) -> tuple[Split, Splits | None, Splits | None]:
        return self.images.splits()

    def full_train_split(self) -> Split:
        return self.images.full_train_split()

    def setup(self, stage: str | None = None) -> None:
        for part in STAGE_PARTS.get(stage, ()) if stage else ("train", "val", "test"):
            if part not in self._built:
                self._build(part)
                self._built.add(part)

    def train_dataloader(self) -> DataLoader:
        """P-K batches `(features [P·K, C], labels, cameras)`, one view per sample and epoch."""
        loader = super().train_dataloader()  # the P-K sampler of the image DataModule's settings
        batches = cast(PKSampler, loader.batch_sampler)
        dataset = cast(FeatureDataset, loader.dataset)
        views = ViewBatchSampler(
            batches, views=dataset.views, num_items=len(dataset.split), seed=self.seed
        )
        return DataLoader(dataset, batch_sampler=views, collate_fn=whole_batch)

    def _loader(self, dataset: Dataset, **kwargs: Any) -> DataLoader:
        return super()._loader(dataset, collate_fn=whole_batch, **kwargs)  # batches from a gather

    def _build(self, part: str) -> None:
        train, val, test = self.splits()
        full = self.full_train_split()  # one cache for every seed, val_classes and fold
        if part == "train":
            if self._augmented(full):
                views = torch.stack([self._features(full, "train", v) for v in range(self.views)])
            else:  # every view would be the same: one entry, shared with validation
                views = self._features(full, "train", None)[None]
                if self.views > 1:
                    rank_zero_info(
                        f"feature cache: {self.dataset_name} has no training augmentation, so "
                        f"its {self.views} views are one"
                    )
            self._datasets["train"] = FeatureDataset(views[:, _rows(full, train)], train)
        elif part == "val" and val is not None:
            features = self._features(full, "train", None)  # [N, C], the evaluation transform
            for side, split in val.test_sets():
                rows = features[_rows(full, split)]
                self._datasets[f"val_{side}"] = FeatureDataset(rows[None], split)
        elif part == "test" and test is not None:  # None while tuning: never extracted
            for side, split in test.test_sets():
                features = self._features(split, side, None)
                self._datasets[f"test_{side}"] = FeatureDataset(features[None], split)

    def _augmented(self, split: Split) -> bool:
        """Whether the training images differ from the evaluation ones (their reprs differ)."""
        train, test = (self.images.make_dataset(split, train=t) for t in (True, False))
        return dataset_description(train) != dataset_description(test)

    def _features(self, split: Split, role: str, view: int | None) -> Tensor:
        """Features [N, C] of `split` (training view `view`, or the evaluation transform)."""
        dataset = self.images.make_dataset(split, train=view is not None)
        description = {
            "format": CACHE_FORMAT,
            "dataset": self.images.dataset_name,
            "datamodule": _qualname(self.images),
            "split": role,
            "items": len(split),
            "items_sha256": items_digest(split.items, split.labels, split.cameras),
            "images": dataset_description(dataset),
            "image_size": self.images.image_size,
            "view": view,
            "aug_seed": None if view is None else self.aug_seed,
            "extractor": self._extractor_key,
            "batch_size": self.images.eval_batch_size,  # oneDNN's kernels follow the batch
            "device": where_features_run(self._device()),
            "versions": {
                "torch": torch.__version__,
                "torchvision": torchvision.__version__,
                "PIL": PIL.__version__,
            },
        }
        if view is not None:
            dataset = SeededView(dataset, view=view, seed=self.aug_seed)
        key = content_key(description)
        if key in self._loaded:  # the training and validation sets share an entry
            return self._loaded[key]
        start = time.perf_counter()
        array, computed = self.cache.load_or_compute(
            key,
            lambda: extract_features(
                self.extractor,
                dataset,
                batch_size=self.images.eval_batch_size,
                num_workers=self.images.num_workers,
                device=self._device(),
            ),
            description,
        )
        seconds = time.perf_counter() - start
        self.cache_events.append(CacheEvent(role, view, key, computed, seconds))
        rank_zero_info(
            f"feature cache: {'computed' if computed else 'read'} {self.dataset_name} {role}"
            f"{'' if view is None else f' view {view}'} ({len(split)} images, {seconds:.1f} s) "
            f"{self.cache.path(key)}"
        )
        self._loaded[key] = torch.from_numpy(array)
        return self._loaded[key]

    @cached_property
    def _extractor_key(self) -> dict[str, str]:
        """The extractor's part of the key; its parameters are hashed once per DataModule."""
        return {
            "class": _qualname(self.extractor),
            "summary": self.extractor.extra_repr(),
            "repr_sha256": hashlib.sha256(repr(self.extractor).encode()).hexdigest(),
            "weights_sha256": module_digest(self.extractor),
        }

    def _device(self) -> torch.device:
        """Where the extractor runs: the Trainer's device when attached, else the CPU."""
        trainer = self.trainer
        return trainer.strategy.root_device if trainer is not None else torch.device("cpu")


def where_features_run(device: torch.device) -> dict[str, str]:
    """The device's part of the key: a GPU, TF32 products or another CPU thread count give
    slightly other features."""
    threads = str(torch.get_num_threads()) if device.type == "cpu" else ""
    gpu, float32 = gpu_name(device), float32_modes(device.type)
    return {"type": device.type, "gpu": gpu, "float32": float32, "threads": threads}


def module_digest(module: nn.Module) -> str:
    """SHA-256 of every parameter and buffer of `module`: names, dtypes, shapes and values."""
    digest = hashlib.sha256()
    tensors = sorted([*module.named_parameters(), *module.named_buffers()], key=lambda t: t[0])
    for name, tensor in tensors:
        flat = tensor.detach().cpu().contiguous().reshape(-1)
        digest.update(f"{name}:{flat.dtype}:{tuple(tensor.shape)}\n".encode())
        digest.update(flat.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def dataset_description(dataset: Dataset) -> str:
    """`repr(dataset)`, which must name everything its images depend on besides the items."""
    if type(dataset).__repr__ is object.__repr__:
        raise TypeError(
            f"{type(dataset).__name__} has no __repr__: the feature cache keys entries by what "
            "the images depend on; give it a __repr__ naming its transform and parameters"
        )
    return repr(dataset)


def _rows(full: Split, subset: Split) -> list[int]:
    """Positions in `full` of the items of `subset` (items identify images within a dataset)."""
    position = {item: row for row, item in enumerate(full.items)}
    if len(position) != len(full):
        raise ValueError(
            "CachedFeatureDataModule: the training split lists an item twice; features are "
            "stored per item, so every item must be unique"
        )
    return [position[item] for item in subset.items]


def _qualname(obj: object) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"
