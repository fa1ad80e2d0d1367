"""PKSampler under a real two-process gloo group on the CPU: ranks shard one global sequence."""

from __future__ import annotations

import json
from pathlib import Path

import torch.distributed as dist
import torch.multiprocessing as mp

from samplers import PKSampler

LABELS = [i % 13 for i in range(195)]  # 13 classes of 15 images: five chunks of K=3 each
MODES = ("coverage", "independent")


def _worker(rank: int, world_size: int, tmp: str) -> None:
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp}/rendezvous", rank=rank, world_size=world_size
    )
    try:
        out = {}
        for mode in MODES:
            sampler = PKSampler(LABELS, p=4, k=3, seed=7, mode=mode)  # world and rank: the group
            sampler.set_epoch(2)
            out[mode] = {"len": len(sampler), "batches": list(sampler)}
        Path(tmp, f"rank{rank}.json").write_text(json.dumps(out))
    finally:
        dist.destroy_process_group()


def test_two_gloo_ranks_get_disjoint_complete_batches(tmp_path: Path) -> None:
    mp.spawn(_worker, args=(2, str(tmp_path)), nprocs=2, join=True)
    runs = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for mode in MODES:
        ranks = [run[mode] for run in runs]
        single = PKSampler(LABELS, p=4, k=3, seed=7, mode=mode)
        length = single.pass_batches // 2 if mode == "coverage" else len(LABELS) // (4 * 3 * 2)
        assert ranks[0]["len"] == ranks[1]["len"] == length
        single = PKSampler(LABELS, p=4, k=3, seed=7, mode=mode, batches_per_epoch=2 * length)
        single.set_epoch(2)
        expected = list(single)
        assert ranks[0]["batches"] == expected[0::2]
        assert ranks[1]["batches"] == expected[1::2]
        for batch in ranks[0]["batches"] + ranks[1]["batches"]:
            assert len({LABELS[i] for i in batch}) == 4
    coverage = [{i for b in ranks["coverage"]["batches"] for i in b} for ranks in runs]
    assert not coverage[0] & coverage[1]  # no top-ups, so no image on both ranks
