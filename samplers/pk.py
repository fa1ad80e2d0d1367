"""P-K batch sampler: each batch holds P distinct classes with K samples each.

The batches are a pure function of `(seed, epoch)`, drawn from one `torch.Generator`, so every
DDP rank draws the same global sequence of batches and keeps every `num_replicas`-th one: the
ranks see different, complete P×K batches and no global RNG is touched.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence
from itertools import islice
from typing import Literal

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor
from torch.utils.data import Sampler

SamplerMode = Literal["coverage", "independent"]


class PKSampler(Sampler[list[int]]):
    """Batch sampler yielding lists of `p * k` dataset indices: P distinct classes × K samples.

    `mode="coverage"` uses every image once per epoch where class sizes allow: each class's
    images are shuffled and dealt in chunks of K (the last topped up with other images of the
    class), and each batch takes one chunk of each of P distinct classes, drawn in proportion to
    their chunks left; chunks that no full batch can take are dropped. A longer
    `batches_per_epoch` goes on with fresh passes. `mode="independent"` draws each batch afresh:
    classes by cycling random permutations, each class's K samples without replacement.

    A class with fewer than K samples is filled by sampling with replacement
    (`small_classes="replace"`; in coverage mode each image at least once) or left out ("skip").
    `labels` may be any integers. Batches depend only on `(seed, epoch)`. Under DDP the sampler
    shards itself (`num_replicas` and `rank` default to `torch.distributed`'s, else 1 and 0):
    pass it as `DataLoader(batch_sampler=...)` with the Trainer's `use_distributed_sampler=False`.
    `batches_per_epoch` is per rank; by default one pass over the data: in coverage mode the
    pass's batches divided among the ranks, in independent mode
    `len(labels) // (p * k * num_replicas)` (at least 1).
    """

    def __init__(
        self,
        labels: Sequence[int] | Tensor,
        p: int,
        k: int,
        seed: int = 0,
        *,
        mode: SamplerMode = "coverage",
        num_replicas: int | None = None,
        rank: int | None = None,
        small_classes: Literal["replace", "skip"] = "replace",
        batches_per_epoch: int | None = None,
    ) -> None:
        if p < 1 or k < 1:
            raise ValueError(f"PKSampler: p and k must be >= 1, got p={p}, k={k}")
        if mode not in ("coverage", "independent"):
            raise ValueError(
                f"PKSampler: mode must be 'coverage' (every image once per epoch) or "
                f"'independent' (batches drawn afresh), got {mode!r}"
            )
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
        self.p, self.k, self.seed, self.mode = p, k, seed, mode
        self.num_replicas, self.rank = num_replicas, rank
        self.epoch = 0
        chunks = torch.tensor([-(-len(members) // k) for members in self.class_indices])
        self.pass_batches = full_batches(chunks, p)  # coverage mode: batches of one pass
        one_pass = self.pass_batches if mode == "coverage" else len(labels) // (p * k)
        self._len = batches_per_epoch or max(1, one_pass // num_replicas)

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch's batches (Lightning calls it every epoch)."""
        self.epoch = epoch

    @property
    def sampler(self) -> PKSampler:
        """Itself: Lightning calls `set_epoch` on `dataloader.batch_sampler.sampler`."""
        return self

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[list[int]]:
        gen = torch.Generator().manual_seed(mixed_seed(self.seed, self.epoch))
        batches = self._coverage(gen) if self.mode == "coverage" else self._independent(gen)
        # every rank draws every batch so the generator stays in step; a rank keeps its stride
        yield from islice(batches, self.rank, self._len * self.num_replicas, self.num_replicas)

    def _coverage(self, gen: torch.Generator) -> Iterator[list[int]]:
        """Passes of batches that use each chunk of K images once; endless, one pass at a time."""
        while True:
            chunks = [self._deal(members, gen) for members in self.class_indices]
            yield from _distinct_class_batches(chunks, self.p, self.pass_batches, gen)

    def _deal(self, members: Tensor, gen: torch.Generator) -> list[Tensor]:
        """A class's images, shuffled, in chunks of K; the last chunk topped up to K."""
        n, k = len(members), self.k
        shuffled = members[torch.randperm(n, generator=gen)]
        full, rest = divmod(n, k)
        chunks = list(shuffled[: full * k].view(full, k))
        if rest:
            if full:  # other images of the class, each at most once in the chunk
                fill = shuffled[torch.randperm(full * k, generator=gen)[: k - rest]]
            else:  # fewer than K images: all of them, then draws with replacement
                fill = members[torch.randint(n, (k - n,), generator=gen)]
            chunks.append(torch.cat([shuffled[full * k :], fill]))
        return chunks

    def _independent(self, gen: torch.Generator) -> Iterator[list[int]]:
        """Endless batches, each class's K samples drawn afresh from all its images."""
        num_classes = len(self.class_indices)
        queue: list[int] = []  # positions into self.class_indices, in visiting order
        while True:
            # a class is queued at most twice, so 2p entries hold p distinct; skip the set then
            while len(queue) < 2 * self.p and len(set(queue)) < self.p:
                queue += torch.randperm(num_classes, generator=gen).tolist()
            chosen = list(dict.fromkeys(queue[: 2 * self.p]))[: self.p]  # the first p distinct
            for c in chosen:
                queue.remove(c)  # its first entry, the one chosen; skipped repeats stay queued
            yield torch.cat([self._draw(c, gen) for c in chosen]).tolist()

    def _draw(self, c: int, gen: torch.Generator) -> Tensor:
        """K indices of class position `c`: without replacement when it has at least K."""
        members = self.class_indices[c]
        if len(members) >= self.k:
            return members[torch.randperm(len(members), generator=gen)[: self.k]]
        return members[torch.randint(len(members), (self.k,), generator=gen)]


def full_batches(chunks: Tensor, p: int) -> int:
    """The most batches of `p` distinct classes that `chunks[c]` chunks per class can fill.

    B batches can be filled iff sum_c min(chunks[c], B) >= p·B (a class gives at most one chunk
    to a batch); the left side minus the right is concave in B and 0 at B = 0, so the B that
    satisfy it form an interval, searched by bisection.
    """
    candidates = range(1, int(chunks.sum()) // p + 1)
    return bisect_left(candidates, True, key=lambda b: int(chunks.clamp(max=b).sum()) < p * b)


def _distinct_class_batches(
    chunks: list[list[Tensor]], p: int, batches: int, gen: torch.Generator
) -> Iterator[list[int]]:
    """`batches` (`full_batches` of the chunk counts) batches, each one chunk of each of `p`
    distinct classes, no chunk used twice.

    Chunks per class are capped at `batches`, and those over `p * batches` dropped from classes
    drawn in proportion to their chunks, last chunk first. Each batch then takes every class with
    as many chunks left as batches left and fills up with classes drawn in proportion to their
    chunks left, which keeps that invariant: every batch finds `p` distinct classes.
    """
    left = torch.tensor([len(c) for c in chunks]).clamp(max=batches)
    excess = int(left.sum()) - p * batches
    if excess:
        left[torch.multinomial(left.double(), excess, generator=gen)] -= 1
    unused = [iter(class_chunks) for class_chunks in chunks]
    for remaining in range(batches, 0, -1):
        forced = (left == remaining).nonzero().flatten()
        weights = left.double()
        weights[forced] = 0
        free = p - len(forced)
        drawn = torch.multinomial(weights, free, generator=gen) if free else forced[:0]
        picked = torch.cat([forced, drawn])
        left[picked] -= 1
        yield torch.cat([next(unused[c]) for c in picked.tolist()]).tolist()


def mixed_seed(*values: int) -> int:
    """A 32-bit seed hashing `values` (numpy's SeedSequence), so that nearby tuples differ:
    `seed + epoch` would make (0, 1) repeat (1, 0)."""
    return int(np.random.SeedSequence([v % 2**64 for v in values]).generate_state(1)[0])
