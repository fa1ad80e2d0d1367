"""P-K batch sampler: each batch holds P distinct classes with K samples each.

The batches are a pure function of `(seed, epoch)`, drawn from one `torch.Generator`, so every
DDP rank draws the same global sequence of batches and keeps every `num_replicas`-th one: the
ranks see different, complete P×K batches and no global RNG is touched.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Literal

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor
from torch.utils.data import Sampler

SmallClasses = Literal["replace", "skip"]


class PKSampler(Sampler[list[int]]):
    """Batch sampler yielding lists of `p * k` dataset indices: P distinct classes × K samples.

    Classes are visited by cycling random permutations of all classes, so over an epoch every
    class appears in as many batches as every other, give or take one. Within a class the K
    samples are drawn without replacement; a class with fewer than K samples is either filled by
    sampling with replacement (`small_classes="replace"`, its images repeat inside the batch) or
    left out (`small_classes="skip"`).

    Under DDP the sampler shards itself: use it as `DataLoader(batch_sampler=...)` and run the
    Trainer with `use_distributed_sampler=False` so Lightning does not wrap it again.

    Args:
        labels: class of each dataset item, any integers (need not be contiguous).
        p: classes per batch.
        k: samples per class.
        seed: base seed; batches depend only on `(seed, epoch)`.
        num_replicas: number of DDP processes; default the `torch.distributed` world size when
            initialised, else 1.
        rank: this process's rank; default the `torch.distributed` rank when initialised, else 0.
        small_classes: what to do with classes that have fewer than `k` samples.
        batches_per_epoch: batches each rank yields per epoch; default
            `len(labels) // (p * k * num_replicas)` (at least 1), about one pass over the data.
    """

    def __init__(
        self,
        labels: Sequence[int] | Tensor,
        p: int,
        k: int,
        seed: int = 0,
        *,
        num_replicas: int | None = None,
        rank: int | None = None,
        small_classes: SmallClasses = "replace",
        batches_per_epoch: int | None = None,
    ) -> None:
        if p < 1 or k < 1:
            raise ValueError(f"PKSampler: p and k must be >= 1, got p={p}, k={k}")
        if small_classes not in ("replace", "skip"):
            raise ValueError(
                f"PKSampler: small_classes must be 'replace' or 'skip', got {small_classes!r}"
            )
        distributed = dist.is_available() and dist.is_initialized()
        if num_replicas is None:
            num_replicas = dist.get_world_size() if distributed else 1
        if rank is None:
            rank = dist.get_rank() if distributed else 0
        if num_replicas < 1 or not 0 <= rank < num_replicas:
            raise ValueError(
                f"PKSampler: need num_replicas >= 1 and 0 <= rank < num_replicas, "
                f"got num_replicas={num_replicas}, rank={rank}"
            )
        if batches_per_epoch is not None and batches_per_epoch < 1:
            raise ValueError(f"PKSampler: batches_per_epoch must be >= 1, got {batches_per_epoch}")

        labels = torch.as_tensor(labels, dtype=torch.int64).reshape(-1)
        classes, counts = labels.unique(return_counts=True)
        order = labels.argsort(stable=True)  # indices grouped by class, classes ascending
        groups = order.split(counts.tolist())
        keep = [i for i, n in enumerate(counts.tolist()) if small_classes == "replace" or n >= k]
        if len(keep) < p:
            skipped = len(classes) - len(keep)
            raise ValueError(
                f"PKSampler: need at least p={p} classes per batch but the labels have "
                f"{len(keep)} usable classes ({skipped} with fewer than k={k} samples skipped); "
                "lower p, or use small_classes='replace' to keep small classes"
            )
        self.class_indices: list[Tensor] = [groups[i] for i in keep]
        self.p, self.k, self.seed = p, k, seed
        self.num_replicas, self.rank = num_replicas, rank
        self.epoch = 0
        self._len = batches_per_epoch or max(1, len(labels) // (p * k * num_replicas))

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch's batches; Lightning calls this at the start of every epoch."""
        self.epoch = epoch

    @property
    def sampler(self) -> PKSampler:
        """Itself: Lightning calls `set_epoch` on `dataloader.batch_sampler.sampler`, not on the
        batch sampler, so without this every epoch would repeat epoch 0's batches."""
        return self

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[list[int]]:
        gen = torch.Generator().manual_seed(epoch_seed(self.seed, self.epoch))
        num_classes = len(self.class_indices)
        queue: list[int] = []  # positions into self.class_indices, in visiting order
        for b in range(self._len * self.num_replicas):
            # a class is queued at most twice, so 2p entries hold p distinct; skip the set then
            while len(queue) < 2 * self.p and len(set(queue)) < self.p:
                queue += torch.randperm(num_classes, generator=gen).tolist()
            chosen = _first_distinct(queue, self.p)
            # every rank draws every batch so the generator stays in step; a rank keeps its stride
            batch = [self._draw(c, gen) for c in chosen]
            if b % self.num_replicas == self.rank:
                yield torch.cat(batch).tolist()

    def _draw(self, c: int, gen: torch.Generator) -> Tensor:
        """K indices of class position `c`: without replacement when it has at least K."""
        members = self.class_indices[c]
        if len(members) >= self.k:
            return members[torch.randperm(len(members), generator=gen)[: self.k]]
        return members[torch.randint(len(members), (self.k,), generator=gen)]


def epoch_seed(seed: int, epoch: int) -> int:
    """A 32-bit seed mixing `seed` and `epoch`.

    The CPU generator keeps only 32 bits of its seed and `seed + epoch` would make
    (seed=0, epoch=1) repeat (seed=1, epoch=0); numpy's SeedSequence hashes the pair instead.
    """
    return int(np.random.SeedSequence([seed % 2**64, epoch]).generate_state(1)[0])


def _first_distinct(queue: list[int], p: int) -> list[int]:
    """Remove and return the first `p` distinct entries of `queue`; skipped repeats stay queued."""
    chosen: list[int] = []
    rest: list[int] = []
    for i, c in enumerate(queue):
        if len(chosen) == p:
            rest += queue[i:]
            break
        (rest if c in chosen else chosen).append(c)
    queue[:] = rest
    return chosen
