"""A team's disk quota on its local outputs (NBL_TEAM_DISK_QUOTA_BYTES), the one rule both sides apply:

    the API, at submit    the bytes on disk under NBL_PUBLISH_DIR/<team>, plus what the team's active jobs
                          plan, plus what this job's estimate plans (disk.outputs): a 422 when over
                          (service/jobs/disk_quota.py)
    the worker, at publish  the bytes on disk plus the outputs about to be written, less what they replace:
                          QuotaExceeded (a `user` failure) before anything is copied (worker/publish/local.py)

A team's usage is what its output folders hold, file by file (links not followed); the staging area and
the Hub hold nothing of it. Plain os calls: the API imports this without torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nbl.lru import tree_size

SETTING = "NBL_TEAM_DISK_QUOTA_BYTES"


class QuotaExceeded(ValueError):
    """Publishing would take the team over its quota: a `user` failure, naming the numbers."""


def usage(publish_dir: Path, team: str) -> int:
    """Bytes of the team's outputs on disk (NBL_PUBLISH_DIR/<team>, every output folder under it)."""
    return tree_size(Path(publish_dir) / team)


def readable(n: int) -> str:
    """Bytes in decimal units, as disks are sold: 8.6 GB."""
    for unit, size in (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


@dataclass(frozen=True)
class Check:
    """One quota check: `used` on disk now, `adding` by this job, `replacing` what its writes replace,
    `reserved` what the team's other active jobs plan (at submit only)."""

    team: str
    quota: int | None
    used: int
    adding: int
    replacing: int = 0
    reserved: int = 0

    @property
    def after(self) -> int:
        return self.used + self.reserved - self.replacing + self.adding

    @property
    def over(self) -> bool:
        return self.quota is not None and self.after > self.quota

    def message(self, what: str) -> str:
        parts = [
            f"{what} {self.adding} bytes ({readable(self.adding)}) of outputs would take team {self.team!r} "
            f"over its disk quota of {self.quota} bytes ({readable(self.quota or 0)}, {SETTING}): its outputs "
            f"use {self.used} bytes ({readable(self.used)}) now"
        ]
        if self.reserved:
            parts.append(f"its active jobs plan {self.reserved} bytes more")
        if self.replacing:
            parts.append(f"{self.replacing} bytes are replaced")
        return "; ".join(parts) + ". Delete outputs, publish to the Hub, or ask for a larger quota"

    def figures(self) -> dict[str, int | None]:
        return {
            "quota_bytes": self.quota,
            "used_bytes": self.used,
            "planned_bytes": self.adding,
            "reserved_bytes": self.reserved,
            "replaced_bytes": self.replacing,
        }
