"""Fetch an output's files into a folder: resumable, checked, atomic, and never outside the folder.

Each file goes to `<dir>/<path>.part` and is renamed to `<dir>/<path>` only once its sha256 is the
one the API listed, so `<dir>/<path>` is always a whole, checked file. A `.part` left by an
interrupted run is resumed with `Range: bytes=<its size>-` and `If-Range: <the listed ETag>` (if the
file changed on the server the API sends it whole, and the part is discarded). A file already
present with the listed sha256 is not fetched again. A sha256 that differs removes the part and
raises ChecksumMismatch: the next run fetches that file from the start.

The listing comes from the server and is checked whole before any byte is written
(nbl_client.listing: a path that would leave `dir` or cannot be a file name is UnsafePath). Writes
never follow a symlink: each folder under `dir` is opened with O_NOFOLLOW and used by descriptor,
a `.part` that is not a regular file (a planted symlink, a FIFO) is removed (the link, never its
target) and the part created anew with O_EXCL, and the part is renamed over `<path>` (a symlink
there is replaced, its target untouched). A folder under `dir` that is a symlink or a file is
UnsafePath. The API never gets to write more than the listed size (plus one byte, which then
fails the check).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .http import Unavailable
from .listing import PART, UnsafePath, check, parts, target
from .models import OutputFile

CHUNK = 1 << 20
_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK  # O_NONBLOCK: a FIFO does not block the open
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

__all__ = ["ChecksumMismatch", "Fetched", "UnsafePath", "fetch_all", "fetch_file", "sha256_file", "target"]


class ChecksumMismatch(Exception):
    """A downloaded file's sha256 is not the listed one (corrupted on the server or on the way)."""

    def __init__(self, path: str, expected: str, got: str):
        super().__init__(
            f"{path}: sha256 {got} is not the listed {expected}; the partial file was removed, "
            "run the download again to fetch it anew"
        )
        self.path, self.expected, self.got = path, expected, got


@dataclass
class Fetched:
    path: str
    size: int
    sha256: str
    status: str  # "downloaded" | "resumed" | "present" (already there with this sha256)


def sha256_file(path: Path) -> str:
    with open(path, "rb") as f:
        return _sha256_fd(f.fileno())


def _sha256_fd(fd: int) -> str:
    h = hashlib.sha256()
    os.lseek(fd, 0, os.SEEK_SET)
    while block := os.read(fd, CHUNK):
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
                raise Unavailable(
                    f"{f.path}: the connection was lost {attempts} times ({type(e).__name__}); "
                    "run the download again to resume it"
                ) from None
    raise AssertionError("unreachable")


def _fetch(api, f: OutputFile, root: Path, deadline: float | None) -> Fetched:
    *folders, name = parts(f.path)
    d = _open_folder(root, folders, f.path)
    try:
        if _present(d, name, f):
            return Fetched(f.path, f.size, f.sha256, "present")
        fd, have = _open_part(d, name + PART, f)
        try:
            status = _receive(api, f, fd, have, deadline)
            got = _sha256_fd(fd)
        finally:
            os.close(fd)
        if got != f.sha256:
            os.unlink(name + PART, dir_fd=d)
            raise ChecksumMismatch(f.path, f.sha256, got)
        try:
            os.replace(name + PART, name, src_dir_fd=d, dst_dir_fd=d)
        except IsADirectoryError:
            os.unlink(name + PART, dir_fd=d)
            raise UnsafePath(f"refusing to write {f.path!r}: a folder is in its place in {root}") from None
        os.fsync(d)
        return Fetched(f.path, f.size, f.sha256, status)
    finally:
        os.close(d)


def _open_folder(root: Path, folders: list[str], path: str) -> int:
    """A descriptor of root/folders..., each created if missing and opened without following a symlink."""
    root.mkdir(parents=True, exist_ok=True)  # the folder the user named (it may be a symlink: their choice)
    d = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    for i, folder in enumerate(folders):
        try:
            with contextlib.suppress(FileExistsError):
                os.mkdir(folder, dir_fd=d)
            child = os.open(folder, _DIR, dir_fd=d)
        except OSError as e:
            if e.errno in (errno.ENOTDIR, errno.ELOOP):
                raise UnsafePath(
                    f"refusing to write {path!r}: {'/'.join(folders[: i + 1])!r} in {root} is a "
                    "symlink or a file, not a folder"
                ) from None
            raise
        finally:
            os.close(d)
        d = child
    return d


def _present(d: int, name: str, f: OutputFile) -> bool:
    """`name` is a regular file (not a symlink) with the listed size and sha256."""
    try:
        fd = os.open(name, os.O_RDONLY | _NOFOLLOW, dir_fd=d)
    except OSError:
        return False  # missing, a symlink (ELOOP), unreadable: fetched and renamed over it
    try:
        st = os.fstat(fd)
        return stat.S_ISREG(st.st_mode) and st.st_size == f.size and _sha256_fd(fd) == f.sha256
    finally:
        os.close(fd)


def _open_part(d: int, part: str, f: OutputFile) -> tuple[int, int]:
    """(descriptor, bytes already there) of `part`: a regular file no longer than the listed size
    is resumed; anything else at that name is removed and the part created anew, exclusively."""
    try:
        fd = os.open(part, os.O_RDWR | os.O_APPEND | _NOFOLLOW, dir_fd=d)
    except FileNotFoundError:
        fd = None
    except OSError:  # a symlink (ELOOP), a folder, ...: not ours to resume
        fd = None
        _remove(d, part)
    if fd is not None:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_size <= f.size:
            return fd, st.st_size
        os.close(fd)
        _remove(d, part)
    fd = os.open(part, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o666, dir_fd=d)
    return fd, 0


def _remove(d: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=d)  # a symlink itself, never its target
    except FileNotFoundError:
        pass
    except (IsADirectoryError, PermissionError) as e:
        raise UnsafePath(
            f"refusing to write {name!r}: something that is not a file is in its place ({e.strerror})"
        ) from None


def _receive(api, f: OutputFile, fd: int, have: int, deadline: float | None) -> str:
    """The rest of the file appended to the part: "resumed" when the API sent the asked range,
    "downloaded" when it sent it whole (the part is emptied first)."""
    if have and have == f.size:
        return "resumed"  # complete already: only the check is left
    headers = {"Range": f"bytes={have}-", "If-Range": f'"{f.sha256}"'} if have else {}
    resp = api.stream(f.url, deadline=deadline, headers=headers)
    try:
        resumed = bool(have) and resp.status_code == 206
        if resumed and not resp.headers.get("content-range", "").startswith(f"bytes {have}-"):
            raise ValueError(
                f"{f.path}: the API answered another range than asked ({resp.headers.get('content-range')!r})"
            )
        if not resumed:
            os.ftruncate(fd, 0)
            have = 0
        for block in resp.iter_bytes(CHUNK):
            view = memoryview(block)[: f.size + 1 - have]  # a byte past the listed size is enough to fail the check
            have += len(view)
            while view:
                view = view[os.write(fd, view) :]
            if have > f.size:
                break
        os.fsync(fd)
    finally:
        resp.close()
    return "resumed" if resumed else "downloaded"


def fetch_all(
    api,
    files: list[OutputFile],
    root: Path,
    deadline: float | None = None,
    on_file: Callable[[Fetched], None] | None = None,
) -> list[Fetched]:
    """Every listed file; the listing is checked whole before any byte is written."""
    check(files)
    done = []
    for f in files:
        done.append(fetch_file(api, f, root, deadline))
        if on_file:
            on_file(done[-1])
    return done
