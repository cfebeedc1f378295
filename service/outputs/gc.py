"""Report and free the disk space that jobs leave behind (`nbl admin gc`, cli/outputs.py).

A worker deletes its job's scratch directory when the job ends (worker/host/retention.py), but not every
job ends in a worker: one failed or cancelled by the reconciler or the API after its worker died
leaves its scratch directory, and a worker killed mid-publish its staging directory. gc frees

    scratch   NBL_HOME/jobs/<id>                  of a job that is terminal, or unknown to the database
    staging   NBL_PUBLISH_DIR/.nbl-staging/<id>   likewise (a running job's is in use)
    stats     NBL_STATS_DIR/*.stats               least recently used first, down to NBL_STATS_CACHE_MAX_BYTES;
              NBL_STATS_DIR/*.tmp                 older than a day (a writer that died)

Queued, running and cancelling jobs keep theirs: a requeued job resumes from its scratch directory.
Published outputs are never touched. Safe to run at any time, as often as wanted.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from nbl import lru
from service.core.paths import staging_root
from service.core.settings import Settings

STALE_TMP_S = 24 * 3600


@dataclass(frozen=True)
class Item:
    kind: str  # scratch | staging | stats
    path: str
    bytes: int
    reason: str


def _subdirs(directory: Path) -> list[os.DirEntry]:
    try:
        with os.scandir(directory) as it:
            return [e for e in it if e.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return []


def _statuses(session, ids: list[str]) -> dict[str, str]:
    from sqlalchemy import select

    from service.core.models import Job

    found: dict[str, str] = {}
    for i in range(0, len(ids), 500):
        found.update(session.execute(select(Job.id, Job.status).where(Job.id.in_(ids[i : i + 500]))).all())
    return found


def plan(settings: Settings, session, now: float | None = None) -> list[Item]:
    """What gc would free, without touching anything."""
    from service.core.models import TERMINAL

    dirs = {"scratch": _subdirs(settings.home / "jobs"), "staging": _subdirs(staging_root(settings))}
    statuses = _statuses(session, sorted({e.name for found in dirs.values() for e in found}))
    items = []
    for kind, found in dirs.items():
        for e in found:
            status = statuses.get(e.name)
            if status is None or status in TERMINAL:
                items.append(Item(kind, e.path, lru.tree_size(e.path), f"job {status}" if status else "no such job"))
    for e in lru.over_cap(settings.stats_dir, settings.stats_cache_max_bytes):
        items.append(Item("stats", str(e.path), e.size, "least recently used, over NBL_STATS_CACHE_MAX_BYTES"))
    now = time.time() if now is None else now
    for e in lru.entries(settings.stats_dir, suffix=".tmp"):
        if now - e.used > STALE_TMP_S:
            items.append(Item("stats", str(e.path), e.size, "unfinished write, over a day old"))
    return items


def collect(settings: Settings, session, dry_run: bool = False) -> dict:
    """{"dry_run", "items": [{kind, path, bytes, reason}], "bytes"}: what was (or would be) freed."""
    items = plan(settings, session)
    session.commit()  # no transaction stays open while folders are deleted
    freed = []
    for item in items:
        if not dry_run:
            try:
                shutil.rmtree(item.path) if item.kind != "stats" else lru.remove(Path(item.path))
            except FileNotFoundError:
                continue  # gone meanwhile (a worker's own cleanup, another gc)
        freed.append(item)
    return {"dry_run": dry_run, "items": [asdict(i) for i in freed], "bytes": sum(i.bytes for i in freed)}
