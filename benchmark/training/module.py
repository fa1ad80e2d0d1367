"""MetricLearningModule: an embedder, a pair-similarity loss, their optimiser, retrieval evaluation.

Training: P-K batch → embedder → loss (in fp32, outside autocast) → `train/loss` and the loss's
statistics. Evaluation (validation and test alike): every rank embeds its shard of the query
(loader 0) and gallery (loader 1) sets in float32, even under `bf16-mixed` (a checkpoint scores
the same whatever precision trained it); the shards are gathered and de-duplicated, and rank 0
computes the metrics (`RetrievalEvaluator`, on the Trainer's device) and sends them to the
others. They are logged in percent (`val/R@1`, `test/mAP`), as in results rows.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, cast

import pytorch_lightning as pl
import torch
from pytorch_lightning.cli import LRSchedulerCallable, OptimizerCallable
from torch import Tensor, nn
from torch.utils.data import DistributedSampler

from benchmark.evaluation import RetrievalEvaluator
from benchmark.evaluation.evaluator import EvaluationReport
from benchmark.evaluation.hardest_pairs import HardestPairs
from benchmark.evaluation.metrics import DEFAULT_METRICS
from benchmark.evaluation.rerank import RerankMethod
from benchmark.training.embedders import EmbedderBase
from benchmark.training.nvml import skip_absent_nvml
from core.protocols import RetrievalProtocol
from datamodules.base import RetrievalDataModule
from losses import MetricLoss


@dataclass(frozen=True)
class TestResult:
    """What a test epoch measured: the evaluator's report and the hardest-pair similarities."""

    __test__ = False  # not a pytest test class, despite its name

    report: EvaluationReport
    hardest: HardestPairs


class MetricLearningModule(pl.LightningModule):
    """Train `embedder` with `loss`; evaluate retrieval on the datamodule's query/gallery sets.

    Args:
        embedder: images [B, 3, H, W] -> embeddings [B, D], with its parameters split into
            `backbone_parameters()` and `head_parameters()` (`EmbedderBase`).
        loss: `forward(embeddings [B, D], labels [B]) -> scalar` with `last_stats` (`losses`).
        optimizer: called with the parameter groups backbone (split by the embedder's
            `backbone_parameter_groups()`, each at `backbone_lr` times its scale), head at
            `head_lr` and loss at `loss_lr`; an `lr` given to it is overridden.
        lr_scheduler: called with the optimiser; stepped once per epoch.
        freeze_backbone_epochs: a head warm-up: for the first N epochs the backbone gets no
            gradients (and its forward pass builds no graph), so the head and the loss's
            proxies adapt to the pretrained features before fine-tuning moves them.
        recall_ks: Recall@K list; None takes the datamodule's `default_recall_ks`.
        protocol: evaluation protocol; None takes the datamodule's.
        eval_backend: `RetrievalEvaluator` backend, "auto", "torch" or "faiss" (same metrics).
        similarity_queries: test queries whose hardest s_p / s_n go to `similarities.npz`.
        eval_metrics: metric names (`benchmark.evaluation.metrics.METRICS`, e.g.
            `[recall, mAP, mINP]`); None takes the evaluator's defaults.
        rerank: "k-reciprocal" (Zhong et al. 2017, k1=20, k2=6, λ=0.3; `query_gallery` only);
            None ranks by cosine similarity.
    """

    def __init__(
        self,
        embedder: EmbedderBase,
        loss: MetricLoss,
        optimizer: OptimizerCallable = torch.optim.AdamW,
        lr_scheduler: LRSchedulerCallable | None = None,
        backbone_lr: float = 1e-4,
        head_lr: float = 1e-3,
        loss_lr: float = 1e-2,
        freeze_backbone_epochs: int = 0,
        recall_ks: list[int] | None = None,
        protocol: RetrievalProtocol | None = None,
        eval_backend: str = "auto",
        similarity_queries: int = 2000,
        eval_metrics: list[str] | None = None,
        rerank: RerankMethod | None = None,
    ) -> None:
        super().__init__()
        if isinstance(freeze_backbone_epochs, bool) or not (
            isinstance(freeze_backbone_epochs, int) and freeze_backbone_epochs >= 0
        ):
            raise ValueError(
                f"freeze_backbone_epochs must be an int >= 0, got {freeze_backbone_epochs!r}"
            )
        self.save_hyperparameters()
        self.embedder = embedder
        self.loss = loss
        self.optimizer = optimizer
        self.lr_scheduler = lr_scheduler
        self._evaluator: RetrievalEvaluator | None = None
        # per evaluation loader: (batch index, embeddings [b, D], labels [b], cameras [b]) per batch
        self._eval_parts: dict[int, list[tuple[int, Tensor, Tensor, Tensor]]] = {}
        self.test_result: TestResult | None = None  # set by each test epoch; read by the CLI

    def forward(self, images: Tensor) -> Tensor:
        """Embeddings [B, D] (not normalised) of images [B, 3, H, W] in [0, 1]."""
        return self.embedder(images)

    @property
    def evaluator(self) -> RetrievalEvaluator:
        """The evaluator `setup` built for the datamodule's protocol."""
        if self._evaluator is None:
            raise RuntimeError(
                "MetricLearningModule: no evaluator before setup(); run it through a Trainer"
            )
        return self._evaluator

    def setup(self, stage: str) -> None:
        skip_absent_nvml()
        datamodule = getattr(self.trainer, "datamodule", None) if self._trainer else None
        protocol = self.hparams["protocol"] or getattr(datamodule, "protocol", None)
        ks = self.hparams["recall_ks"] or getattr(datamodule, "default_recall_ks", None)
        if protocol is None or not ks:
            raise ValueError(
                "MetricLearningModule: no evaluation protocol/Recall@K list; use a "
                "RetrievalDataModule or pass --model.protocol and --model.recall_ks"
            )
        self.protocol: RetrievalProtocol = protocol
        metrics = self.hparams["eval_metrics"]
        self._evaluator = RetrievalEvaluator(
            protocol,
            tuple(ks),
            DEFAULT_METRICS if metrics is None else tuple(metrics),
            backend=self.hparams["eval_backend"],
            device=evaluation_device(self._trainer),
            rerank=self.hparams["rerank"],
        )
        if stage != "fit":
            return
        num_classes = getattr(datamodule, "num_classes", None)
        if num_classes is not None:
            check_num_classes(self.loss, int(num_classes))
        # No validation split (val_classes=0, no folds): validation would run nothing, and
        # Lightning would warn on every run that the list of its loaders is empty.
        if isinstance(datamodule, RetrievalDataModule) and datamodule.splits()[1] is None:
            self.trainer.limit_val_batches = 0

    def configure_optimizers(self):
        backbone = self.embedder.backbone_parameter_groups()  # (params, lr scale), e.g. by layer
        groups = [
            (
                "backbone" if len(backbone) == 1 else f"backbone.{i}",
                params,
                self.hparams.backbone_lr * scale,
            )
            for i, (params, scale) in enumerate(backbone)
        ]
        groups += [
            ("head", self.embedder.head_parameters(), self.hparams.head_lr),
            ("loss", self.loss.parameters(), self.hparams.loss_lr),
        ]
        param_groups = [
            {"name": name, "params": trainable, "lr": lr}
            for name, params, lr in groups
            if (trainable := [p for p in params if p.requires_grad])
        ]
        grouped = {id(p) for g in param_groups for p in g["params"]}
        missing = [
            n for n, p in self.named_parameters() if p.requires_grad and id(p) not in grouped
        ]
        if missing:
            raise ValueError(
                f"MetricLearningModule: trainable parameters in no optimiser group: {missing[:5]}; "
                "the embedder's backbone_parameters() and head_parameters() must cover them"
            )
        optimizer = self.optimizer(param_groups)
        if self.lr_scheduler is None:
            return optimizer
        scheduler = self.lr_scheduler(optimizer)
        config = {"scheduler": scheduler, "interval": "epoch"}
        if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            # Lightning steps it with a logged value: the one Lightning's CLI class names, or R@1
            config["monitor"] = getattr(scheduler, "monitor", "val/R@1")
        return {"optimizer": optimizer, "lr_scheduler": config}

    def on_train_start(self) -> None:
        # the backbone's trainable parameters, before the warm-up switches them off
        self._backbone_trainable = list(self.embedder.backbone_parameters())

    def on_train_epoch_start(self) -> None:
        warming_up = self.current_epoch < self.hparams["freeze_backbone_epochs"]
        for parameter in self._backbone_trainable:
            parameter.requires_grad_(not warming_up)

    def training_step(self, batch: Sequence[Tensor], batch_idx: int) -> Tensor:
        images, labels, _ = batch
        embeddings = self.embedder(images)  # [B, D], bf16/fp16 under mixed precision
        with torch.autocast(self.device.type, enabled=False):  # losses overflow in half at γ=256
            loss = self.loss(embeddings.float(), labels)
        if self.trainer.progress_bar_callback is not None:
            self.log("train/loss", loss, prog_bar=True, logger=False, batch_size=len(labels))
        self._log_step(loss)
        return loss

    def _log_step(self, loss: Tensor) -> None:
        """Write this step's loss and `last_stats` to the loggers as `train/*`, at Lightning's
        `log_every_n_steps` (the stats are read only then: some losses compute them lazily),
        straight to the loggers: `self.log`'s bookkeeping costs as much as a small step, and
        per-step values need no reduction (docs/benchmarks/training.md)."""
        step = self.global_step  # optimiser steps before this one
        every = getattr(self.trainer, "log_every_n_steps", 1)  # set by Lightning, not declared
        if not self.loggers or not every or (step + 1) % every:
            return
        values = {"loss": loss.detach(), **self.loss.last_stats}
        scalars = torch.stack([v.float() for v in values.values()]).tolist()  # one sync
        metrics = {f"train/{k}": float(x) for k, x in zip(values, scalars, strict=True)}
        metrics["epoch"] = self.current_epoch
        for logger in self.loggers:
            logger.log_metrics(metrics, step=step)

    # ---- evaluation: a test epoch runs as a validation epoch does -----------------------------
    def on_validation_epoch_start(self) -> None:
        self._eval_parts = {}

    def _eval_loaders(self) -> list:
        """[query] or [query, gallery]: the loaders of the running validation or test."""
        trainer = self.trainer
        loaders = trainer.test_dataloaders if trainer.testing else trainer.val_dataloaders
        return list(loaders) if isinstance(loaders, Sequence) else [loaders]

    def validation_step(self, batch: Sequence[Tensor], batch_idx: int, dataloader_idx: int = 0):
        loader = self._eval_loaders()[dataloader_idx]
        sharded = isinstance(getattr(loader, "sampler", None), DistributedSampler)
        if not sharded and batch_idx % self.trainer.world_size != self.global_rank:
            return  # every rank loads the whole set; each embeds every world_size-th batch
        images, labels, cameras = batch
        with torch.autocast(self.device.type, enabled=False):  # float32 under bf16-mixed too
            embeddings = self.embedder(images).float().detach()  # [b, D]
        parts = self._eval_parts.setdefault(dataloader_idx, [])
        parts.append((batch_idx, embeddings, labels, cameras))

    def on_validation_epoch_end(self) -> None:
        stage = "test" if self.trainer.testing else "val"
        loaders = self._eval_loaders()
        for idx, loader in enumerate(loaders):
            if len(loader) == 0:
                raise ValueError(
                    f"MetricLearningModule: {stage} loader {idx} ({['query', 'gallery'][idx]}) "
                    "is empty; the datamodule built an empty evaluation set"
                )
        query = self._gathered(0, loaders[0])
        gallery = self._gathered(1, loaders[1]) if len(loaders) > 1 else None
        if self.protocol == "query_gallery" and gallery is None:
            raise ValueError(
                f"MetricLearningModule: the query_gallery protocol needs two {stage} loaders "
                "[query, gallery]; the datamodule returned one"
            )
        # query_gallery: (q, q labels, g, g labels, q cams, g cams); same_set: (q, q labels)
        eval_args = (
            query[:2] if gallery is None else (*query[:2], *gallery[:2], query[2], gallery[2])
        )
        # Rank 0 evaluates and sends the metrics: every rank holds the same embeddings, and
        # each evaluating them (with all its cores, or its own GPU) only multiplied the cost.
        mine = self.evaluator.evaluate(*eval_args) if self.global_rank == 0 else None
        metrics = cast(dict[str, float], self.trainer.strategy.broadcast(mine, src=0))
        percent = {key: 100.0 * float(value) for key, value in metrics.items()}
        self.log_dict({f"{stage}/{k}": v for k, v in percent.items()}, sync_dist=True)
        if stage == "test" and self.global_rank == 0:  # rank 0 writes the results row
            hardest = self.evaluator.hardest_pairs(
                *eval_args, max_queries=self.hparams["similarity_queries"]
            )
            report = cast(EvaluationReport, self.evaluator.last_report)  # set by evaluate()
            self.test_result = TestResult(report, hardest)
        self._eval_parts = {}

    on_test_epoch_start = on_validation_epoch_start
    test_step = validation_step
    on_test_epoch_end = on_validation_epoch_end

    def _gathered(self, loader_idx: int, loader) -> tuple[Tensor, Tensor, Tensor]:
        """This loader's embeddings, labels, cameras from all ranks, in dataset order, once each."""
        parts = self._eval_parts.get(loader_idx, [])
        if parts:
            batch_ids, *columns = zip(*parts, strict=True)
            embeddings, labels, cameras = (torch.cat(t) for t in columns)
        else:  # fewer batches than ranks (e.g. fast_dev_run): this rank still joins the gather
            batch_ids, embeddings = (), torch.empty(0, 0, device=self.device)
            labels = cameras = torch.empty(0, dtype=torch.long, device=self.device)
        if self.trainer.world_size == 1:  # one rank embedded every batch, in order
            return embeddings, labels, cameras
        # Eval samplers do not shuffle: batch b of this rank holds dataset items batches[b].
        sampler = loader.batch_sampler
        batches = (
            [list(b) for b in sampler] if sampler is not None else [[i] for i in loader.sampler]
        )
        order = torch.tensor([i for b in batch_ids for i in batches[b]], dtype=torch.long)
        index, embeddings, labels, cameras = (
            self._all_gather_rows(t) for t in (order, embeddings, labels, cameras)
        )
        index, perm = index.sort(stable=True)
        first = torch.ones_like(index, dtype=torch.bool)
        first[1:] = index[1:] != index[:-1]  # a DistributedSampler pads with repeated items
        keep = perm[first]
        return embeddings[keep], labels[keep], cameras[keep]

    def _all_gather_rows(self, rows: Tensor) -> Tensor:
        """Concatenate `rows` [n_r, ...] of every rank r (n_r may differ, and be 0 as [0, 0])."""
        shapes = cast(Tensor, self.all_gather(torch.tensor(rows.shape, device=self.device)))
        padded = rows.new_zeros(shapes.amax(dim=0).tolist())
        padded[tuple(slice(0, n) for n in rows.shape)] = rows
        gathered = cast(Tensor, self.all_gather(padded.to(self.device)))  # [W, max n, ...]
        return torch.cat([gathered[r, : int(shape[0])] for r, shape in enumerate(shapes)])


def evaluation_device(trainer: pl.Trainer | None) -> Literal["auto", "cpu", "cuda"]:
    """Where the evaluator runs: on CUDA when the Trainer trains there, else on the CPU (a CPU
    run on a GPU host stays off the GPU); "auto" outside a Trainer."""
    if trainer is None:
        return "auto"
    return "cuda" if trainer.strategy.root_device.type == "cuda" else "cpu"


def check_num_classes(loss: nn.Module, num_classes: int) -> None:
    """Raise if a class-level loss (proxies, centres) was built for another class count.

    A part taking `num_classes` (ours, a wrapped pytorch-metric-learning loss, a user's module)
    is checked when it or one of its modules keeps the count as a positive `num_classes`
    attribute; PML's ProxyNCALoss and NormalizedSoftmaxLoss keep 0 there, and go unchecked.
    """
    where, declared = _declared_num_classes(loss) or ("", num_classes)
    if declared != num_classes:
        name = loss.name if isinstance(loss, MetricLoss) else type(loss).__name__
        raise ValueError(
            f"{name} has num_classes={declared} but the training data has "
            f"{num_classes} classes; set --model.loss.init_args.{where}num_classes={num_classes}"
        )


def _declared_num_classes(part: nn.Module, where: str = "") -> tuple[str, int] | None:
    """(config path prefix, class count) of the first part taking `num_classes`, if any."""
    params = inspect.signature(type(part).__init__).parameters
    if "num_classes" in params:
        counts = (getattr(m, "num_classes", None) for m in part.modules())
        count = next((n for n in counts if isinstance(n, int) and n > 0), None)
        return None if count is None else (where, count)
    for name, child in part.named_children():
        if name in params:  # a part given as a constructor argument, like Circle's `source`
            found = _declared_num_classes(child, f"{where}{name}.init_args.")
            if found is not None:
                return found
    return None
