"""Where a job's outputs go. Every destination takes the same staged folder (the saved output with its
card and plot, load-checked) and returns what to record on the job; publishing again is harmless.

    LocalDir (local.py)   NBL_PUBLISH_DIR/<team>/<name>[/k{K}], the embedded default; recorded as
                          local:<team>/<name>[/k{K}], never a server path
    HubRepo  (hub.py)     a Hugging Face Hub repo: a branch commit or a pull request, once per output
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class Published:
    kind: str  # artifact kind: "local_dir" | "hub"
    uri: str  # local:<team>/<name>[/k{K}], or the repo URL
    revision: str | None = None  # Hub: the branch, or refs/pr/N
    commit_sha: str | None = None
    adopted: bool = False  # a previous attempt had already published it; nothing was written now


class Destination(Protocol):
    def location(self, k: int, several: bool) -> tuple[str, str | None]:
        """(what to pass to from_pretrained, subfolder) once published: the card's loading snippet."""
        ...

    def check_space(self, adding: int) -> None:
        """Before anything is published: the job's outputs, `adding` bytes in all, fit where they go (a local
        folder: the team's disk quota, else QuotaExceeded, a ValueError)."""
        ...

    def publish(self, staged: Path, k: int, several: bool) -> Published: ...

    def publish_root(self, staged: Path) -> Published:
        """Several outputs: the README.md of `staged` at the destination's root, beside the k{K} folders."""
        ...
