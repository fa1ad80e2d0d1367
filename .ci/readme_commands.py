"""Print the commands of README.md's "Two commands" block, one a line, as a user types them.

`.ci/run` runs what this prints, so CI runs the README's commands as written and they cannot
drift apart; tests/docs/test_readme.py holds the block's shape.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

HEADING = "## Two commands"


def readme_commands(readme: Path) -> list[str]:
    """The lines of the first ```bash block under HEADING. Raises ValueError when absent."""
    text = readme.read_text()
    start = text.find(f"\n{HEADING}\n")
    if start < 0:
        raise ValueError(f"{readme}: no {HEADING!r} section")
    block = re.search(r"```bash\n(.*?)```", text[start:], re.DOTALL)
    if block is None:
        raise ValueError(f"{readme}: the {HEADING!r} section has no ```bash block")
    return [line.strip() for line in block.group(1).splitlines() if line.strip()]


if __name__ == "__main__":
    print("\n".join(readme_commands(Path(sys.argv[1] if len(sys.argv) > 1 else "README.md"))))
