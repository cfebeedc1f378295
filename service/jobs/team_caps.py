"""Per-team caps at submit, each a 429 with Retry-After: the same request succeeds later.

- active jobs (queued + running + cancelling; the team's own cap if set) and, when configured,
  queued jobs alone: they free up as jobs finish;
- jobs created in the last hour, cancelled ones included (NBL_MAX_JOBS_PER_TEAM_PER_HOUR). A job
  cancelled at once no longer counts as active, but its message stays in the shared queue for a
  worker to drop: a team that submitted and cancelled in a loop filled the queue ahead of every
  other team (issue 24, red-team pass). Idempotent replays create nothing and count nothing.

create_job calls these under the team's lock (`lock_team`) until it commits, so one team's
concurrent requests count one after the other.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.core.errors import TooManyActiveJobs, TooManyJobsCreated
from service.core.models import ACTIVE, Job, JobStatus, Team, utcnow
from service.core.settings import Settings
from service.keys.auth import Principal

WINDOW = timedelta(hours=1)


def lock_team(session: Session, team_id: int) -> None:
    """Lock the team's row until the transaction ends (Postgres; SQLite's BEGIN IMMEDIATE serializes
    writers anyway): one team's submits check their key and caps one after the other."""
    session.execute(select(Team.id).where(Team.id == team_id).with_for_update())


def check_team_caps(session: Session, principal: Principal, settings: Settings) -> None:
    counts = dict(
        session.execute(
            select(Job.status, func.count())
            .where(Job.team_id == principal.team_id, Job.status.in_(ACTIVE))
            .group_by(Job.status)
        ).all()
    )
    caps = [
        ("active", sum(counts.values()), principal.max_active_jobs or settings.max_active_jobs_per_team),
        ("queued", counts.get(JobStatus.queued.value, 0), settings.max_queued_jobs_per_team),
    ]
    for what, n, cap in caps:
        if cap is not None and n >= cap:
            session.rollback()
            raise TooManyActiveJobs(
                f"team {principal.team_name!r} has {n} {what} jobs (limit {cap}); retry later, or cancel some",
                retry_after_s=settings.cap_retry_after_s,
            )
    check_creation_rate(session, principal, settings.max_jobs_per_team_per_hour)


def first_id_since(t: datetime) -> str:
    """The smallest job id created at `t` or later: ids begin with their creation time in milliseconds
    (models.new_job_id), so the window is a range of the (team_id, id) index."""
    return f"job_{int(t.timestamp() * 1000):012x}"


def check_creation_rate(session: Session, principal: Principal, cap: int | None, now: datetime | None = None) -> None:
    if cap is None:
        return
    now = now or utcnow()
    in_window = (Job.team_id == principal.team_id, Job.id >= first_id_since(now - WINDOW))
    n = session.scalar(select(func.count()).select_from(Job).where(*in_window))
    if n < cap:
        return
    # The wait until enough of them leave the window for one more: the (n - cap + 1)-th oldest's age-out.
    oldest = session.scalar(select(Job.created_at).where(*in_window).order_by(Job.id).offset(n - cap).limit(1))
    wait_s = max(1, math.ceil(((oldest or now) + WINDOW - now).total_seconds()))
    session.rollback()
    raise TooManyJobsCreated(
        f"team {principal.team_name!r} created {n} jobs in the last hour, cancelled ones "
        f"included (limit {cap}); retry in {wait_s} s",
        retry_after_s=wait_s,
    )
