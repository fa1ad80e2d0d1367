"""CachedFeatureDataModule: cache hits and invalidation, seeded views, loaders like the images'."""

from __future__ import annotations

import inspect
import os
import threading
from pathlib import Path

import pytest
import torch
from torch import Tensor, nn
from torch.utils.data import default_collate

from benchmark.evaluation.precision import ieee_float32
from benchmark.training.embedders import BackboneFeatures
from datamodules import (
    CachedFeatureDataModule,
    CUB200DataModule,
    RetrievalDataModule,
    SyntheticDataModule,
    feature_views,
)
from datamodules.feature_views import SeededView, ViewBatchSampler, epoch_views, extract_features
from datamodules.features import where_features_run
from samplers import PKSampler
from tests.datamodules import _layouts


class CountingExtractor(nn.Module):
    """A tiny frozen 'backbone': per-channel mean and max of a fixed 1×1 convolution -> [B, 8]."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)
        with torch.no_grad():
            self.conv.weight.copy_(torch.linspace(-1, 1, 12).view(4, 3, 1, 1))
            self.conv.bias.zero_()
        self.images_seen = 0
        self._counting = threading.Lock()  # extract_features may run batches in threads

    def forward(self, images: Tensor) -> Tensor:
        with self._counting:
            self.images_seen += len(images)
        maps = self.conv(images)  # [B, 4, H, W]
        return torch.cat([maps.mean(dim=(2, 3)), maps.amax(dim=(2, 3))], dim=1)  # [B, 8]


def synthetic(**kwargs) -> SyntheticDataModule:
    settings = dict(num_train_classes=4, num_test_classes=3, images_per_class=3, p=2, k=2)
    settings |= dict(image_size=8, num_workers=0, eval_batch_size=5)
    return SyntheticDataModule(**(settings | kwargs))


def cub(root: Path, **kwargs) -> CUB200DataModule:
    """Classes 1–2 (5 images) train, 3–4 (9) test; 8×8 JPEGs, RandomResizedCrop + flip."""
    settings = dict(train_classes=2, image_size=8, p=2, k=2, num_workers=0, eval_batch_size=4)
    return CUB200DataModule(root, **(settings | kwargs))


def features(images, tmp_path: Path, extractor: nn.Module | None = None, **kwargs):
    dm = CachedFeatureDataModule(
        images, extractor or CountingExtractor(), cache_dir=tmp_path / "cache", **kwargs
    )
    dm.setup()
    return dm


def test_a_second_build_reads_every_entry_without_running_the_extractor(tmp_path: Path) -> None:
    first = features(synthetic(val_classes=1), tmp_path)
    assert first.extractor.images_seen == 12 + 9  # training (train + validation) and test images
    assert all(event.computed for event in first.cache_events)
    second = features(synthetic(val_classes=1), tmp_path)
    assert second.extractor.images_seen == 0
    assert not any(event.computed for event in second.cache_events)
    for name, dataset in first._datasets.items():
        torch.testing.assert_close(
            second._datasets[name].features, dataset.features, rtol=0, atol=0
        )
    # Another seed (other P-K batches, other validation classes) still reads the same entries.
    assert features(synthetic(val_classes=1, seed=5), tmp_path).extractor.images_seen == 0


def test_features_are_the_extractor_applied_to_the_evaluation_images(tmp_path: Path) -> None:
    images = synthetic()
    dm = features(images, tmp_path)
    extractor = CountingExtractor()
    images.setup()
    for name in ("train", "test_query"):
        pixels = torch.stack([item[0] for item in images._datasets[name]])
        torch.testing.assert_close(dm._datasets[name].features[0], extractor(pixels))


def test_new_weights_image_size_or_rendering_miss(tmp_path: Path) -> None:
    features(synthetic(), tmp_path)
    changed = CountingExtractor()
    with torch.no_grad():
        changed.conv.bias.add_(0.5)
    assert features(synthetic(), tmp_path, changed).extractor.images_seen == 12 + 9
    assert features(synthetic(image_size=12), tmp_path).extractor.images_seen == 12 + 9
    assert features(synthetic(render_seed=1), tmp_path).extractor.images_seen == 12 + 9


def test_tf32_products_or_another_device_miss(tmp_path: Path) -> None:
    """Features computed with TF32 (or bfloat16) products differ from IEEE float32 ones: the key
    names the float32 modes and the device, so neither reads the other's entries."""
    features(synthetic(), tmp_path)
    with ieee_float32():  # puts the setting back
        torch.set_float32_matmul_precision("medium")  # oneDNN's bfloat16 float32 products
        assert features(synthetic(), tmp_path).extractor.images_seen == 12 + 9
    assert features(synthetic(), tmp_path).extractor.images_seen == 0
    gpu = where_features_run(torch.device("cpu")) | {"type": "cuda"}
    assert gpu != where_features_run(torch.device("cpu"))


def test_another_cpu_thread_count_misses(tmp_path: Path) -> None:
    """oneDNN computes small batches with other kernels on more threads (slightly other
    features), so a cell with one thread never reads what a run with all cores computed."""
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert features(synthetic(), tmp_path).extractor.images_seen == 12 + 9
        torch.set_num_threads(2)
        assert features(synthetic(), tmp_path).extractor.images_seen == 12 + 9
        assert features(synthetic(), tmp_path).extractor.images_seen == 0
    finally:
        torch.set_num_threads(before)


def test_another_extraction_batch_size_misses(tmp_path: Path) -> None:
    """oneDNN picks its kernels by batch size too (EfficientNet-Lite0 features 7e-6 apart at
    batch 32 vs 5), so an entry is never read by a run that extracts in other batches."""
    assert features(synthetic(eval_batch_size=5), tmp_path).extractor.images_seen == 12 + 9
    assert features(synthetic(eval_batch_size=4), tmp_path).extractor.images_seen == 12 + 9
    assert features(synthetic(eval_batch_size=5), tmp_path).extractor.images_seen == 0


def test_batches_computed_side_by_side_equal_those_computed_one_by_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real backbone, on rendered images and on seeded augmented views: bit for bit, and
    with a last batch smaller than the others (the kernels more threads would change)."""
    root = _layouts.write_cub(tmp_path / "cub")
    images = cub(root, image_size=32)
    datasets = [
        synthetic(image_size=32).make_dataset(synthetic().load_train(), train=False),
        SeededView(images.make_dataset(images.load_train(), train=True), view=1, seed=0),
    ]
    extractor = BackboneFeatures(backbone="efficientnet_lite0", pretrained=True, pooling="avg")
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        for dataset in datasets:
            computed = {}
            for at_once in (1, 3):
                monkeypatch.setattr(feature_views, "batches_at_once", lambda d, n=at_once: n)
                computed[at_once] = extract_features(extractor, dataset, batch_size=2)
            assert computed[1].shape == (len(dataset), 1280)  # type: ignore[arg-type]
            assert (computed[1] == computed[3]).all()
    finally:
        torch.set_num_threads(before)


def test_batches_at_once_fill_the_cores_left_by_the_intra_op_threads() -> None:
    cores = len(os.sched_getaffinity(0))
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert feature_views.batches_at_once(torch.device("cpu")) == cores
        torch.set_num_threads(cores)
        assert feature_views.batches_at_once(torch.device("cpu")) == 1
    finally:
        torch.set_num_threads(before)
    assert feature_views.batches_at_once(torch.device("cuda")) == 1


def test_more_views_compute_only_the_new_views_and_aug_seed_only_the_views(tmp_path) -> None:
    root = _layouts.write_cub(tmp_path / "cub")
    one = features(cub(root), tmp_path, views=1)
    assert one.extractor.images_seen == 5 + 9  # view 0, test
    two = features(cub(root), tmp_path, views=2)
    assert [(e.split, e.view, e.computed) for e in two.cache_events] == [
        ("train", 0, False),
        ("train", 1, True),
        ("query", None, False),
    ]
    assert features(cub(root), tmp_path, views=2, aug_seed=1).extractor.images_seen == 2 * 5
    image = Path(cub(root).splits()[2].query.items[0])
    os.utime(image, ns=(image.stat().st_atime_ns, image.stat().st_mtime_ns + 10**9))
    assert features(cub(root), tmp_path, views=2).extractor.images_seen == 9  # test: touched


def test_views_are_reproducible_and_differ_from_each_other(tmp_path: Path) -> None:
    root = _layouts.write_cub(tmp_path / "cub")
    extractor = CountingExtractor()
    state = torch.get_rng_state()
    a = features(cub(root), tmp_path / "a", extractor, views=3)._datasets["train"].features
    assert a.shape == (3, 5, 8)
    assert torch.equal(torch.get_rng_state(), state)  # the global generator is untouched
    b = features(cub(root), tmp_path / "b", views=3)._datasets["train"].features
    torch.testing.assert_close(a, b, rtol=0, atol=0)  # computed afresh: the same views
    for v in range(3):
        for w in range(v):
            assert not torch.allclose(a[v], a[w])
    c = features(cub(root), tmp_path / "c", views=3, aug_seed=1)._datasets["train"].features
    assert not torch.allclose(a, c)


def test_data_without_augmentation_caches_one_view_shared_with_validation(tmp_path) -> None:
    dm = features(synthetic(val_classes=1), tmp_path, views=4)
    assert dm._datasets["train"].views == 1 and dm.extractor.images_seen == 12 + 9
    assert [(e.split, e.view) for e in dm.cache_events] == [("train", None), ("query", None)]


def test_each_epoch_shows_one_view_per_sample_drawn_from_seed_epoch_and_index() -> None:
    labels = [i // 3 for i in range(12)]
    pk = PKSampler(labels, p=2, k=2, seed=4)
    sampler = ViewBatchSampler(pk, views=3, num_items=12, seed=4)
    seen = []
    for epoch in range(3):
        sampler.sampler.set_epoch(epoch)  # what Lightning calls every epoch
        chosen = epoch_views(4, epoch, 12, 3)
        expected = [[int(chosen[i]) * 12 + i for i in batch] for batch in pk]
        assert list(sampler) == expected == list(sampler)
        seen.append(chosen)
    assert len(sampler) == len(pk)
    assert not torch.equal(seen[0], seen[1]) and set(torch.cat(seen).tolist()) == {0, 1, 2}
    assert not torch.equal(epoch_views(5, 0, 12, 3), seen[0])


def test_training_batches_are_the_default_collation_of_their_items(tmp_path: Path) -> None:
    root = _layouts.write_cub(tmp_path / "cub")
    loader = features(cub(root), tmp_path, views=2).train_dataloader()
    items = loader.dataset  # the FeatureDataset, read an item at a time
    assert items.views == 2
    for indices, batch in zip(loader.batch_sampler, loader, strict=True):
        expected = default_collate([items[i] for i in indices])
        assert all(
            torch.equal(a, b) and a.dtype == b.dtype for a, b in zip(batch, expected, strict=True)
        )


@pytest.mark.parametrize("mode", ["fine_grained", "reid"])
def test_loaders_yield_features_where_the_image_loaders_yield_images(tmp_path, mode) -> None:
    kwargs = dict(mode=mode, images_per_class=4, num_cameras=2, val_classes=2)
    images, dm = synthetic(**kwargs), features(synthetic(**kwargs), tmp_path)
    assert (dm.dataset_name, dm.protocol, dm.default_recall_ks) == (
        images.dataset_name,
        images.protocol,
        images.default_recall_ks,
    )
    assert dm.num_classes == images.num_classes == 2 and dm.track == "frozen"
    assert images.track == "end-to-end"
    feats, labels, cameras = next(iter(dm.train_dataloader()))
    assert feats.shape == (4, 8) and feats.dtype == torch.float32
    pk = PKSampler(images.splits()[0].labels, p=2, k=2, seed=0)
    first = next(iter(pk))
    assert labels.tolist() == [images.splits()[0].labels[i] for i in first]
    assert cameras.tolist() == [images.splits()[0].cameras[i] for i in first]
    images.setup()
    for stage in ("val", "test"):
        ours = getattr(dm, f"{stage}_dataloader")()
        theirs = getattr(images, f"{stage}_dataloader")()
        assert len(ours) == len(theirs) == (2 if mode == "reid" else 1)
        for mine, reference in zip(ours, theirs, strict=True):
            got = [torch.cat(column) for column in zip(*mine, strict=True)]
            want = [torch.cat(column) for column in zip(*reference, strict=True)]
            assert got[0].shape == (len(want[0]), 8)
            assert torch.equal(got[1], want[1]) and torch.equal(got[2], want[2])


def test_a_test_run_computes_only_the_test_features(tmp_path: Path) -> None:
    dm = CachedFeatureDataModule(synthetic(), CountingExtractor(), cache_dir=tmp_path)
    dm.setup("test")
    assert len(dm.test_dataloader()) == 1 and dm.extractor.images_seen == 9


def test_the_cache_folder_defaults_to_the_env_var(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("CIRCLEBENCH_CACHE", str(tmp_path / "env"))
    dm = CachedFeatureDataModule(synthetic(), CountingExtractor())
    dm.setup("test")
    assert len(list((tmp_path / "env").glob("*.npy"))) == 1


def test_errors_name_the_problem_and_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ValueError, match="views must be an int >= 1, got 0"):
        CachedFeatureDataModule(synthetic(), CountingExtractor(), views=0)

    class Images(nn.Module):
        def forward(self, images: Tensor) -> Tensor:
            return images

    with pytest.raises(ValueError, match=r"must return pooled features \[B, C\]"):
        features(synthetic(), tmp_path, Images())
    monkeypatch.setattr(feature_views, "batches_at_once", lambda device: 2)
    with pytest.raises(ValueError, match=r"must return pooled features \[B, C\]"):
        features(synthetic(), tmp_path / "threads", Images())  # raised in a worker thread
    monkeypatch.undo()

    class Unnamed(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 1

    class Opaque(SyntheticDataModule):
        def make_dataset(self, split, *, train):
            return Unnamed()

    with pytest.raises(TypeError, match="Unnamed has no __repr__"):
        features(Opaque(num_train_classes=2, num_test_classes=2, images_per_class=2), tmp_path)


@pytest.mark.parametrize("mode", ["coverage", "independent"])
def test_sampler_settings_are_the_image_datamodules(tmp_path: Path, mode: str) -> None:
    dm = features(synthetic(sampler_mode=mode, seed=3, batches_per_epoch=2), tmp_path)
    sampler = dm.train_dataloader().batch_sampler.batches
    assert (sampler.mode, sampler.seed, sampler.p, sampler.k) == (mode, 3, 2, 2)


@pytest.mark.parametrize("carve", [{"val_classes": 1}, {"folds": 2, "fold": 1}])
def test_every_setting_of_the_image_datamodule_is_taken_by_name(
    tmp_path: Path, carve: dict[str, int]
) -> None:
    """The frozen track copies each `RetrievalDataModule` argument from the image DataModule's
    attribute of the same name (set here away from its default); only the workers become 0."""
    given = dict(p=3, k=2, image_size=(8, 10), eval_batch_size=7, seed=5, batches_per_epoch=2,
                 sampler_mode="independent", num_workers=1) | carve  # fmt: skip
    images = synthetic(**given)
    dm = CachedFeatureDataModule(images, CountingExtractor(), cache_dir=tmp_path / "cache")
    shared = set(inspect.signature(RetrievalDataModule.__init__).parameters) - {"self", "root"}
    assert shared == {*given, "val_classes", "folds", "fold"}  # a new one: give it a value
    copied = shared - {"num_workers"}
    assert {n: getattr(dm, n) for n in copied} == {n: getattr(images, n) for n in copied}
    assert {n: getattr(dm, n) for n in carve} == carve
    assert (dm.num_workers, images.num_workers) == (0, 1)
