"""PKSampler invariants over many random label sets, its errors, and its DDP sharding."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest
import torch

from samplers import PKSampler, SamplerMode


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


def whole_chunk_labels(seed: int) -> tuple[list[int], int, int]:
    """Labels whose classes all hold a multiple of K images and fill whole P-class batches."""
    gen = torch.Generator().manual_seed(seed)
    p, k = (
        int(torch.randint(2, 7, (1,), generator=gen)),
        int(torch.randint(1, 6, (1,), generator=gen)),
    )
    chunks = torch.randint(
        1, 5, (4 * p + int(torch.randint(0, 9, (1,), generator=gen)),), generator=gen
    )
    chunks = chunks.tolist() + [1] * (-int(chunks.sum()) % p)  # p·B chunks, B >= 4 >= any class's
    labels = [3 * c + 1 for c, n in enumerate(chunks) for _ in range(n * k)]
    return [labels[i] for i in torch.randperm(len(labels), generator=gen).tolist()], p, k


def long_tailed_labels(seed: int) -> tuple[list[int], int, int]:
    """Zipf-like class sizes (a few classes of up to 200 images, many of 1–3) and a P, K."""
    gen = torch.Generator().manual_seed(seed)
    num_classes = int(torch.randint(8, 40, (1,), generator=gen))
    top, s = (
        float(torch.randint(20, 200, (1,), generator=gen)),
        0.8 + float(torch.rand(1, generator=gen)),
    )
    counts = [max(1, round(top / (r + 1) ** s)) for r in range(num_classes)]
    labels = [c for c, n in enumerate(counts) for _ in range(n)]
    p = int(torch.randint(2, min(num_classes, 16) + 1, (1,), generator=gen))
    k = int(torch.randint(1, 6, (1,), generator=gen))
    return [labels[i] for i in torch.randperm(len(labels), generator=gen).tolist()], p, k


MODES = ["coverage", "independent"]
LABEL_SETS = [random_labels, long_tailed_labels]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("label_set", LABEL_SETS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("seed", range(25))
def test_batches_hold_p_distinct_classes_with_k_samples_each(
    seed: int, label_set: Callable, mode: SamplerMode
) -> None:
    labels, p, k = label_set(seed)
    sampler = PKSampler(labels, p, k, seed=seed, mode=mode)
    batches = list(sampler)
    if mode == "independent":
        assert len(batches) == len(sampler) == max(1, len(labels) // (p * k))
    else:
        assert len(batches) == len(sampler) == sampler.pass_batches
    for batch in batches:
        assert len(batch) == p * k
        per_class = Counter(labels[i] for i in batch)
        assert len(per_class) == p
        assert set(per_class.values()) == {k}
        for c in per_class:  # without replacement whenever the class has K images
            members = [i for i in batch if labels[i] == c]
            if labels.count(c) >= k:
                assert len(set(members)) == k


@pytest.mark.parametrize("seed", range(30))
def test_coverage_uses_every_image_once_when_classes_fill_whole_batches(seed: int) -> None:
    labels, p, k = whole_chunk_labels(seed)
    sampler = PKSampler(labels, p, k, seed=seed, mode="coverage")
    for epoch in range(2):
        sampler.set_epoch(epoch)
        seen = [i for batch in sampler for i in batch]
        assert sorted(seen) == list(range(len(labels)))
    twice = PKSampler(
        labels, p, k, seed=seed, mode="coverage", batches_per_epoch=2 * sampler.pass_batches
    )
    assert Counter(Counter(i for batch in twice for i in batch).values()) == {2: len(labels)}


@pytest.mark.parametrize("label_set", LABEL_SETS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("seed", range(30))
def test_coverage_fills_the_most_batches_and_repeats_only_top_ups(
    seed: int, label_set: Callable
) -> None:
    labels, p, k = label_set(seed)
    sizes = Counter(labels)
    sampler = PKSampler(labels, p, k, seed=seed, mode="coverage")
    assert sampler.pass_batches == _greedy_batches([-(-n // k) for n in sizes.values()], p)
    batches = list(sampler)
    for c, n in sizes.items():  # a chunk is K images of one class: count a class's chunks
        chunks = sum(c in {labels[i] for i in b} for b in batches)
        assert chunks <= min(-(-n // k), len(batches))
        images = Counter(i for b in batches for i in b if labels[i] == c)
        extra = k - n % k if n % k else 0  # the top-up of the last chunk
        assert sum(images.values()) - len(images) <= extra


def _greedy_batches(chunks: list[int], p: int) -> int:
    """Batches filled by always taking the p classes with the most chunks left (optimal)."""
    left, batches = sorted(chunks, reverse=True), 0
    while len(left) >= p and left[p - 1] > 0:
        left = sorted([n - 1 for n in left[:p]] + left[p:], reverse=True)
        batches += 1
    return batches


@pytest.mark.parametrize("seed", range(20))
def test_classes_are_visited_equally_often_in_independent_mode(seed: int) -> None:
    labels, p, k = random_labels(seed)
    sampler = PKSampler(labels, p, k, seed=seed, mode="independent", batches_per_epoch=50)
    visits = Counter(labels[b[0]] for b in _first_of_each_class(sampler))
    visits.update({c: 0 for c in set(labels)})
    assert max(visits.values()) - min(visits.values()) <= 1


def _first_of_each_class(sampler: PKSampler) -> list[list[int]]:
    """One single-index list per class slot (the first of its K indices) of every batch."""
    k = sampler.k
    return [batch[j : j + 1] for batch in sampler for j in range(0, len(batch), k)]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("seed", range(10))
def test_same_seed_and_epoch_give_same_batches_and_epochs_differ(
    seed: int, mode: SamplerMode
) -> None:
    labels, p, k = random_labels(seed)
    a, b = (
        PKSampler(labels, p, k, seed=seed, mode=mode),
        PKSampler(labels, p, k, seed=seed, mode=mode),
    )
    state = torch.random.get_rng_state()
    assert list(a) == list(b)
    assert torch.equal(torch.random.get_rng_state(), state)  # the global RNG is untouched
    a.set_epoch(1)
    assert list(a) != list(b)
    b.set_epoch(1)
    assert list(a) == list(b)
    other = PKSampler(labels, p, k, seed=seed + 1, mode=mode)
    assert list(other) != list(PKSampler(labels, p, k, seed=seed, mode=mode))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("seed", range(10))
def test_replicas_get_different_complete_batches(seed: int, mode: SamplerMode) -> None:
    labels, p, k = random_labels(seed)
    single = list(PKSampler(labels, p, k, seed=seed, mode=mode, batches_per_epoch=12))
    ranks = [
        list(
            PKSampler(
                labels, p, k, seed=seed, mode=mode, num_replicas=3, rank=r, batches_per_epoch=4
            )
        )
        for r in range(3)
    ]
    assert all(len(r) == 4 for r in ranks)
    # rank r takes every third batch of the single-process sequence: disjoint, complete
    assert [ranks[b % 3][b // 3] for b in range(12)] == single
    sampler = PKSampler(labels * 6, p, k, mode=mode, num_replicas=3, rank=0)
    if mode == "independent":
        assert len(sampler) == max(1, 6 * len(labels) // (p * k * 3))
    else:
        assert len(sampler) == max(1, sampler.pass_batches // 3)


@pytest.mark.parametrize("replicas", [2, 3])
@pytest.mark.parametrize("seed", range(15))
def test_coverage_ranks_hold_disjoint_images_that_cover_the_epoch(seed: int, replicas: int) -> None:
    labels, p, k = whole_chunk_labels(seed)
    ranks = [
        PKSampler(labels, p, k, seed=seed, mode="coverage", num_replicas=replicas, rank=r)
        for r in range(replicas)
    ]
    seen = [{i for batch in rank for i in batch} for rank in ranks]
    assert sum(map(len, seen)) == len(set().union(*seen))  # no image on two ranks
    batches = ranks[0].pass_batches
    assert len(set().union(*seen)) == (batches - batches % replicas) * p * k
    if batches % replicas == 0:
        assert set().union(*seen) == set(range(len(labels)))


def test_coverage_sees_the_whole_of_a_cub_sized_set_independent_two_thirds() -> None:
    """CUB's training classes hold 41–60 images; P=16, K=5 as in the fine-grained configs."""
    sizes = [60] * 80 + [41 + i for i in range(20)]
    labels = [c for c, n in enumerate(sizes) for _ in range(n)]
    seen = {
        mode: len({i for batch in PKSampler(labels, 16, 5, mode=mode) for i in batch}) / len(labels)
        for mode in MODES
    }
    assert seen["coverage"] > 0.98 and seen["independent"] < 0.7


@pytest.mark.parametrize("mode", MODES)
def test_small_classes_skip_leaves_them_out_and_replace_repeats(mode: SamplerMode) -> None:
    labels = [0] * 5 + [1] * 5 + [2] * 2 + [3] * 6
    skipped = PKSampler(labels, p=2, k=4, mode=mode, small_classes="skip", batches_per_epoch=20)
    assert all(labels[i] != 2 for batch in skipped for i in batch)
    replaced = PKSampler(labels, p=4, k=4, mode=mode, batches_per_epoch=3)
    for batch in replaced:  # all four classes, class 2's two images repeated to fill K=4
        assert Counter(labels[i] for i in batch)[2] == 4
        assert {i for i in batch if labels[i] == 2} <= {10, 11}
        if mode == "coverage":  # each of them at least once
            assert {i for i in batch if labels[i] == 2} == {10, 11}


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"labels": [0, 0, 1, 1], "p": 3, "k": 2}, "at least p=3 classes"),
        ({"labels": [0, 0, 1, 2], "p": 2, "k": 2, "small_classes": "skip"}, "1 usable classes"),
        ({"labels": [0, 1], "p": 0, "k": 2}, "p and k must be >= 1"),
        ({"labels": [0, 1], "p": 2, "k": 1, "small_classes": "drop"}, "'replace' or 'skip'"),
        ({"labels": [0, 1], "p": 2, "k": 1, "mode": "balanced"}, "'coverage' .* or 'indep"),
        ({"labels": [0, 1], "p": 2, "k": 1, "num_replicas": 2, "rank": 2}, "0 <= rank"),
        ({"labels": [0, 1], "p": 2, "k": 1, "batches_per_epoch": 0}, "batches_per_epoch"),
    ],
)
def test_bad_arguments_raise(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        PKSampler(**kwargs)


def test_the_default_mode_is_coverage() -> None:
    assert PKSampler([0, 0, 1, 1], p=2, k=2).mode == "coverage"
