"""MetricLearningModule: parameter groups, logged statistics, evaluation metrics, errors."""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pandas as pd
import pytest
import pytorch_lightning as pl
import torch

from benchmark.evaluation import RetrievalEvaluator
from benchmark.training.embedders import Embedder
from benchmark.training.module import (
    MetricLearningModule,
    check_num_classes,
    evaluation_device,
)
from losses import CenterLoss, CircleLoss, ClassProxies, NormFaceLoss
from tests.benchmark.training._tiny_data import TinyDataModule, TinyReIDDataModule

BACKBONE = "test_efficientnet"  # timm's ~0.1 M-parameter test model: fast on any CPU
# Outside the CLI, save_hyperparameters() stores the embedder and loss objects themselves.
pytestmark = pytest.mark.filterwarnings("ignore:Attribute '(embedder|loss)' is an instance")


def make_module(loss: torch.nn.Module | None = None, **kwargs) -> MetricLearningModule:
    embedder = Embedder(BACKBONE, embedding_dim=8)
    return MetricLearningModule(embedder, loss or CircleLoss(m=0.4, gamma=80), **kwargs)


def make_trainer(**kwargs) -> pl.Trainer:
    defaults = dict(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        use_distributed_sampler=False,
        num_sanity_val_steps=0,
    )
    return pl.Trainer(**{**defaults, **kwargs})


def test_optimizer_has_backbone_head_and_loss_groups_with_their_own_rates() -> None:
    loss = CircleLoss(m=0.25, gamma=64, source=ClassProxies(num_classes=4, embedding_dim=8))
    module = make_module(loss, backbone_lr=1e-5, head_lr=1e-3, loss_lr=0.5)
    optimizer = module.configure_optimizers()
    groups = {g["name"]: g for g in optimizer.param_groups}
    assert {name: g["lr"] for name, g in groups.items()} == {
        "backbone": 1e-5,
        "head": 1e-3,
        "loss": 0.5,
    }
    assert any(p is loss.source.proxies for p in groups["loss"]["params"])
    assert any("proxies" in key for key in module.state_dict())  # proxies are checkpointed


def test_a_parameter_outside_every_group_is_an_error() -> None:
    module = make_module()
    module.embedder.extra = torch.nn.Linear(2, 2)  # neither backbone nor head
    with pytest.raises(ValueError, match="in no optimiser group"):
        module.configure_optimizers()


def test_num_classes_that_disagree_with_the_data_name_the_override() -> None:
    loss = CircleLoss(source=ClassProxies(num_classes=7, embedding_dim=8))
    with pytest.raises(ValueError, match=r"source\.init_args\.num_classes=4"):
        check_num_classes(loss, 4)
    with pytest.raises(
        ValueError, match=r"has num_classes=7 .*--model\.loss\.init_args\.num_classes=4$"
    ):
        check_num_classes(NormFaceLoss(num_classes=7, embedding_dim=8), 4)
    with pytest.raises(ValueError, match=r"CenterLoss has num_classes=7"):
        check_num_classes(CenterLoss(num_classes=7, embedding_dim=8), 4)
    check_num_classes(CenterLoss(num_classes=4, embedding_dim=8), 4)
    check_num_classes(CircleLoss(), 4)  # pair-wise losses have no class count


@pytest.mark.parametrize(("every", "steps"), [(1, [0, 1, 2, 3, 4, 5]), (2, [1, 3, 5])])
def test_fit_logs_loss_and_similarity_statistics_at_lightnings_steps(
    tmp_path, every: int, steps: list[int]
) -> None:
    torch.manual_seed(0)
    data = TinyDataModule(p=2, k=2, batches_per_epoch=3)
    logger = pl.loggers.CSVLogger(tmp_path, name="", version="")
    trainer = make_trainer(max_epochs=2, log_every_n_steps=every, logger=logger)
    trainer.fit(make_module(), datamodule=data)
    log = pd.read_csv(tmp_path / "metrics.csv")
    train = log.dropna(subset=["train/loss"])
    assert train["step"].tolist() == steps  # Lightning's numbering: optimiser steps before
    assert train["epoch"].tolist() == [s // 3 for s in steps]
    for key in ("train/loss", "train/sp_mean", "train/sn_mean", "train/active_fraction"):
        assert np.isfinite(train[key]).all(), key
    assert trainer.global_step == 6


def test_the_progress_bar_shows_the_training_loss() -> None:
    data = TinyDataModule(p=2, k=2, batches_per_epoch=2)
    trainer = make_trainer(max_epochs=1, enable_progress_bar=True)
    trainer.fit(make_module(), datamodule=data)
    assert torch.isfinite(torch.as_tensor(trainer.progress_bar_metrics["train/loss"]))


@pytest.mark.parametrize("datamodule_class", [TinyDataModule, TinyReIDDataModule])
def test_test_metrics_are_the_evaluator_on_all_embeddings_in_percent(datamodule_class) -> None:
    torch.manual_seed(0)
    data = datamodule_class(eval_batch_size=3)  # several batches per set
    module = make_module()
    metrics = make_trainer().test(module, datamodule=data, verbose=False)[0]  # one per loader
    data.setup()
    module.eval()
    with torch.no_grad():
        sets = [
            [torch.cat(t) for t in zip(*[(module(x), y, c) for x, y, c in loader], strict=True)]
            for loader in data.test_dataloader()
        ]
    query, gallery = sets[0], (sets[1] if len(sets) > 1 else [None] * 3)
    cams = (query[2], gallery[2]) if len(sets) > 1 else (None, None)
    expected = RetrievalEvaluator(data.protocol, data.default_recall_ks).evaluate(
        query[0], query[1], gallery[0], gallery[1], query_cams=cams[0], gallery_cams=cams[1]
    )
    assert set(metrics) == {f"test/{k}" for k in expected}
    for key, value in expected.items():
        assert metrics[f"test/{key}"] == pytest.approx(100 * value, abs=1e-4)
    result = module.test_result
    assert len(result.hardest.sp) == len(result.hardest.sn) > 0
    assert 100 * result.report.metrics["R@1"] == pytest.approx(metrics["test/R@1"], abs=1e-4)


def test_validation_runs_only_on_the_carved_classes_and_logs_val_metrics() -> None:
    data = TinyDataModule(classes=5, p=2, k=2, val_classes=2, batches_per_epoch=1)
    module = make_module()
    trainer = make_trainer(max_epochs=1)
    trainer.fit(module, datamodule=data)
    assert "val/R@1" in trainer.callback_metrics
    assert not any(key.startswith("test/") for key in trainer.callback_metrics)


def test_reduce_lr_on_plateau_steps_on_validation_recall() -> None:
    plateau = functools.partial(
        torch.optim.lr_scheduler.ReduceLROnPlateau, mode="max", patience=0, factor=0.5
    )
    trainer = make_trainer(max_epochs=2)
    trainer.fit(
        make_module(lr_scheduler=plateau),
        TinyDataModule(6, p=2, k=2, val_classes=2, batches_per_epoch=1),
    )
    assert trainer.lr_scheduler_configs[0].monitor == "val/R@1"


def test_recall_ks_and_protocol_can_override_the_datamodule() -> None:
    module = make_module(recall_ks=[1, 3])
    (metrics,) = make_trainer().test(module, datamodule=TinyDataModule(), verbose=False)
    assert {"test/R@1", "test/R@3"} <= set(metrics) and "test/R@2" not in metrics


def test_query_gallery_with_a_single_loader_is_an_error() -> None:
    module = make_module(protocol="query_gallery")
    with pytest.raises(ValueError, match=r"needs two test loaders"):
        make_trainer().test(module, datamodule=TinyDataModule(), verbose=False)


class _BackboneSnapshots(pl.Callback):
    """The backbone's first weight at every epoch end (to see when fine-tuning starts)."""

    def __init__(self) -> None:
        self.weights: list[torch.Tensor] = []

    def on_train_epoch_end(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        self.weights.append(module.embedder.backbone.conv_stem.weight.detach().clone())


def test_the_head_warm_up_freezes_the_backbone_for_its_epochs_only() -> None:
    torch.manual_seed(0)
    module = make_module(freeze_backbone_epochs=2)
    start = module.embedder.backbone.conv_stem.weight.detach().clone()
    head = module.embedder.projection.weight.detach().clone()
    snapshots = _BackboneSnapshots()
    trainer = make_trainer(max_epochs=3, callbacks=[snapshots])
    trainer.fit(module, datamodule=TinyDataModule(p=2, k=2, batches_per_epoch=2))
    first, second, third = snapshots.weights
    assert torch.equal(first, start) and torch.equal(second, start)  # warm-up: untouched
    assert not torch.equal(third, start)  # then fine-tuned
    assert not torch.equal(module.embedder.projection.weight, head)  # the head trained all along
    assert all(p.requires_grad for p in module.embedder.backbone.parameters())


@pytest.mark.parametrize("epochs", [-1, 1.5, True])
def test_freeze_backbone_epochs_must_be_a_count(epochs: object) -> None:
    with pytest.raises(ValueError, match="freeze_backbone_epochs must be an int >= 0"):
        make_module(freeze_backbone_epochs=epochs)


def test_eval_metrics_and_rerank_reach_the_evaluator_and_its_report() -> None:
    torch.manual_seed(0)
    data = TinyReIDDataModule(eval_batch_size=3)  # 8 queries, 8 gallery: fewer than k1 + 1
    module = make_module(eval_metrics=["recall", "mAP", "mINP"], rerank="k-reciprocal")
    metrics = make_trainer().test(module, datamodule=data, verbose=False)[0]  # one per loader
    assert set(metrics) == {"test/R@1", "test/R@5", "test/mAP", "test/mINP"}
    assert module.test_result.report.rerank == "k-reciprocal k1=20 k2=6 lambda=0.3"


def test_rerank_with_a_same_set_datamodule_is_an_error() -> None:
    module = make_module(rerank="k-reciprocal")
    with pytest.raises(ValueError, match="needs protocol='query_gallery', got 'same_set'"):
        make_trainer().test(module, datamodule=TinyDataModule(), verbose=False)


def test_a_cpu_run_on_a_gpu_host_stays_on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """`accelerator: cpu` where CUDA is visible: no pinned batches, the evaluator on the CPU
    (this torch has no usable CUDA, so any CUDA allocation would fail the run)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    # torch's optimiser asks a visible GPU whether it is capturing a graph: there is none here
    # (the check's name before torch 2.9 is the second)
    for check in ("_accelerator_graph_capture_health_check", "_cuda_graph_capture_health_check"):
        if hasattr(torch.optim.Optimizer, check):
            monkeypatch.setattr(torch.optim.Optimizer, check, lambda self: None)
    data = TinyDataModule(classes=5, p=2, k=2, val_classes=2, batches_per_epoch=1)
    module = make_module()
    trainer = make_trainer(max_epochs=1)
    trainer.fit(module, datamodule=data)
    trainer.test(module, datamodule=data, verbose=False)
    assert module.evaluator.device == "cpu"
    assert module.test_result is not None
    assert module.test_result.report.backend.startswith("torch-cpu")
    loaders = [data.train_dataloader(), *data.val_dataloader(), *data.test_dataloader()]
    assert not any(loader.pin_memory for loader in loaders)


def test_evaluation_embeds_in_float32_under_bf16_mixed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint scores the same whatever precision it trains under: the evaluation
    embeddings of a bf16-mixed Trainer are the float32 ones, bit for bit."""
    seen: list[torch.Tensor] = []
    evaluate = RetrievalEvaluator.evaluate

    def recording(self, query_emb, *args, **kwargs):
        seen.append(query_emb.clone())
        return evaluate(self, query_emb, *args, **kwargs)

    monkeypatch.setattr(RetrievalEvaluator, "evaluate", recording)
    torch.manual_seed(0)
    module, data = make_module(), TinyDataModule(eval_batch_size=3)
    for precision in ("32-true", "bf16-mixed"):
        make_trainer(precision=precision).test(module, datamodule=data, verbose=False)
    assert seen[0].dtype == seen[1].dtype == torch.float32
    assert torch.equal(seen[0], seen[1])


def test_evaluation_device_follows_the_trainer() -> None:
    assert evaluation_device(None) == "auto"
    assert evaluation_device(make_trainer()) == "cpu"


@pytest.mark.parametrize("val_classes", [0, 2])
def test_validation_runs_only_where_there_is_a_validation_split(val_classes: int) -> None:
    """Without one, the fit skips validation outright: Lightning warned on every run that the
    list of validation loaders was empty. With one, each epoch validates."""
    data = TinyDataModule(classes=5, p=2, k=2, val_classes=val_classes, batches_per_epoch=1)
    trainer = make_trainer(max_epochs=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(make_module(), datamodule=data)
    assert not [w for w in caught if "across ranks is zero" in str(w.message)]
    assert trainer.limit_val_batches == (0 if val_classes == 0 else 1.0)
    assert ("val/R@1" in trainer.callback_metrics) == (val_classes > 0)
