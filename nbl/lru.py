"""A size cap on a directory of cache entries (files, or directories of files), least recently used first out.

Recency is the file's mtime: a reader touches the entry it uses (`touch`), a writer creates it, so the
oldest mtime is the entry unused the longest (atime is not trusted: relatime and noatime mounts).
Plain files and os calls only, so the API's `nbl admin gc` and the worker share it without torch.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

SUFFIX = ".stats"  # the statistics cache's entries: one directory of per-layer shards (worker/engine/calibration/stats_cache.py)


@dataclass(frozen=True)
class Entry:
    path: Path
    size: int
    used: float  # mtime: last written or read


def touch(path: Path) -> None:
    """Mark an entry as just used; it may have been evicted meanwhile (then nothing to do)."""
    try:
        os.utime(path)
    except OSError:
        pass


def entries(directory: Path, suffix: str = SUFFIX) -> list[Entry]:
    """The cache's entries, least recently used first."""
    found = []
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    for name in names:
        if not name.endswith(suffix):
            continue
        try:
            st = os.stat(directory / name, follow_symlinks=False)
        except FileNotFoundError:
            continue  # evicted by another process meanwhile
        path = Path(directory) / name
        found.append(Entry(path, tree_size(path) if os.path.isdir(path) else st.st_size, st.st_mtime))
    return sorted(found, key=lambda e: (e.used, e.path.name))


def tree_size(directory) -> int:
    """Bytes of the files under `directory` (links not followed; files vanishing meanwhile skipped)."""
    total = 0
    for root, _, files in os.walk(directory):
        for f in files:
            try:
                total += os.stat(os.path.join(root, f), follow_symlinks=False).st_size
            except OSError:
                pass
    return total


def remove(path: Path) -> None:
    """Delete one entry, a file or a directory; FileNotFoundError if it is gone already."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def over_cap(directory: Path, max_bytes: int, suffix: str = SUFFIX) -> list[Entry]:
    """The entries to evict, oldest use first, so that what remains fits in `max_bytes` (0: all)."""
    found = entries(directory, suffix)
    total = sum(e.size for e in found)
    out = []
    for e in found:
        if total <= max_bytes:
            break
        out.append(e)
        total -= e.size
    return out


def evict(directory: Path, max_bytes: int, suffix: str = SUFFIX) -> list[Entry]:
    """Delete what over_cap names; returns it. A reader holding an evicted file open keeps reading it."""
    gone = []
    for e in over_cap(directory, max_bytes, suffix):
        try:
            remove(e.path)
        except FileNotFoundError:
            continue
        gone.append(e)
    return gone
