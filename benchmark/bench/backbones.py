"""`python -m benchmark.bench backbones`: training and extraction images/s per backbone.

A plain PyTorch loop over one batch of random images held on the device (no loader, no
Lightning): forward, a 512-D projection, Circle loss (in float32, as in training), backward and
an AdamW step; then `torch.no_grad` extraction of the same batch: the figure that turns a suite's
images into GPU-hours (`--csv` appends the rows to a file such as `results/throughput.csv`).
Backbones are built without weights (speed does not depend on them), token backbones as the
embedder builds them (`benchmark.training.tokens`: any image size, padded to the patch grid).
On a CPU, `--threads` sets torch's threads and `--precision 32-true` avoids bf16 emulation.
"""

from __future__ import annotations

import argparse
import csv
import datetime
from pathlib import Path

import torch
from torch import nn

from benchmark.bench.timing import bench_parser, images_per_s, parsed_device
from losses import CircleLoss

DEFAULT_BACKBONES = (
    "bninception",
    "resnet50",
    "vit_small_patch16_224",
    "vit_small_patch14_dinov2",
    "vit_base_patch14_dinov2",
)


def build(name: str) -> nn.Module:
    """The backbone `name` without weights, returning pooled features [B, C]."""
    if name == "bninception":
        from benchmark.training.bninception import BNInception

        return BNInception(num_classes=0)
    import timm

    from benchmark.training.tokens import token_backbone_kwargs

    return timm.create_model(name, pretrained=False, num_classes=0, **token_backbone_kwargs(name))


def measure(name: str, args: argparse.Namespace, device: torch.device) -> dict[str, object]:
    """One backbone's training and extraction rates on `device`: a row of the `--csv` table."""
    torch.manual_seed(0)
    backbone = build(name).to(device)
    head = nn.Linear(int(backbone.num_features), 512).to(device)  # type: ignore[arg-type]
    if device.type == "cuda" and "vit" not in name:
        backbone = backbone.to(memory_format=torch.channels_last)
    params = [*backbone.parameters(), *head.parameters()]
    optimiser = torch.optim.AdamW(params, lr=1e-5)
    images = torch.rand(args.batch, 3, args.image_size, args.image_size, device=device)
    labels = torch.arange(args.batch, device=device) // 4  # P x 4 images a class
    bf16 = args.precision == "bf16-mixed"
    loss = CircleLoss(m=0.4, gamma=80.0)  # the fine-grained setting
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def autocast():
        return torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16)

    def train_step() -> int:
        optimiser.zero_grad(set_to_none=True)
        with autocast():
            embeddings = head(backbone(images))
        loss(embeddings.float(), labels).backward()
        optimiser.step()
        return args.batch

    def extract_step() -> int:
        with torch.no_grad(), autocast():
            head(backbone(images))
        return args.batch

    calls = range(args.warmup + args.steps)
    backbone.train()
    train = images_per_s((train_step() for _ in calls), args.warmup, sync)
    backbone.eval()
    extract = images_per_s((extract_step() for _ in calls), args.warmup, sync)
    return {
        "backbone": name,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "precision": args.precision,
        "image_size": args.image_size,
        "batch": args.batch,
        "train_images_per_s": round(train, 1),
        "extract_images_per_s": round(extract, 1),
        "torch": torch.__version__,
        "date": datetime.date.today().isoformat(),
        "source": "python -m benchmark.bench backbones",
    }


def main(argv: list[str] | None = None) -> None:
    parser = bench_parser("backbones", __doc__)
    parser.add_argument("--backbone", action="append", help="repeatable (default: five)")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                        help="auto: CUDA where torch sees it, else the CPU")  # fmt: skip
    parser.add_argument("--precision", choices=["32-true", "bf16-mixed"], default="bf16-mixed")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--batch", type=int, default=80, help="images a step (default P x K = 80)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--csv", type=Path, help="append the rows to this CSV file")
    parser.add_argument("--threads", type=int, help="torch's CPU threads (default: torch's)")
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = parsed_device(parser, args.device)
    print(f"torch {torch.__version__}, device {device}, {args.precision}, {args.image_size} px, "
          f"batch {args.batch}, {args.steps} steps after {args.warmup}, "
          f"{torch.get_num_threads()} CPU threads")  # fmt: skip
    for name in args.backbone or DEFAULT_BACKBONES:
        row = measure(name, args, device)
        print(f"{name:<28} train {row['train_images_per_s']:>9} images/s   "
              f"extract {row['extract_images_per_s']:>9} images/s", flush=True)  # fmt: skip
        if args.csv is not None:  # each row as it is measured: a later failure keeps it
            new = not args.csv.is_file()
            with args.csv.open("a", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=list(row))  # the columns of `measure`
                if new:
                    writer.writeheader()
                writer.writerow(row)
        if device.type == "cuda":
            torch.cuda.empty_cache()
