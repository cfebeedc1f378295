"""Content fingerprints of local weights (the statistics cache is keyed on them), memoised by
(path, size, mtime) under `home`/cache/digests.json so a large file is hashed once (no `home`: hashed
every time)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path


def file_digest(path: Path, home: Path | None = None) -> str:
    st = path.stat()
    memo_path = Path(home) / "cache" / "digests.json" if home is not None else None
    key = f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}"
    try:
        memo = json.loads(memo_path.read_text()) if memo_path is not None else {}
    except (FileNotFoundError, json.JSONDecodeError):
        memo = {}
    if key not in memo:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 24), b""):
                h.update(chunk)
        memo[key] = h.hexdigest()
        if memo_path is None:
            return memo[key]
        memo_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo_path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(memo))
        tmp.replace(memo_path)
    return memo[key]


def memoised(path: Path, home: Path | None) -> bool:
    """Whether every file dir_digest (a directory) or file_digest (a file) would hash is in the memo."""
    if home is None:
        return False
    try:
        memo = json.loads((Path(home) / "cache" / "digests.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return False
    files = sorted([path / "config.json", *path.glob("*.safetensors")]) if path.is_dir() else [path]
    try:
        return all(f"{f.resolve()}:{f.stat().st_size}:{f.stat().st_mtime_ns}" in memo for f in files)
    except OSError:
        return False


def dir_digest(path: Path, home: Path | None = None) -> str:
    """Hash of config.json and every weight file, by content."""
    h = hashlib.sha256()
    for f in sorted([path / "config.json", *path.glob("*.safetensors")]):
        h.update(f.name.encode() + b"\0" + file_digest(f, home).encode())
    return h.hexdigest()
