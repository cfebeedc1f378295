"""The part of a load that reads the model's weights whole the first time: a Hub model downloaded into the
Hugging Face cache, a local one hashed into the digest memo (engine/loading/fingerprint.py; its fingerprint keys
the caches). Later loads on this machine skip it (a warm load). Done and timed apart from the rest of the
load, so that the load stage's rate is the same warm or cold and the fetch has a rate of its own, in bytes
per second (worker/rates.py records both; the estimate prices a fetch only for a model the worker class
has not loaded yet: service/estimates/rates.py)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from .engine.loading.fingerprint import dir_digest, file_digest, memoised
from .engine.loading.hub_download import fetch_from_hub, in_cache
from .engine.loading.weight_files import weight_map


@dataclass(frozen=True)
class Fetched:
    warm: bool  # the weights were on this machine, read before: nothing fetched
    seconds: float = 0.0


def is_warm(source: str, revision: str | None, hub: bool, home: Path | None) -> bool:
    return in_cache(source, revision) if hub else memoised(Path(source).expanduser(), home)


def fetch(
    source: str, revision: str | None, hub: bool, home: Path | None, max_bytes: int | None, private_ok: bool = True
) -> Fetched:
    """Download (hub) or hash (a local directory or file) the weights unless they are warm. A Hub model is
    checked as the loader checks it (fetch_from_hub); a local one too large is left to the loader's refusal."""
    if not hub and home is None:  # no digest memo: the loader hashes it on every load, so no load is warmer
        return Fetched(True)
    if is_warm(source, revision, hub, home):
        return Fetched(True)
    start = time.perf_counter()
    path = Path(source).expanduser()
    if hub:
        fetch_from_hub(source, revision, max_bytes, private_ok)
    elif path.is_dir():
        weight_map(path, source)  # hashed below: only the folder's own regular files (engine/loading/weight_files.py)
        if max_bytes is None or sum(f.stat().st_size for f in path.glob("*.safetensors")) <= max_bytes:
            dir_digest(path, home)
    elif path.is_file():
        if max_bytes is None or path.stat().st_size <= max_bytes:
            file_digest(path, home)
    return Fetched(False, time.perf_counter() - start)
