"""Which listed files a download may write: the server's listing is checked whole before any byte is.

A listing comes from the server, so it is input like any other. Each entry must be a plain relative
'/'-separated path that stays inside the target folder and that every filesystem the client runs on
can hold; the listing as a whole must name each path once and never use one name both as a file
and as a folder. Anything else is UnsafePath (a ValueError), naming the path (cut to 200 characters),
and nothing is written.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

MAX_NAME_BYTES = 255  # NAME_MAX of ext4, xfs, apfs, ntfs
MAX_PATH_BYTES = 4096  # PATH_MAX of Linux, less the target folder's own length in practice
PART = ".part"  # a download in progress: <path>.part
_SHA256 = re.compile(r"[0-9a-f]{64}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class UnsafePath(ValueError):
    """A listed path that is absolute, climbs out of the target folder or cannot be a file name there."""


def _refuse(path: str, why: str) -> UnsafePath:
    shown = repr(path[:200]) + (f" (cut from {len(path)} characters)" if len(path) > 200 else "")
    return UnsafePath(f"refusing the listed path {shown}: {why}")


def parts(path: str) -> tuple[str, ...]:
    """The components of one listed path; UnsafePath unless it is a plain relative path."""
    if not isinstance(path, str) or not path:
        raise _refuse(str(path), "empty")
    if _CONTROL.search(path):
        raise _refuse(path, "it holds a control character (NUL, newline, ...)")
    if "\\" in path:
        raise _refuse(path, "it holds a backslash")
    if path.startswith("/") or PurePosixPath(path).is_absolute():
        raise _refuse(path, "absolute")
    names = tuple(path.split("/"))
    if any(n in ("", ".", "..") for n in names):
        raise _refuse(path, "not a plain relative path ('', '.' or '..' in it)")
    if len(path.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
        raise _refuse(path, f"longer than {MAX_PATH_BYTES} bytes")
    if any(len(n.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES for n in names):
        raise _refuse(path, f"a name in it is longer than {MAX_NAME_BYTES} bytes")
    return names


def target(root: Path, path: str) -> Path:
    """Where one listed path lands under `root` (UnsafePath if it would not be a plain file there)."""
    return root.joinpath(*parts(path))


def check(files: Iterable) -> None:
    """Every entry (path, size, sha256, url) of a listing, and the listing as a whole."""
    files = list(files)
    seen: set[str] = set()
    folders: set[str] = set()
    for f in files:
        names = parts(f.path)
        if f.path in seen:
            raise _refuse(f.path, "listed twice")
        seen.add(f.path)
        folders.update("/".join(names[:i]) for i in range(1, len(names)))
        if not isinstance(f.size, int) or f.size < 0:
            raise _refuse(f.path, f"its size {f.size!r} is not a byte count")
        if not isinstance(f.sha256, str) or not _SHA256.fullmatch(f.sha256):
            raise _refuse(f.path, "its sha256 is not 64 lowercase hex digits")
        url = urlsplit(f.url) if isinstance(f.url, str) and not _CONTROL.search(f.url) else None
        if url is None or url.scheme or url.netloc or not f.url.startswith("/"):
            raise _refuse(f.path, "its URL is not a path on the API's own server")
    for path in sorted(seen):
        if path in folders:
            raise _refuse(path, "listed both as a file and as a folder")
        if path.endswith(PART) and path[: -len(PART)] in seen:
            raise _refuse(path, f"it is where {path[: -len(PART)]!r} is written while it downloads")
