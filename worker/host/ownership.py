"""Who holds a job's lease, and whether that holder is known to be dead.

A lease holder is named `host:pid@boot`: the host name, the pool child's pid, and the first 8 hex
digits of the kernel's boot id (so two machines that share a host name are never confused).

When a pool child is killed (OOM, SIGKILL), Celery's parent process re-queues its message at once
(task_reject_on_worker_lost) and a new child of the same worker receives it, while the job is still
leased to the dead child for up to NBL_LEASE_SECONDS. That child was on this host: if its pid no
longer exists, nobody else can be running the job, so the new child takes over at once instead of
waiting for the lease to expire (lease.claim_job(dead_owner=...)). Anything this process cannot
prove dead (another host, another boot, a live pid) keeps its lease until it expires.
"""

from __future__ import annotations

import os
import socket
from functools import lru_cache

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.core.models import OWNED, Job


@lru_cache(maxsize=1)
def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip().replace("-", "")[:8]
    except OSError:
        return "noboot"


def me() -> str:
    return f"{socket.gethostname()}:{os.getpid()}@{_boot_id()}"


def is_dead_here(owner: str | None) -> bool:
    """True only for a holder of this host and boot whose process no longer exists."""
    if not owner:
        return False
    host_pid, _, boot = owner.rpartition("@")
    host, _, pid = host_pid.rpartition(":")
    if host != socket.gethostname() or boot != _boot_id() or not pid.isdigit() or int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    return False


def dead_local_owner(session: Session, job_id: str) -> str | None:
    """The holder of the job's lease, if it is provably dead (is_dead_here); else None."""
    owner = session.scalar(select(Job.lease_owner).where(Job.id == job_id, Job.status.in_(OWNED)))
    session.commit()
    return owner if is_dead_here(owner) else None
