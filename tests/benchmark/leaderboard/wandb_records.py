"""What an offline W&B run recorded, read from its `run-<id>.wandb` file.

The file is W&B's transaction log: a 7-byte header (`:W&B`, magic, version), then LevelDB-log
records in 32 KiB blocks (crc32, length, type: full, first, middle, last), each a `Record`
protobuf. wandb 0.31 no longer ships a Python reader, so the tests carry this small one.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

from wandb.proto import wandb_internal_pb2

BLOCK = 32 * 1024
HEADER = 7  # of the file and of each record
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


@dataclass
class OfflineRun:
    """The keys a run logged (history, summary, flattened config) and its W&B identity."""

    history: set[str] = field(default_factory=set)
    summary: set[str] = field(default_factory=set)
    config: dict[str, object] = field(default_factory=dict)  # "model.loss.init_args.m": 0.4
    project: str = ""
    group: str = ""
    name: str = ""
    job_type: str = ""


def offline_child_env(home: Path) -> dict[str, str]:
    """This process's environment for a child that logs an offline run of its own: `home` as
    HOME (no ~/.netrc login: offline) and no W&B variable of this process (WANDB_SERVICE, which
    an earlier in-process run leaves behind, would make the child log through this process's
    service, whose file is not complete when the child exits)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    return env | {"HOME": str(home)}


def records(path: Path) -> list[bytes]:
    """The payloads of the log records in `path`, reassembled across blocks."""
    data = path.read_bytes()
    if data[:4] != b":W&B":
        raise ValueError(f"{path} is not a W&B transaction log (header {data[:4]!r})")
    payloads, partial, pos = [], b"", HEADER
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:  # the block's tail is padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + HEADER])
        if kind == 0:  # zero-filled rest of a block
            pos += left
            continue
        chunk = data[pos + HEADER : pos + HEADER + length]
        pos += HEADER + length
        if kind == FULL:
            payloads.append(chunk)
        elif kind == FIRST:
            partial = chunk
        elif kind == MIDDLE:
            partial += chunk
        elif kind == LAST:
            payloads.append(partial + chunk)
    return payloads


def read_offline_run(path: Path) -> OfflineRun:
    """Parse `path` (an offline run's `run-<id>.wandb`)."""
    run = OfflineRun()
    for payload in records(path):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(payload)
        kind = record.WhichOneof("record_type")
        if kind == "history":
            run.history |= {_key(item) for item in record.history.item}
        elif kind == "summary":
            run.summary |= {_key(item) for item in record.summary.update}
        elif kind == "config":
            for item in record.config.update:
                _flatten(_key(item), json.loads(item.value_json), run.config)
        elif kind == "run":  # the first names the run; its config is `wandb.init`'s
            info = record.run
            run.project, run.group = run.project or info.project, run.group or info.run_group
            run.name, run.job_type = run.name or info.display_name, run.job_type or info.job_type
            for item in record.run.config.update:
                _flatten(_key(item), json.loads(item.value_json), run.config)
    return run


def _key(item) -> str:
    return item.key or "/".join(item.nested_key)


def _flatten(prefix: str, value: object, out: dict[str, object]) -> None:
    if isinstance(value, dict):
        for key, inner in value.items():
            _flatten(f"{prefix}.{key}", inner, out)
    else:
        out[prefix] = value
