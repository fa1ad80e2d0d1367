"""The measuring side of `python -m benchmark.bench gpu`: each planned step, on its device.

`bench gpu` runs it on CUDA; every step also runs on the CPU (the tests check the wiring there,
on small sizes), since nothing here but the timings depends on the device.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from itertools import repeat
from pathlib import Path
from typing import Any, cast

import torch
from torch.utils.data import DataLoader, Dataset

from benchmark.bench.data import write_jpeg_folder
from benchmark.bench.eval import faiss_top_k
from benchmark.bench.eval_data import CASES, evaluator, make_data, scaled_case
from benchmark.bench.gpu_steps import Result, Step
from benchmark.bench.timing import gpu_peak, images_per_s, median_seconds
from benchmark.bench.train import bare_images_per_s, configured, lightning_images_per_s
from benchmark.evaluation import RetrievalEvaluator
from benchmark.training.module import MetricLearningModule
from datamodules import CUB200DataModule, SyntheticDataModule
from datamodules.base import RetrievalDataModule, Split

_LOADER_BATCHES = 20  # the fewest batches in a timed pass of a loader


class PreRenderedDataModule(SyntheticDataModule):
    """Generated images rendered once and served from memory: the fits then time training, not
    the renderer (the `loaders` section times rendering and JPEG decoding on their own).
    `rendered` keeps them for the next module of the same settings (each training run builds
    its own)."""

    unsaved_arguments = ("rendered",)

    def __init__(self, *args: Any, rendered: dict[tuple, Dataset], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rendered = rendered

    def make_dataset(self, split: Split, *, train: bool) -> Dataset:
        key = (train, self.image_size, tuple(split.items))  # synthetic items are seeds
        if key not in self.rendered:
            made = super().make_dataset(split, train=train)
            # A list is a map-style dataset; loader workers share it through fork.
            self.rendered[key] = cast(Dataset, [made[i] for i in range(len(split))])
        return self.rendered[key]


class Runner:
    """Measures `Step`s on `device`; builds the model afresh for every training run (same seed)
    and keeps each evaluation case's data and CPU answer for its paths."""

    def __init__(self, args: argparse.Namespace, device: torch.device) -> None:
        self.args, self.device = args, device
        self._cases: dict[str, tuple[dict[str, Any], dict[str, float]]] = {}
        self._rendered: dict[tuple, Dataset] = {}
        self._tmp = tempfile.TemporaryDirectory()
        self.kind = device.type
        torch.backends.cudnn.benchmark = True  # fixed shapes: cuDNN picks its fastest kernels

    def run(self, step: Step) -> Result:
        if step.section == "train":
            return self._train(step)
        if step.section == "loaders":
            return self._loader(step)
        return self._evaluate(step)

    # ---- training ----------------------------------------------------------------------------
    def _model(self, channels_last: bool) -> tuple[MetricLearningModule, RetrievalDataModule]:
        """The config's module (seeded) and generated data of its P×K and image size."""
        torch.manual_seed(0)
        cli = configured(self.args.config, self._tmp.name)
        module, images = cli.model, cli.datamodule
        if channels_last:  # convolutions then run NHWC, the layout tensor cores want
            module = module.to(memory_format=torch.channels_last)
        data = PreRenderedDataModule(
            mode="fine_grained" if images.protocol == "same_set" else "reid",
            num_train_classes=2 * images.p,
            num_test_classes=2,
            images_per_class=2 * images.k,
            p=images.p,
            k=images.k,
            image_size=images.image_size,
            num_workers=self.args.workers,
            batches_per_epoch=self.args.steps + self.args.warmup,
            rendered=self._rendered,
        )
        return module, data

    def _train(self, step: Step) -> Result:
        module, data = self._model(step.channels_last)
        steps, warmup = self.args.steps, self.args.warmup
        if step.loop == "fit":
            rate, peak = gpu_peak(
                lambda: lightning_images_per_s(
                    module, data, steps, warmup, accelerator=self.kind, devices=1,
                    precision=step.precision,
                ),
                self.kind,
            )  # fmt: skip
            return Result(step, rate, peak)
        module.to(self.device)
        data.setup("fit")
        loader = self._pinned(data.train_dataloader())
        batches: Any = loader
        if step.loop == "compute":  # one batch on the GPU: no loading at all
            images, labels, cameras = next(iter(loader))
            batches = repeat((images.to(self.device), labels.to(self.device), cameras))
        bf16 = step.precision == "bf16-mixed"
        rate, peak = gpu_peak(
            lambda: bare_images_per_s(
                module.embedder, module.loss, batches, steps, warmup, bf16=bf16
            ),
            self.kind,
        )
        return Result(step, rate, peak)

    # ---- loaders -----------------------------------------------------------------------------
    def _loader(self, step: Step) -> Result:
        _, held = self._model(channels_last=False)
        # every worker busy several times over, so that start-up and the batches still in
        # flight at the end weigh little
        batches = max(_LOADER_BATCHES, 4 * self.args.workers)
        settings = {"p": held.p, "k": held.k, "image_size": held.image_size,
                    "num_workers": self.args.workers, "batches_per_epoch": batches}  # fmt: skip
        data: RetrievalDataModule = SyntheticDataModule(**settings)  # rendered as it is read
        if step.data == "jpeg":
            root = write_jpeg_folder(Path(self._tmp.name) / "jpeg", classes=32, per_class=20)
            data = CUB200DataModule(root, train_classes=31, **settings)
        data.setup("fit")
        # One pass after its first batch: the workers' start-up (and the first batch's wait)
        # stay out of it, as they do out of a long training epoch.
        loader = self._pinned(data.train_dataloader())
        return Result(step, images_per_s((len(batch[0]) for batch in loader), warmup=1))

    # ---- evaluation --------------------------------------------------------------------------
    def _case(self, name: str) -> tuple[dict[str, Any], dict[str, float]]:
        """The case's data and the CPU evaluator's metrics of it (computed once)."""
        if name not in self._cases:
            case = scaled_case(CASES[name], self.args.subset)
            data = make_data(case)
            cpu = RetrievalEvaluator(case.protocol, case.ks, case.metrics, device="cpu")  # type: ignore[arg-type]
            start = time.perf_counter()
            answer = cpu.evaluate(**data)
            seconds = time.perf_counter() - start
            print(f"  {name} on the CPU ({cpu.last_backend}): {seconds:.1f} s, the reference")
            self._cases[name] = (data, answer)
        return self._cases[name]

    def _evaluate(self, step: Step) -> Result:
        case = scaled_case(CASES[step.case], self.args.subset)
        data, answer = self._case(step.case)
        if step.path == "faiss-top-k":
            run = lambda: faiss_top_k(case, data, self.kind)  # noqa: E731
            _, peak = gpu_peak(run, self.kind)  # also the warm-up
            return Result(step, self._median(run), peak)
        ev = evaluator(case, step.path, self.kind)
        got, peak = gpu_peak(lambda: ev.evaluate(**data), self.kind)  # also the warm-up
        seconds = self._median(lambda: ev.evaluate(**data))
        return Result(step, seconds, peak, got == answer, ev.last_backend)

    def _median(self, fn: Any) -> float:
        def synced() -> None:
            fn()
            if self.kind == "cuda":
                torch.cuda.synchronize()

        return median_seconds(synced, warmup=0, repeat=self.args.repeat)

    def _pinned(self, loader: DataLoader) -> DataLoader:
        """`loader` with page-locked batches on CUDA, as a Trainer there gets them."""
        return DataLoader(
            loader.dataset,
            batch_sampler=loader.batch_sampler,
            num_workers=loader.num_workers,
            persistent_workers=loader.num_workers > 0,
            pin_memory=self.kind == "cuda",
        )
