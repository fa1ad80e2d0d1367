"""PKSampler invariants over many random label sets, its errors, and its DDP sharding."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from samplers import PKSampler


def random_labels(seed: int) -> tuple[list[int], int, int]:
    """Labels of a random dataset (non-contiguous class ids, 1..12 images each), and a P, K."""
    gen = torch.Generator().manual_seed(seed)
    num_classes = int(torch.randint(4, 30, (1,), generator=gen))
    counts = torch.randint(1, 13, (num_classes,), generator=gen).tolist()
    ids = (torch.randperm(1000, generator=gen)[:num_classes] * 7).tolist()
    labels = [c for c, n in zip(ids, counts, strict=True) for _ in range(n)]
    order = torch.randperm(len(labels), generator=gen).tolist()
    p = int(torch.randint(2, num_classes + 1, (1,), generator=gen))
    k = int(torch.randint(1, 6, (1,), generator=gen))
    return [labels[i] for i in order], p, k


@pytest.mark.parametrize("seed", range(40))
def test_batches_hold_p_distinct_classes_with_k_samples_each(seed: int) -> None:
    labels, p, k = random_labels(seed)
    sampler = PKSampler(labels, p, k, seed=seed)
    batches = list(sampler)
    assert len(batches) == len(sampler) == max(1, len(labels) // (p * k))
    for batch in batches:
        assert len(batch) == p * k
        per_class = Counter(labels[i] for i in batch)
        assert len(per_class) == p
        assert set(per_class.values()) == {k}
        for c in per_class:  # without replacement whenever the class has K images
            members = [i for i in batch if labels[i] == c]
            if labels.count(c) >= k:
                assert len(set(members)) == k


@pytest.mark.parametrize("seed", range(20))
def test_classes_are_visited_equally_often(seed: int) -> None:
    labels, p, k = random_labels(seed)
    sampler = PKSampler(labels, p, k, seed=seed, batches_per_epoch=50)
    visits = Counter(labels[b[0]] for b in _first_of_each_class(sampler))
    visits.update({c: 0 for c in set(labels)})
    assert max(visits.values()) - min(visits.values()) <= 1


def _first_of_each_class(sampler: PKSampler) -> list[list[int]]:
    """One single-index list per class slot (the first of its K indices) of every batch."""
    k = sampler.k
    return [batch[j : j + 1] for batch in sampler for j in range(0, len(batch), k)]


@pytest.mark.parametrize("seed", range(10))
def test_same_seed_and_epoch_give_same_batches_and_epochs_differ(seed: int) -> None:
    labels, p, k = random_labels(seed)
    a, b = PKSampler(labels, p, k, seed=seed), PKSampler(labels, p, k, seed=seed)
    state = torch.random.get_rng_state()
    assert list(a) == list(b)
    assert torch.equal(torch.random.get_rng_state(), state)  # the global RNG is untouched
    a.set_epoch(1)
    assert list(a) != list(b)
    b.set_epoch(1)
    assert list(a) == list(b)
    assert list(PKSampler(labels, p, k, seed=seed + 1)) != list(PKSampler(labels, p, k, seed=seed))


@pytest.mark.parametrize("seed", range(10))
def test_replicas_get_different_complete_batches(seed: int) -> None:
    labels, p, k = random_labels(seed)
    single = list(PKSampler(labels, p, k, seed=seed, batches_per_epoch=12))
    ranks = [
        list(PKSampler(labels, p, k, seed=seed, num_replicas=3, rank=r, batches_per_epoch=4))
        for r in range(3)
    ]
    assert all(len(r) == 4 for r in ranks)
    # rank r takes every third batch of the single-process sequence: disjoint, complete
    assert [ranks[b % 3][b // 3] for b in range(12)] == single
    assert len(PKSampler(labels * 6, p, k, num_replicas=3, rank=0)) == max(
        1, 6 * len(labels) // (p * k * 3)
    )


def test_small_classes_skip_leaves_them_out_and_replace_repeats() -> None:
    labels = [0] * 5 + [1] * 5 + [2] * 2 + [3] * 6
    skipped = PKSampler(labels, p=2, k=4, small_classes="skip", batches_per_epoch=20)
    assert all(labels[i] != 2 for batch in skipped for i in batch)
    replaced = PKSampler(labels, p=4, k=4, batches_per_epoch=3)
    for batch in replaced:  # all four classes, class 2's two images repeated to fill K=4
        assert Counter(labels[i] for i in batch)[2] == 4
        assert {i for i in batch if labels[i] == 2} <= {10, 11}


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"labels": [0, 0, 1, 1], "p": 3, "k": 2}, "at least p=3 classes"),
        ({"labels": [0, 0, 1, 2], "p": 2, "k": 2, "small_classes": "skip"}, "1 usable classes"),
        ({"labels": [0, 1], "p": 0, "k": 2}, "p and k must be >= 1"),
        ({"labels": [0, 1], "p": 2, "k": 1, "small_classes": "drop"}, "'replace' or 'skip'"),
        ({"labels": [0, 1], "p": 2, "k": 1, "num_replicas": 2, "rank": 2}, "0 <= rank"),
        ({"labels": [0, 1], "p": 2, "k": 1, "batches_per_epoch": 0}, "batches_per_epoch"),
    ],
)
def test_bad_arguments_raise(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        PKSampler(**kwargs)
