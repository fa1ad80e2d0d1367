"""A fingerprint of how this machine computes the float operations that training uses.

The math libraries pick their kernels by CPU, and a few ulps of difference in one step grow
over a run into different models; so `--check` compares strictly only when the committed
leaderboard was made by a machine with the same fingerprint.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch
from torch.nn import functional as F

from core.atomic import write_text

FILE_NAME = "leaderboard.numerics"  # beside leaderboard.csv: the fingerprint it was made with


def fingerprint() -> str:
    """12 hex digits hashing the bits of one small forward and backward pass on one CPU thread
    (the threads of a reproducible suite): convolutions, batch norm, a matrix product, softmax.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(8, 16, 32, 32, generator=gen)
        conv = torch.randn(32, 16, 3, 3, generator=gen).requires_grad_()
        depthwise = torch.randn(32, 1, 3, 3, generator=gen).requires_grad_()
        linear = torch.randn(32 * 16, 256, generator=gen).requires_grad_()
        h = F.relu6(F.batch_norm(F.conv2d(x, conv, padding=1), None, None, training=True))
        h = F.conv2d(h, depthwise, stride=2, padding=1, groups=32)
        h = F.adaptive_avg_pool2d(h, 4).flatten(1) @ linear
        loss = F.log_softmax(h, dim=1).sum()
        grads = torch.autograd.grad(loss, [conv, depthwise, linear])
        digest = hashlib.sha256()
        for t in (h.detach(), *grads):
            digest.update(t.contiguous().numpy().tobytes())
        return digest.hexdigest()[:12]
    finally:
        torch.set_num_threads(threads)


def read(folder: Path) -> str | None:
    """The fingerprint stored beside a leaderboard, None if it was made without one."""
    path = folder / FILE_NAME
    return (path.read_text().strip() or None) if path.is_file() else None


def write(folder: Path, value: str) -> None:
    """Store a fingerprint beside a leaderboard (atomically, like every result file)."""
    write_text(folder / FILE_NAME, value + "\n")


def merged(stored: str | None, made: str) -> str:
    """The fingerprint of a board whose new rows were made with `made` beside rows made with
    `stored`: "a+b" when the two differ, which never equals one machine's, so `--check` then
    compares every cell by the looser rules of other numerics."""
    if stored is None:
        return made
    return "+".join(sorted(set(stored.split("+")) | set(made.split("+"))))
