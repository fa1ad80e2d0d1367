"""`benchmark.training.rows`: the results CSV is read without importing Lightning."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_reading_a_results_csv_does_not_import_lightning(tmp_path: Path) -> None:
    rows = tmp_path / "rows.csv"
    rows.write_text("cell_id,R@1,wall_time_s\ng/circle/seed0,61.5,12.0\n")
    probe = (
        "import sys\n"
        "from benchmark.training.rows import read_results\n"
        f"print(read_results({str(rows)!r})['R@1'].tolist(), 'pytorch_lightning' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[61.5]", "False"]
