"""The destination of `nbl compress --out DIR`: the outputs are already where the user asked (DIR, or
DIR/k{K} for several k), so publishing writes nothing but the root card over several outputs. The
card beside each output is the one the pipeline writes at publish, as for a job.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from .destination import Published


class InPlace:
    def __init__(self, root: Path):
        self.root = Path(root)

    def location(self, k: int, several: bool) -> tuple[str, str | None]:
        """The card's loading snippet: the folder as the user named it (from_pretrained reads a path)."""
        return str(self.root), (f"k{k}" if several else None)

    def check_space(self, adding: int) -> None:
        """The outputs are already where the user asked: nothing to bound."""

    def publish(self, staged: Path, k: int, several: bool) -> Published:
        return Published(kind="local_dir", uri=str(Path(staged)))

    def publish_root(self, staged: Path) -> Published:
        """README.md over the k{K} folders; the staged folder's other files (the plot) beside it."""
        for f in Path(staged).iterdir():
            if f.is_file():
                shutil.copyfile(f, self.root / f.name)
        return Published(kind="local_dir", uri=str(self.root))
