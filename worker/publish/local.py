"""The local directory destination: NBL_PUBLISH_DIR/<name>, or <name>/k{K} when a job asked for
several k (with a root README.md over them), holding exactly the staged folder (weights,
modeling_nbl.py, tokenizer, card, plot).

Copied to a sibling `.partial` directory and renamed into place, so a reader never sees half an
output and publishing twice leaves one copy.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from .destination import Published


class LocalDir:
    def __init__(self, publish_dir: Path, name: str):
        self.publish_dir, self.name = Path(publish_dir), name

    def target(self, k: int, several: bool) -> Path:
        return self.publish_dir / self.name / f"k{k}" if several else self.publish_dir / self.name

    def location(self, k: int, several: bool) -> tuple[str, str | None]:
        return str(self.target(k, several)), None

    def publish(self, staged: Path, k: int, several: bool) -> Published:
        dest = self.target(k, several)
        tmp = dest.with_name(dest.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(staged, tmp, copy_function=shutil.copyfile)  # new files, umask modes (not a 0600 source's)
        shutil.rmtree(dest, ignore_errors=True)
        tmp.rename(dest)
        return Published(kind="local_dir", uri=str(dest))

    def publish_root(self, staged: Path) -> Published:
        """The root README.md over the k{K} folders, replaced atomically."""
        dest = self.publish_dir / self.name
        dest.mkdir(parents=True, exist_ok=True)
        tmp = dest / "README.md.partial"
        shutil.copyfile(Path(staged) / "README.md", tmp)
        tmp.replace(dest / "README.md")
        return Published(kind="local_dir", uri=str(dest))
