"""Fetch an output's files into a folder: resumable, checked, atomic.

Each file goes to `<dir>/<path>.part` and is renamed to `<dir>/<path>` only once its sha256 is the
one the API listed, so `<dir>/<path>` is always a whole, checked file. A `.part` left by an
interrupted run is resumed with `Range: bytes=<its size>-` and `If-Range: <the listed ETag>` (if the
file changed on the server the API sends it whole, and the part is discarded). A file already
present with the listed sha256 is not fetched again. A sha256 that differs removes the part and
raises ChecksumMismatch: the next run fetches that file from the start.

Paths come from the server but are checked here too: a listed path that would land outside `dir`
is refused (UnsafePath), never written.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from .http import Unavailable
from .models import OutputFile

CHUNK = 1 << 20


class ChecksumMismatch(Exception):
    """A downloaded file's sha256 is not the listed one (corrupted on the server or on the way)."""

    def __init__(self, path: str, expected: str, got: str):
        super().__init__(f"{path}: sha256 {got} is not the listed {expected}; the partial file was removed, "
                         "run the download again to fetch it anew")
        self.path, self.expected, self.got = path, expected, got


class UnsafePath(ValueError):
    """A listed path that is absolute or climbs out of the target folder."""


@dataclass
class Fetched:
    path: str
    size: int
    sha256: str
    status: str  # "downloaded" | "resumed" | "present" (already there with this sha256)


def target(root: Path, path: str) -> Path:
    parts = PurePosixPath(path).parts
    if not parts or PurePosixPath(path).is_absolute() or any(p in ("..", ".", "") for p in parts) or "\\" in path:
        raise UnsafePath(f"refusing the listed path {path[:200]!r}: not a plain relative path")
    return root.joinpath(*parts)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def fetch_file(api, f: OutputFile, root: Path, deadline: float | None = None, attempts: int = 3) -> Fetched:
    """One listed file into `root` (see the module docstring). A connection lost mid-file is resumed
    from the part, up to `attempts` times; then Unavailable, and the part stays for the next run."""
    import httpx

    for attempt in range(1, attempts + 1):
        try:
            return _fetch(api, f, root, deadline)
        except httpx.TransportError as e:
            if attempt == attempts:
                raise Unavailable(f"{f.path}: the connection was lost {attempts} times ({type(e).__name__}); "
                                  "run the download again to resume it") from None
    raise AssertionError("unreachable")


def _fetch(api, f: OutputFile, root: Path, deadline: float | None) -> Fetched:
    dest = target(root, f.path)
    if dest.is_file() and not dest.is_symlink() and dest.stat().st_size == f.size and sha256_file(dest) == f.sha256:
        return Fetched(f.path, f.size, f.sha256, "present")
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    have = part.stat().st_size if part.is_file() and not part.is_symlink() else 0
    if have > f.size:
        have = 0  # longer than the file: not a prefix of it
    headers = {"Range": f"bytes={have}-", "If-Range": f'"{f.sha256}"'} if have else {}
    status = "downloaded"
    if have == f.size and have:
        status = "resumed"  # complete already: only the check is left
    else:
        resp = api.stream(f.url, deadline=deadline, headers=headers)
        try:
            resumed = resp.status_code == 206
            if have and resumed and not resp.headers.get("content-range", "").startswith(f"bytes {have}-"):
                raise ValueError(f"{f.path}: the API answered another range than asked "
                                 f"({resp.headers.get('content-range')!r})")
            status = "resumed" if resumed else "downloaded"
            with open(part, "ab" if resumed else "wb") as out:
                for block in resp.iter_bytes(CHUNK):
                    out.write(block)
                out.flush()
                os.fsync(out.fileno())
        finally:
            resp.close()
    got = sha256_file(part)
    if got != f.sha256:
        part.unlink(missing_ok=True)
        raise ChecksumMismatch(f.path, f.sha256, got)
    os.replace(part, dest)
    return Fetched(f.path, f.size, f.sha256, status)


def fetch_all(api, files: list[OutputFile], root: Path, deadline: float | None = None,
              on_file: Callable[[Fetched], None] | None = None) -> list[Fetched]:
    """Every listed file; the paths are checked before any byte is written."""
    for f in files:
        target(root, f.path)
    done = []
    for f in files:
        done.append(fetch_file(api, f, root, deadline))
        if on_file:
            on_file(done[-1])
    return done
