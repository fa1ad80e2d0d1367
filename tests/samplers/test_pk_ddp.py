"""PKSampler under a real two-process gloo group on the CPU: ranks shard one global sequence."""

from __future__ import annotations

import json
from pathlib import Path

import torch.distributed as dist
import torch.multiprocessing as mp

from samplers import PKSampler

LABELS = [i % 13 for i in range(200)]


def _worker(rank: int, world_size: int, tmp: str) -> None:
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp}/rendezvous", rank=rank, world_size=world_size
    )
    try:
        sampler = PKSampler(LABELS, p=4, k=3, seed=7)  # world size and rank from the group
        sampler.set_epoch(2)
        out = {"len": len(sampler), "batches": list(sampler)}
        Path(tmp, f"rank{rank}.json").write_text(json.dumps(out))
    finally:
        dist.destroy_process_group()


def test_two_gloo_ranks_get_disjoint_complete_batches(tmp_path: Path) -> None:
    mp.spawn(_worker, args=(2, str(tmp_path)), nprocs=2, join=True)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert ranks[0]["len"] == ranks[1]["len"] == len(LABELS) // (4 * 3 * 2)
    single = PKSampler(LABELS, p=4, k=3, seed=7, batches_per_epoch=2 * ranks[0]["len"])
    single.set_epoch(2)
    expected = list(single)
    assert ranks[0]["batches"] == expected[0::2]
    assert ranks[1]["batches"] == expected[1::2]
    for batch in ranks[0]["batches"] + ranks[1]["batches"]:
        assert len({LABELS[i] for i in batch}) == 4
