"""Training throughput: the full `circlebench fit` pipeline vs a bare PyTorch loop, same run.

Three figures in images/s, for the same embedder, loss, optimiser and P-K batches:
* `lightning`: `Trainer.fit` of `MetricLearningModule` on the config's DataModule (data loading,
  logging every step, everything `circlebench fit` does but checkpoints and evaluation);
* `bare loop`: a plain `for images, labels, _ in loader: loss.backward(); opt.step()` over the
  same DataLoader, the baseline the ratio is taken against;
* `compute only`: the bare loop on one batch held in memory (no data loading at all).

The config runs on `--device` (auto: CUDA where visible), in the config's precision. On CUDA it
also measures ResNet50 at 224 px, P=16 K=4, Circle loss: float32 (named with its TF32 modes:
cuDNN convolutions are TF32 unless turned off) vs bf16 autocast with channels-last, bare loops on
an in-memory batch. Then, with `--cells N`, the leaderboard's cells per minute in both tracks and
the feature cache (`benchmark.bench.cells`). `python -m benchmark.bench gpu` is the fuller GPU
benchmark.
"""

from __future__ import annotations

import os
import tempfile
import time
from itertools import islice, repeat
from pathlib import Path

import pytorch_lightning as pl
import torch

from benchmark.bench import cells
from benchmark.bench.timing import bench_parser, images_per_s, machine, parsed_device
from benchmark.training.cli import CircleBenchCLI
from benchmark.training.embedders import Embedder
from core.devices import float32_modes, precision_label
from losses import CircleLoss

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
DEFAULT_CONFIG = EXPERIMENTS / "synthetic" / "fine_grained" / "circle.yaml"


class _StepClock(pl.Callback):
    """Time between consecutive training-batch ends (data loading included), after warm-up."""

    def __init__(self, warmup: int) -> None:
        self.warmup, self.images, self.seconds, self._last = warmup, 0, 0.0, 0.0

    def on_train_start(self, trainer, pl_module) -> None:
        self._last = time.perf_counter()  # the first timed step's start where warmup is 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        now = time.perf_counter()
        if trainer.global_step > self.warmup:
            self.images += len(batch[1])
            self.seconds += now - self._last
        self._last = now


def lightning_images_per_s(module, datamodule, steps: int, warmup: int, **trainer_args) -> float:
    clock = _StepClock(warmup)
    trainer = pl.Trainer(
        max_steps=steps + warmup,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        use_distributed_sampler=False,
        limit_val_batches=0,
        callbacks=[clock],
        **trainer_args,
    )
    trainer.fit(module, datamodule=datamodule)
    return clock.images / clock.seconds


def bare_images_per_s(embedder, loss, batches, steps: int, warmup: int, *, bf16=False) -> float:
    """Plain loop: forward, loss in fp32, backward, AdamW step, each step timed to its end;
    `batches` yields (x, y, cam), and the loop stops early where they run out."""
    device = next(embedder.parameters()).device
    params = [*embedder.parameters(), *loss.parameters()]
    optimizer = torch.optim.AdamW(params, lr=1e-4)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    embedder.train()

    def step(x: torch.Tensor, y: torch.Tensor) -> int:
        x, y = x.to(device, non_blocking=True), y.to(device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            embeddings = embedder(x)
        value = loss(embeddings.float(), y)
        optimizer.zero_grad(set_to_none=True)
        value.backward()
        optimizer.step()
        sync()
        return len(y)

    trained = (step(x, y) for x, y, _ in islice(batches, warmup + steps))
    return images_per_s(trained, warmup, sync)


def configured(config: Path, root: str) -> CircleBenchCLI:
    """The objects `config` builds (model, datamodule, config), nothing run, nothing logged."""
    args = ["--config", str(config), "--wandb=false", f"--trainer.default_root_dir={root}"]
    return CircleBenchCLI(args, run=False)


def config_throughput(config: Path, steps: int, warmup: int, device: torch.device) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cli = configured(config, tmp)
    module, data = cli.model, cli.datamodule
    data.setup("fit")
    fixed = next(iter(data.train_dataloader()))
    state = {k: v.clone() for k, v in module.state_dict().items()}
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    precision = cli.config["trainer"].get("precision") or "32-true"
    label = precision_label(str(precision), device.type)
    threads = torch.get_num_threads()
    print(f"config: {config.name}, {data.dataset_name}, {device.type}, {label}, {threads} threads")
    print(f"  load average {load} (other processes slow every figure alike)")
    lightning = lightning_images_per_s(
        module, data, steps, warmup, accelerator=device.type, devices=1, precision=precision
    )
    module.load_state_dict(state)
    module.to(device)  # Lightning hands the model back on the CPU
    bf16 = str(precision) in ("bf16-mixed", "bf16")  # the baselines in the fit's precision
    bare = bare_images_per_s(
        module.embedder, module.loss, data.train_dataloader(), steps, warmup, bf16=bf16
    )
    compute = bare_images_per_s(
        module.embedder, module.loss, repeat(fixed), steps, warmup, bf16=bf16
    )
    print(f"  lightning fit      {lightning:8.1f} images/s  ({lightning / bare:.2f}× bare loop)")
    print(f"  bare loop          {bare:8.1f} images/s  (baseline)")
    print(f"  compute only       {compute:8.1f} images/s  ({compute / bare:.2f}× bare loop)")


def gpu_resnet50(steps: int, warmup: int) -> None:
    device = torch.device("cuda")
    torch.backends.cudnn.benchmark = True
    x = torch.rand(64, 3, 224, 224, device=device)
    y = torch.arange(16, device=device).repeat_interleave(4)
    embedder = Embedder("resnet50", embedding_dim=512).to(device)
    fp32 = bare_images_per_s(embedder, CircleLoss(), repeat((x, y, None)), steps, warmup)
    embedder = embedder.to(memory_format=torch.channels_last)
    batch = repeat((x.contiguous(memory_format=torch.channels_last), y, None))
    bf16 = bare_images_per_s(embedder, CircleLoss(), batch, steps, warmup, bf16=True)
    print(f"GPU {torch.cuda.get_device_name()}: ResNet50 224 px, P=16 K=4, Circle loss")
    print(f"  {f'bare fp32 ({float32_modes(device.type)})':36s} {fp32:8.1f} images/s  (baseline)")
    print(f"  {'bare bf16 + channels-last':36s} {bf16:8.1f} images/s  ({bf16 / fp32:.2f}× fp32)")


def main(argv: list[str] | None = None) -> None:
    parser = bench_parser("train", __doc__)
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                        help="where the config trains (auto: CUDA where visible)")  # fmt: skip
    parser.add_argument("--steps", type=int, default=8, help="timed steps")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    parser.add_argument(
        "--cells", type=int, default=3, help="leaderboard cells per track to time (0: skip)"
    )
    args = parser.parse_args(argv)
    device = parsed_device(parser, args.device)
    cuda = device.type == "cuda"
    print(machine())
    torch.manual_seed(0)
    config_throughput(args.config, args.steps, args.warmup, device)
    if cuda:
        gpu_resnet50(args.steps, args.warmup)
    if args.cells:
        cells.report(args.cells)
