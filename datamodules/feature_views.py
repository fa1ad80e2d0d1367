"""Features as datasets: seeded augmented views of images, their extraction, views per epoch."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset, Sampler

from core.devices import usable_cores
from datamodules.base import Split
from samplers import PKSampler
from samplers.pk import mixed_seed


class FeatureDataset(Dataset):
    """Items `(feature [C] float32, label, camera)`; index `v * N + i` is view `v` of item `i`."""

    def __init__(self, features: Tensor, split: Split) -> None:
        if features.ndim != 3 or features.shape[1] != len(split):
            raise ValueError(
                f"FeatureDataset: features must be [views, {len(split)}, C], "
                f"got {tuple(features.shape)}"
            )
        self.features, self.split = features, split  # [V, N, C]
        self._labels = torch.as_tensor(list(split.labels), dtype=torch.int64)  # [N]
        self._cameras = torch.as_tensor(list(split.cameras), dtype=torch.int64)  # [N]

    @property
    def views(self) -> int:
        """Views stored per item (1 for evaluation sets)."""
        return int(self.features.shape[0])

    def __len__(self) -> int:
        return self.features.shape[0] * self.features.shape[1]

    def __getitem__(self, index: int) -> tuple[Tensor, int, int]:
        view, i = divmod(index, self.features.shape[1])
        return self.features[view, i], self.split.labels[i], self.split.cameras[i]

    def __getitems__(self, indices: list[int]) -> tuple[Tensor, Tensor, Tensor]:
        """`(features [B, C], labels [B], cameras [B])`: the default collation of the items at
        `indices` from one gather (docs/benchmarks/training.md), for `collate_fn=whole_batch`."""
        index = torch.as_tensor(indices, dtype=torch.int64)
        view, i = index // self.features.shape[1], index % self.features.shape[1]
        return self.features[view, i], self._labels[i], self._cameras[i]


def whole_batch(batch: Any) -> Any:
    """The collation of `FeatureDataset`'s batches, which arrive collated."""
    return batch


class ViewBatchSampler(Sampler[list[int]]):
    """The P-K batches of `batches` with each item `i` replaced by `v * num_items + i`, the view
    `v` of each item drawn per epoch from `(seed, epoch)` (the P-K sampler's epoch)."""

    def __init__(self, batches: PKSampler, *, views: int, num_items: int, seed: int) -> None:
        self.batches, self.views, self.num_items, self.seed = batches, views, num_items, seed

    @property
    def sampler(self) -> PKSampler:
        """The P-K sampler: Lightning calls `set_epoch` on `dataloader.batch_sampler.sampler`."""
        return self.batches

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[list[int]]:
        chosen = epoch_views(self.seed, self.batches.epoch, self.num_items, self.views)  # [N]
        offset = (chosen * self.num_items).tolist()
        for batch in self.batches:
            yield [offset[i] + i for i in batch]


def epoch_views(seed: int, epoch: int, num_items: int, views: int) -> Tensor:
    """The view (0..views-1) of each of `num_items` items in `epoch`: [N] int64."""
    gen = torch.Generator().manual_seed(mixed_seed(seed, epoch, 1))
    return torch.randint(views, (num_items,), generator=gen)


class SeededView(Dataset):
    """Image `i` of `dataset` with the random draws of its transform seeded from `(seed, view, i)`.

    torchvision's transforms draw from torch's global generator and take none of their own, so
    each item forks that generator, seeds it, and restores it afterwards: views are
    reproducible in any worker and order, and the caller's random state is untouched.
    """

    def __init__(self, dataset: Dataset, *, view: int, seed: int) -> None:
        self.dataset, self.view, self.seed = dataset, view, seed

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, i: int) -> Any:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(mixed_seed(self.seed, self.view, i))
            return self.dataset[i]


def extract_features(
    extractor: nn.Module,
    images: Dataset,
    *,
    batch_size: int,
    num_workers: int = 0,
    device: torch.device | str = "cpu",
) -> np.ndarray:
    """`extractor`'s features of every image of `images`, in order: float32 [N, C].

    On the CPU, cores that torch's intra-op threads leave idle each compute a batch in a thread of
    its own, with the kernels that would compute it alone: the same features bit for bit (more
    intra-op threads would change oneDNN's kernels). Images load here, in order: seeded views
    draw from torch's global generator, which threads would share.
    """
    # Its own generator: the loader's worker seed is then not drawn from torch's global one.
    loader = DataLoader(
        images,
        batch_size=batch_size,
        shuffle=False,
        num_workers=num_workers,
        generator=torch.Generator(),
    )
    device = torch.device(device)
    extractor.eval().to(device)
    at_once = batches_at_once(device)
    if at_once == 1:
        parts = [_batch_features(extractor, batch[0], device) for batch in loader]
        return torch.cat(parts).numpy()
    parts, running = [], deque[Future[Tensor]]()
    with ThreadPoolExecutor(at_once) as pool:
        for batch in loader:
            running.append(pool.submit(_batch_features, extractor, batch[0], device))
            if len(running) > at_once:  # at most one batch loaded ahead of those computing
                parts.append(running.popleft().result())
        parts += [future.result() for future in running]
    return torch.cat(parts).numpy()


def batches_at_once(device: torch.device) -> int:
    """Batches `extract_features` computes at once: the usable cores over torch's intra-op
    threads on the CPU (at least 1), one on a GPU."""
    if device.type != "cpu":
        return 1
    return max(1, usable_cores() // torch.get_num_threads())


def _batch_features(extractor: nn.Module, pixels: Tensor, device: torch.device) -> Tensor:
    """The features [b, C] of one batch of images [b, 3, H, W], on the CPU in float32."""
    with torch.inference_mode():  # per thread: a worker thread does not inherit the mode
        features = extractor(pixels.to(device))
    if features.ndim != 2 or len(features) != len(pixels):
        raise ValueError(
            f"the extractor {type(extractor).__name__} returned shape "
            f"{tuple(features.shape)} for {len(pixels)} images; it must return pooled "
            "features [B, C] (e.g. benchmark.training.embedders.BackboneFeatures)"
        )
    return features.float().cpu()
