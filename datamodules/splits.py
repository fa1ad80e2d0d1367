"""Splits of a dataset and the validation sets carved from its training classes.

Validation is class-disjoint from training: `carve_validation` holds out random training
classes (`val_classes`), `fold_split` one of K folds that tile them (tuning, after Musgrave et
al., "A Metric Learning Reality Check", ECCV 2020: train on K-1 folds, validate on the held-out
one). The folds depend on the training classes and K alone (the fixed `FOLD_SEED`, not the run's
seed), so every trial of every loss is scored on the same folds.
"""

from __future__ import annotations

from collections import Counter
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
    """The distinct `classes`, sorted, shuffled by `FOLD_SEED` (so that similar neighbouring ids
    do not share a fold) and cut into `fold_sizes` class-disjoint folds."""
    ordered = sorted(set(classes))
    sizes = fold_sizes(len(ordered), folds)
    perm = torch.randperm(len(ordered), generator=torch.Generator().manual_seed(FOLD_SEED))
    return [sorted(ordered[i] for i in fold.tolist()) for fold in perm.split(sizes)]


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
    """One set of images: `items[i]` is the image (a file path, or the synthetic item number),
    `labels[i]` its class (the dataset's own ids), `cameras[i]` its camera (-1 for none)."""

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
    """Training set and test sets; `gallery` is None under the `same_set` protocol."""

    train: Split
    query: Split
    gallery: Split | None

    def test_sets(self) -> list[tuple[str, Split]]:
        """("query", query) and, unless the protocol is `same_set`, ("gallery", gallery)."""
        gallery = [] if self.gallery is None else [("gallery", self.gallery)]
        return [("query", self.query), *gallery]


def relabel(split: Split) -> Split:
    """The split with its labels mapped to 0..C-1 in ascending order of the original labels."""
    new = {c: i for i, c in enumerate(sorted(set(split.labels)))}
    return Split(split.items, [new[c] for c in split.labels], split.cameras)


def query_gallery_split(split: Split, *, seed: int) -> tuple[Split, Split]:
    """Query and gallery of a re-ID evaluation set, both in the split's order: one image per
    camera (chosen by `seed`) of each identity seen by two or more cameras is a query, the rest
    gallery (a single-camera identity has no valid match, so it goes wholly to the gallery)."""
    gen = torch.Generator().manual_seed(seed)
    first: dict[tuple[int, int], int] = {}  # (identity, camera) -> its query
    for i in torch.randperm(len(split), generator=gen).tolist():
        first.setdefault((split.labels[i], split.cameras[i]), i)
    cameras_per_id = Counter(label for label, _ in first)
    query = sorted(i for (label, _), i in first.items() if cameras_per_id[label] > 1)
    chosen = set(query)
    return split.subset(query), split.subset([i for i in range(len(split)) if i not in chosen])


def carve_validation(
    train: Split, num_classes: int, *, seed: int, protocol: RetrievalProtocol
) -> Splits:
    """`hold_out` of `num_classes` random training classes (chosen by `seed`)."""
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
