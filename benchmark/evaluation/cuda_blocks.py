"""Shortlist blocks computed on a GPU and copied once into a reused page-locked host buffer
(`HostBlock`), where the compiled scans read them.
"""

from __future__ import annotations

import torch
from torch import Tensor

from benchmark.evaluation.precision import ieee_float32
from benchmark.evaluation.similarity import LowCopy

# `torch.mm(a, b, out_dtype=torch.float32)` for bfloat16/float16 inputs exists from torch 2.8.
MM_OUT_DTYPE = "dtype" in torch.ops.aten.mm.overloads()


class HostBlock:
    """One host buffer reused by every block: page-locked when the blocks come from CUDA, so
    each copy is one DMA transfer. The returned block is a view of it, valid until the next."""

    def __init__(self, dtype: torch.dtype, *, pinned: bool) -> None:
        self.dtype, self.pinned = dtype, pinned
        self._buffer = torch.empty(0, dtype=dtype)

    def copy(self, block: Tensor) -> Tensor:
        """`block` [B, N] (any device) copied into the buffer; [B, N] on the CPU, contiguous."""
        size = block.numel()
        if self._buffer.numel() < size:
            self._buffer = torch.empty(size, dtype=self.dtype, pin_memory=self.pinned)
        out = self._buffer[:size].view(block.shape)
        out.copy_(block, non_blocking=self.pinned)
        if block.is_cuda:  # the copy is asynchronous into page-locked memory: wait for it
            torch.cuda.current_stream(block.device).synchronize()
        return out


class CudaShortlist:
    """Products on the gallery copy's device (a CPU copy runs the same arithmetic there, as in
    the tests): bfloat16/float16 inputs with float32 sums, or float32, read as float32. Without
    `torch.mm(out_dtype=...)` (torch < 2.8, `out_dtype=False`) bfloat16 blocks come out in
    bfloat16 (bounded by `similarity.output_error`) and float16 blocks are float32 products of
    the float16 values (exact), one gallery tile at a time.
    """

    _TILE = 8192  # float16 gallery rows widened to float32 at once (torch < 2.8)

    def __init__(self, gallery: LowCopy, *, out_dtype: bool = MM_OUT_DTYPE) -> None:
        self._gallery = gallery.values  # [N, D]
        self._out_dtype = out_dtype
        bf16_out = self._gallery.dtype == torch.bfloat16 and not out_dtype
        self.readout = torch.bfloat16 if bf16_out else torch.float32
        self._host = HostBlock(self.readout, pinned=self._gallery.is_cuda)

    def __call__(self, q: Tensor, start: int) -> Tensor:
        g = self._gallery[start:]
        with ieee_float32():
            if g.dtype == torch.float32 or self.readout == torch.bfloat16:
                block = torch.mm(q, g.T)  # [B, N - start] in the inputs' dtype
            elif self._out_dtype:
                block = torch.mm(q, g.T, out_dtype=torch.float32)
            else:
                block = torch.empty(q.shape[0], g.shape[0], device=g.device)
                wide = q.float()
                for c in range(0, g.shape[0], self._TILE):
                    tile = g[c : c + self._TILE].float()
                    torch.mm(wide, tile.T, out=block[:, c : c + self._TILE])
        return self._host.copy(block)
