"""SyntheticDataModule: deterministic rendering, distinct classes, both modes' protocols."""

from __future__ import annotations

from collections import Counter

import pytest
import pytorch_lightning as pl
import torch
from torch import nn

from datamodules import SyntheticDataModule
from datamodules._render import camera_look, class_look, render_image

SMALL = {
    "num_train_classes": 8,
    "num_test_classes": 5,
    "images_per_class": 6,
    "p": 4,
    "k": 3,
    "image_size": 24,
    "num_workers": 0,
    "eval_batch_size": 16,
}


def all_images(loader) -> torch.Tensor:
    return torch.cat([batch[0] for batch in loader])


def test_same_render_seed_gives_identical_images_and_another_differs() -> None:
    a, b = SyntheticDataModule(**SMALL), SyntheticDataModule(**SMALL)
    (qa,), (qb,) = a.test_dataloader(), b.test_dataloader()
    images = all_images(qa)
    assert torch.equal(images, all_images(qb))
    assert images.shape == (5 * 6, 3, 24, 24) and images.dtype == torch.float32
    assert images.min() >= 0.0 and images.max() <= 1.0
    (qc,) = SyntheticDataModule(**SMALL, render_seed=1).test_dataloader()
    assert not torch.equal(images, all_images(qc))


def test_an_image_is_a_function_of_its_class_and_item_only() -> None:
    dataset = SyntheticDataModule(**SMALL).train_dataloader().dataset
    image, label, camera = dataset[7]
    assert (label, camera) == (1, -1)
    expected = render_image(class_look(0, 1), 7, (24, 24))
    torch.testing.assert_close(image, torch.from_numpy(expected).permute(2, 0, 1))
    assert not torch.equal(image, dataset[8][0])  # another pose of the same class


def test_non_square_size() -> None:
    (query,) = SyntheticDataModule(**SMALL | {"image_size": (32, 16)}).test_dataloader()
    assert next(iter(query))[0].shape == (16, 3, 32, 16)


def test_classes_have_distinct_looks_and_train_test_are_disjoint() -> None:
    looks = [class_look(0, c) for c in range(300)]
    assert len(set(looks)) == 300
    assert {look.shape for look in looks} == {0, 1, 2}
    assert {look.texture for look in looks} == {0, 1, 2}
    dm = SyntheticDataModule(**SMALL)
    train, _, test = dm.splits()
    train_classes = {g // 6 for g in train.items}
    assert train_classes == set(range(8)) and {g // 6 for g in test.query.items} == set(
        range(8, 13)
    )


def test_fine_grained_mode_is_same_set_without_cameras() -> None:
    dm = SyntheticDataModule(**SMALL)
    assert (dm.protocol, dm.default_recall_ks, dm.dataset_name) == (
        "same_set",
        (1, 2, 4, 8),
        "synthetic",
    )
    assert dm.num_classes == 8
    (query,) = dm.test_dataloader()
    assert set(torch.cat([b[2] for b in query]).tolist()) == {-1}
    images, labels, _ = next(iter(dm.train_dataloader()))
    assert images.shape == (12, 3, 24, 24) and sorted(Counter(labels.tolist()).values()) == [3] * 4


def test_reid_mode_has_cameras_and_a_query_gallery_split() -> None:
    dm = SyntheticDataModule(**SMALL, mode="reid", num_cameras=3)
    assert (dm.protocol, dm.default_recall_ks, dm.dataset_name) == (
        "query_gallery",
        (1, 5, 10),
        "synthetic_reid",
    )
    assert SyntheticDataModule.protocol == "same_set"  # the mode is per instance
    query, gallery = dm.test_dataloader()
    q_labels, q_cams = (torch.cat([b[i] for b in query]).tolist() for i in (1, 2))
    g_labels, g_cams = (torch.cat([b[i] for b in gallery]).tolist() for i in (1, 2))
    assert len(q_labels) == 5 * 3 and len(g_labels) == 5 * (6 - 3)
    assert sorted(zip(q_labels, q_cams, strict=True)) == [
        (c, k) for c in range(8, 13) for k in range(3)
    ]
    for label, cam in zip(q_labels, q_cams, strict=True):  # a valid match in another camera
        assert any(gl == label and gc != cam for gl, gc in zip(g_labels, g_cams, strict=True))
    _, _, cameras = next(iter(dm.train_dataloader()))
    assert set(cameras.tolist()) <= {0, 1, 2}


def test_cameras_change_colour_cast_and_blur() -> None:
    look = class_look(0, 3)
    plain = render_image(look, 5, (32, 32))
    views = [render_image(look, 5, (32, 32), camera=camera_look(0, c)) for c in range(3)]
    assert all(abs(v - plain).mean() > 0.01 for v in views)
    assert abs(views[0] - views[1]).mean() > 0.01
    assert len({camera_look(0, c) for c in range(8)}) == 8


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"mode": "person"}, "mode must be 'fine_grained' or 'reid'"),
        ({"mode": "reid", "num_cameras": 1}, "needs num_cameras >= 2"),
        ({"images_per_class": 0}, "must be >= 1"),
    ],
)
def test_bad_arguments_raise(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        SyntheticDataModule(**SMALL | kwargs)


class _EpochProbe(pl.LightningModule):
    """Records the classes of each epoch's first batch."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(3, 2)
        self.first_batches: list[list[int]] = []

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        if batch_idx == 0:
            self.first_batches.append(batch[1].tolist())
        return self.layer(batch[0].mean((2, 3))).pow(2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


@pytest.mark.filterwarnings("ignore:You passed in a `val_dataloader` but have no `validation_step`")
def test_trainer_advances_the_sampler_epoch() -> None:
    trainer = pl.Trainer(
        max_epochs=3,
        use_distributed_sampler=False,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
    )
    probe = _EpochProbe()
    trainer.fit(probe, SyntheticDataModule(**SMALL))
    assert trainer.train_dataloader.batch_sampler.epoch == 2
    assert len(probe.first_batches) == 3 and len({tuple(b) for b in probe.first_batches}) == 3
