"""faiss as the shortlist's float32 product (`backend="faiss"`), and which faiss is installed.

`circlebench[cpu]` installs faiss-cpu, `circlebench[gpu]` faiss-gpu (or faiss-gpu-cu12 by hand).
Both write the same `faiss/` files (faiss issue #2892): with both installed, `import faiss`
loads whichever pip wrote last, and uninstalling either one breaks it; `import_faiss` says how
to keep one.

On the CPU a block is `faiss.pairwise_distances` (BLAS). On CUDA the gallery's float32 copy is
uploaded once, one `StandardGpuResources` per device serves the process, and each block is
faiss's brute-force kernel (`bfKnn`, k = -1) on torch's stream: the scans need every score of
a block, and `GpuIndexFlatIP.search` stops at k = 2,048.
"""

from __future__ import annotations

import functools
import importlib.metadata
from types import ModuleType
from typing import Any

import torch
from torch import Tensor

from benchmark.evaluation.cuda_blocks import HostBlock
from benchmark.evaluation.similarity import LowCopy

FAISS_GPU_HINT = (
    'keep one faiss: pip uninstall -y faiss-cpu && pip install "circlebench[gpu]" (faiss-gpu), '
    'or use backend="torch" (exact on CUDA too)'
)
_RESOURCES: dict[int, Any] = {}  # CUDA device index -> the process's StandardGpuResources


@functools.cache  # read once per process: scanning the installed metadata takes a while
def installed_faiss() -> list[str]:
    """Names of the installed faiss distributions (faiss-cpu, faiss-gpu, faiss-gpu-cu12, ...)."""
    names = {
        (d.metadata["Name"] or "").lower().replace("_", "-")
        for d in importlib.metadata.distributions()
    }
    return sorted(n for n in names if n == "faiss-cpu" or n.startswith("faiss-gpu"))


def conflict_message(names: list[str]) -> str | None:
    """The fix when a CPU and a GPU faiss are both installed; None when they are not."""
    if "faiss-cpu" not in names or not any(n.startswith("faiss-gpu") for n in names):
        return None
    return (
        f"{' and '.join(names)} are installed together; they write the same faiss/ files "
        "(faiss issue #2892), so `import faiss` loads whichever pip wrote last and "
        "uninstalling one breaks the other. Keep one: "
        f'pip uninstall -y {" ".join(names)}, then pip install "circlebench[gpu]" on a '
        'CUDA machine or pip install "circlebench[cpu]" elsewhere'
    )


def import_faiss() -> ModuleType:
    """`faiss`; ImportError with the command that fixes it when it is missing or installed twice
    (a CPU and a GPU distribution)."""
    conflict = conflict_message(installed_faiss())
    if conflict is not None:
        raise ImportError(conflict)
    try:
        import faiss
    except ImportError as err:
        raise ImportError(
            f'faiss is not installed ({err}); pip install "circlebench[cpu]" (faiss-cpu), '
            'or "circlebench[gpu]" (faiss-gpu) on a CUDA machine'
        ) from err
    return faiss


def faiss_has_gpu(faiss: ModuleType) -> bool:
    """Whether this faiss was built with GPU support and sees a GPU."""
    return hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0


def gpu_resources(faiss: ModuleType, device: torch.device) -> Any:
    """The process's one `StandardGpuResources` for `device` (its scratch memory is reused)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _RESOURCES:
        _RESOURCES[index] = faiss.StandardGpuResources()
    return _RESOURCES[index]


class FaissShortlist:
    """float32 blocks by faiss against one gallery copy: BLAS on the CPU, bfKnn on a GPU."""

    readout = torch.float32

    def __init__(self, gallery: LowCopy, device: torch.device) -> None:
        self._faiss = import_faiss()
        self._gpu = device.type == "cuda"
        if self._gpu:
            self._gallery = gallery.values.to(device, torch.float32).contiguous()  # [N, D]
            self._resources = gpu_resources(self._faiss, device)
            self._host = HostBlock(torch.float32, pinned=True)
        else:
            self._gallery_np = gallery.values.cpu().numpy()

    def __call__(self, q: Tensor, start: int) -> Tensor:
        faiss = self._faiss
        if not self._gpu:
            g_np, q_np = self._gallery_np[start:], q.cpu().numpy()
            scores = faiss.pairwise_distances(q_np, g_np, faiss.METRIC_INNER_PRODUCT)
            return torch.from_numpy(scores)
        # out = q · gᵀ by faiss's brute-force kernel on torch's current stream (what
        # `faiss.contrib.torch_utils` does, without patching faiss's functions for the process).
        g = self._gallery[start:]  # rows of a contiguous tensor: contiguous
        q = q.to(g.device, torch.float32).contiguous()
        out = torch.empty(q.shape[0], g.shape[0], device=g.device)  # [B, N - start]
        params = faiss.GpuDistanceParams()
        params.metric = faiss.METRIC_INNER_PRODUCT
        params.k = -1  # every distance, no selection
        params.dims = q.shape[1]
        params.vectors = faiss.cast_integer_to_float_ptr(g.data_ptr())
        params.vectorsRowMajor = True
        params.vectorType = faiss.DistanceDataType_F32
        params.numVectors = g.shape[0]
        params.queries = faiss.cast_integer_to_float_ptr(q.data_ptr())
        params.queriesRowMajor = True
        params.queryType = faiss.DistanceDataType_F32
        params.numQueries = q.shape[0]
        params.outDistances = faiss.cast_integer_to_float_ptr(out.data_ptr())
        params.device = g.device.index
        before = self._resources.getDefaultStream(params.device)
        stream = torch.cuda.current_stream(g.device).cuda_stream
        self._resources.setDefaultStream(params.device, faiss.cast_integer_to_cudastream_t(stream))
        try:
            faiss.bfKnn(self._resources, params)
        finally:
            self._resources.setDefaultStream(params.device, before)
        return self._host.copy(out)
