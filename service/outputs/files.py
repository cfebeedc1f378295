"""Which folder holds a job's output k, and which of its files may be read.

A local output is found from its artifact row (`local:<team>/<name>[/k{K}]`, service.core.paths.local_uri),
never from a path the client sends, and is this job's only while the owner marker of <name> names the
job (a later job of the team may have replaced it with `overwrite`). A file is served only when the
manifest lists it, and is opened one component at a time with O_NOFOLLOW under the folder's
descriptor: `..`, absolute paths, the bookkeeping files and symlinks (anywhere on the way) are all
"not found", whatever their encoding. Files are opened without blocking and served only when the
opened descriptor is a regular file (manifest.open_regular): a FIFO in place of a listed file is a
404, not a request that waits forever for a writer.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from nbl.outputs import manifest
from nbl.outputs.manifest import OWNER_FILE
from service.core.errors import NotFound, ServiceError
from service.core.models import Artifact
from service.core.paths import LOCAL_PREFIX, publish_dir
from service.core.settings import Settings
from service.jobs.service import get_job

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


class OutputOnHub(ServiceError):
    """The output was pushed to the Hub: the API does not proxy it; `hub_url` says where it is."""

    status, slug, title = 409, "output-on-hub", "This output is on the Hugging Face Hub, not served by the API"

    def __init__(self, art: Artifact):
        super().__init__(
            f"job {art.job_id}'s output k={art.k} was published to {art.uri}; download it from there "
            "(huggingface_hub.snapshot_download)",
            headers={"Link": f'<{art.uri}>; rel="alternate"'},
        )
        self.extra = {"hub_url": art.uri, "revision": art.revision, "commit_sha": art.commit_sha}


@dataclass
class Output:
    dir_fd: int  # the output folder, opened without following symlinks
    files: dict[str, dict]  # path -> {path, size, sha256}, from the manifest


def _artifact(session: Session, team_id: int, job_id: str, k: int) -> Artifact:
    get_job(session, team_id, job_id)  # another team's job: 404, exactly like a missing one
    arts = list(session.scalars(select(Artifact).where(Artifact.job_id == job_id, Artifact.k == k)))
    session.commit()  # end the read transaction before touching the disk
    local = [a for a in arts if a.uri.startswith(LOCAL_PREFIX)]
    if local:
        return local[0]
    hub = [a for a in arts if a.kind == "hub"]
    if hub:
        raise OutputOnHub(hub[0])
    if arts:  # a row from before per-team folders (`nbl admin migrate-outputs` rewrites it)
        raise NotFound(f"job {job_id}'s output k={k} predates per-team output folders; an operator must migrate it")
    raise NotFound(f"job {job_id} has no published output k={k}")


def _open_dir(name: str, dir_fd: int | None = None) -> int:
    return os.open(name, DIR_FLAGS if dir_fd is not None else os.O_RDONLY | os.O_DIRECTORY, dir_fd=dir_fd)


def _owner_job(root_fd: int) -> str | None:
    try:
        fd, _ = manifest.open_regular(OWNER_FILE, root_fd)
        with os.fdopen(fd) as f:
            data = json.load(f)
        return data.get("job_id") if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def open_output(session: Session, settings: Settings, team_id: int, job_id: str, k: int) -> Iterator[Output]:
    """The output folder of (job, k) with its manifest; NotFound when it is not (or no longer) there."""
    art = _artifact(session, team_id, job_id, k)
    team, _, rest = art.uri[len(LOCAL_PREFIX) :].partition("/")
    name, _, sub = rest.partition("/")
    gone = NotFound(f"job {job_id}'s output k={k} is no longer on the server (removed, or replaced by a later job)")
    try:
        root = publish_dir(settings, team, name)  # validates both names
    except ValueError:
        raise gone from None
    fds: list[int] = []
    try:
        try:
            fds.append(_open_dir(str(root.parent)))
            fds.append(_open_dir(name, fds[-1]))
            if _owner_job(fds[-1]) != job_id:
                raise gone
            if sub:
                fds.append(_open_dir(sub, fds[-1]))
        except OSError:
            raise gone from None
        files = manifest.read(fds[-1])
        if files is None:
            files = _backfill(fds[-1], fds[1], job_id)
        yield Output(fds[-1], {f["path"]: f for f in files})
    finally:
        for fd in fds:
            os.close(fd)


def _backfill(dir_fd: int, root_fd: int, job_id: str) -> list[dict]:
    """An output published before manifests: hash it once and store the manifest beside it (when the
    folder is writable), so later listings read it. Written through the descriptor: if a publisher
    swapped the folder meanwhile, it lands in the old folder, which is being deleted."""
    files = manifest.scan(dir_fd)
    if _owner_job(root_fd) == job_id:
        with contextlib.suppress(OSError):
            manifest.write(dir_fd, files)
    return files


def open_file(out: Output, path: str) -> tuple[int, os.stat_result, dict]:
    """(fd, stat, manifest entry) of a listed file, opened without following any symlink; NotFound
    otherwise. The caller closes the fd."""
    entry = out.files.get(path)
    parts = path.split("/")
    if entry is None or any(p in ("", ".", "..") for p in parts):
        raise NotFound(f"no file {path[:200]!r} in this output")
    fds: list[int] = []
    try:
        cur = out.dir_fd
        for part in parts[:-1]:
            fds.append(os.open(part, DIR_FLAGS, dir_fd=cur))
            cur = fds[-1]
        fd, st = manifest.open_regular(parts[-1], cur)
    except OSError:  # a symlink, a FIFO or device, or gone
        raise NotFound(f"no file {path[:200]!r} in this output") from None
    finally:
        for d in fds:
            os.close(d)
    return fd, st, entry
