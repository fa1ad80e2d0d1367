"""MkDocs hook: the committed pictures under `results/` join the site without a copy in docs/.

`results/report.png` and `results/plots/*.png` are remade by `circlebench leaderboard`; the
manual shows them as `assets/results/...`, read from `results/` at build time, so a board
regenerated and committed there is the one the manual shows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

PICTURES = ("report.png", "plots/*.png")


def on_files(files: Files, config: Any) -> Files:
    """Add each picture of `results/` to the site under `assets/results/`."""
    results = Path(config["config_file_path"]).parent / "results"
    for pattern in PICTURES:
        for path in sorted(results.glob(pattern)):
            uri = f"assets/results/{path.relative_to(results).as_posix()}"
            files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files
