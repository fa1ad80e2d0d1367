"""Splits of a dataset and the validation sets carved from its training classes.

`Split` is one set of images, `Splits` a dataset's train / query / gallery. Validation is always
class-disjoint from training: `carve_validation` holds out random training classes (a normal
run's `val_classes`), `fold_split` holds out one of K folds that tile them (tuning).

The folds follow Musgrave et al.'s protocol ("A Metric Learning Reality Check", ECCV 2020): the
training classes are dealt into K folds; a trial setting is scored by training on K-1 folds and
validating on the held-out one, for each fold in turn. The folds are a pure function of the
training classes and K (shuffled with the fixed `FOLD_SEED`, not the run's seed), so every
trial of every loss is scored on the same folds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from core.protocols import RetrievalProtocol

FOLD_SEED = 0  # fixed: the folds must not change with a trial's or a cell's seed


def fold_sizes(num_classes: int, folds: int) -> list[int]:
    """Classes in each of `folds` near-equal folds of `num_classes` (the first ones get the
    remainder): `fold_sizes(10, 3) == [4, 3, 3]`."""
    check_fold(num_classes, folds, 0)
    base, extra = divmod(num_classes, folds)
    return [base + (f < extra) for f in range(folds)]


def class_folds(classes: Sequence[int], folds: int) -> list[list[int]]:
    """The distinct `classes` dealt into `folds` class-disjoint folds that tile them.

    The classes are sorted, shuffled by `FOLD_SEED` and cut into `fold_sizes` contiguous parts,
    so similar neighbouring ids (CUB's albatrosses 1-3) do not all land in one fold.
    """
    ordered = sorted(set(classes))
    sizes = fold_sizes(len(ordered), folds)
    perm = torch.randperm(len(ordered), generator=torch.Generator().manual_seed(FOLD_SEED))
    shuffled = [ordered[i] for i in perm.tolist()]
    starts = [sum(sizes[:f]) for f in range(folds)]
    return [sorted(shuffled[s : s + n]) for s, n in zip(starts, sizes, strict=True)]


def check_fold(num_classes: int, folds: int, fold: int) -> None:
    """ValueError unless 2 <= folds <= num_classes and 0 <= fold < folds."""
    if isinstance(folds, bool) or not isinstance(folds, int) or folds < 2:
        raise ValueError(
            f"folds={folds!r}: class-disjoint cross-validation needs an int >= 2 "
            "(Musgrave et al. use 4; circlebench's boards use 3)"
        )
    if folds > num_classes:
        raise ValueError(
            f"folds={folds} is more than the {num_classes} training classes: every fold needs "
            "at least one class; lower --folds"
        )
    if isinstance(fold, bool) or not isinstance(fold, int) or not 0 <= fold < folds:
        raise ValueError(f"fold={fold!r} must be an int in [0, {folds - 1}] for folds={folds}")


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
    return hold_out(train, {classes[i] for i in perm[:num_classes]}, seed=seed, protocol=protocol)


def fold_split(train: Split, folds: int, fold: int, *, protocol: RetrievalProtocol) -> Splits:
    """Fold `fold` of `class_folds(train.labels, folds)` as the validation split, the other folds'
    classes as the (relabelled) training split: one class-disjoint cross-validation round."""
    check_fold(len(set(train.labels)), folds, fold)
    held = set(class_folds(train.labels, folds)[fold])
    return hold_out(train, held, seed=FOLD_SEED, protocol=protocol)


def hold_out(train: Split, held: set[int], *, seed: int, protocol: RetrievalProtocol) -> Splits:
    """`Splits(remaining training split relabelled 0..C-1, validation query, gallery)` with the
    classes `held` as the validation set (`query_gallery`: divided by `query_gallery_split`)."""
    val = train.subset([i for i, c in enumerate(train.labels) if c in held])
    remaining = relabel(train.subset([i for i, c in enumerate(train.labels) if c not in held]))
    if protocol == "same_set":
        return Splits(remaining, val, None)
    return Splits(remaining, *query_gallery_split(val, seed=seed))
