"""An output's file manifest, `.nbl-files.json`: each file's path, size and sha256.

The worker writes it into the staged folder when it publishes (worker/publish/local.py), so it is
renamed into place with the output and states what was published: the API lists and serves files
with these sums (the ETag) and never rehashes gigabytes per request, and a file changed on disk
afterwards no longer matches, which `nbl download` detects. An output published before manifests
existed gets one on its first listing (hashed once, then stored; see service.outputs.files).

Everything is read through a directory file descriptor (os.fwalk, dir_fd, O_NOFOLLOW): a symlink
anywhere below the folder is neither followed nor listed, and a folder swapped by a publisher while
we read is read whole, as it was when opened. Files are opened with O_NONBLOCK and kept only when
the opened descriptor is a regular file (open_regular): a FIFO or a device in the folder is skipped,
where a plain open would wait forever for a FIFO's writer and pin an API thread.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat

MANIFEST_FILE = ".nbl-files.json"
OWNER_FILE = ".nbl-owner.json"  # the team and the job that made the folder (service/core/paths.py)
HIDDEN = frozenset({OWNER_FILE, MANIFEST_FILE})  # bookkeeping, never listed nor served
CHUNK = 1 << 20
# O_NONBLOCK: opening a FIFO returns at once (reads of a regular file are unaffected by it);
# O_NOCTTY: a terminal device is never made the process's controlling terminal.
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class NotRegular(OSError):
    """The name is a FIFO, a device, a socket or a directory: never read as a file."""


def open_regular(name: str, dir_fd: int) -> tuple[int, os.stat_result]:
    """(fd, stat) of a regular file under dir_fd, never following a symlink nor blocking on a FIFO;
    OSError otherwise (NotRegular for another kind of file). The caller closes the fd."""
    fd = os.open(name, READ_FLAGS, dir_fd=dir_fd)
    st = os.fstat(fd)  # the descriptor's own kind: no window between a check and the open
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise NotRegular(f"{name!r} is not a regular file")
    return fd, st


def sha256_fd(fd: int) -> str:
    h, offset = hashlib.sha256(), 0
    while block := os.pread(fd, CHUNK, offset):
        h.update(block)
        offset += len(block)
    return h.hexdigest()


def scan(dir_fd: int) -> list[dict]:
    """[{path, size, sha256}] of every regular file under the folder, sorted by path; symlinks and
    the bookkeeping files are left out."""
    files = []
    for top, _dirs, names, top_fd in os.fwalk(".", dir_fd=dir_fd, follow_symlinks=False):
        for name in names:
            rel = os.path.normpath(os.path.join(top, name)).replace(os.sep, "/")
            if rel in HIDDEN:
                continue
            try:
                fd, st = open_regular(name, top_fd)
            except OSError:  # a symlink (ELOOP), a FIFO or device, or gone: not part of the output
                continue
            try:
                files.append({"path": rel, "size": st.st_size, "sha256": sha256_fd(fd)})
            finally:
                os.close(fd)
    return sorted(files, key=lambda f: f["path"])


def write(dir_fd: int, files: list[dict]) -> None:
    """Atomically: a reader sees the old manifest or the new one, never half of one."""
    tmp = f"{MANIFEST_FILE}.{os.getpid()}.tmp"
    # O_NONBLOCK: a FIFO planted under the temporary name fails at once (ENXIO) instead of waiting.
    fd = os.open(
        tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644, dir_fd=dir_fd
    )
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise NotRegular(f"{tmp!r} is not a regular file")
    with os.fdopen(fd, "w") as f:
        json.dump({"version": 1, "files": files}, f, indent=1)
        f.write("\n")
    os.replace(tmp, MANIFEST_FILE, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def read(dir_fd: int) -> list[dict] | None:
    """The stored manifest, or None when there is none (or it is unreadable)."""
    try:
        fd, _ = open_regular(MANIFEST_FILE, dir_fd)
    except OSError:
        return None
    try:
        with os.fdopen(fd) as f:
            data = json.load(f)
        files = data["files"]
        return [{"path": str(e["path"]), "size": int(e["size"]), "sha256": str(e["sha256"])} for e in files]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_for(folder: str | os.PathLike) -> None:
    """The publisher's call: the manifest of a staged folder, written inside it."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        write(fd, scan(fd))
    finally:
        os.close(fd)
