"""GET /v1/usage: what the caller's team has used, by calendar month (UTC), newest first, and its disk now.

A month counts the jobs created in it, by status, and the hours its jobs held a worker: from their first
start to their end (or now, while they run), by worker class (the queue their estimate chose; `unknown`
without one). GPU-hours are those hours times the class's devices (NBL_WORKER_CLASSES; a CPU class has
none). Paged by month: `next_cursor` names the last month given."""

from __future__ import annotations

import re
from collections import defaultdict
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from nbl.outputs.quota import usage as disk_usage
from nbl.sizing.classes import parse_classes, queue_of
from service.core.models import Job, utcnow
from service.core.settings import Settings
from service.http.pagination import decode_cursor, encode_cursor

_MONTH = re.compile(r"\d{4}-\d{2}")
CURSOR = "u1"  # a page of months ends after this month (service/http/pagination.py)


def months(rows, devices: dict[str, int], now: datetime) -> list[dict]:
    """Pure: (created_at, status, started_at, finished_at, queue) rows -> one entry per month, newest first."""
    out: dict[str, dict] = {}
    for created, status, started, finished, queue in rows:
        month = created.strftime("%Y-%m")
        m = out.setdefault(
            month, {"month": month, "jobs": defaultdict(int), "worker_hours": defaultdict(float), "gpu_hours": 0.0}
        )
        m["jobs"][status] += 1
        m["jobs"]["total"] += 1
        if started is not None:
            hours = max(((finished or now) - started).total_seconds(), 0.0) / 3600
            cls = queue or "unknown"
            m["worker_hours"][cls] += hours
            m["gpu_hours"] += hours * devices.get(cls, 0)
    return [
        {
            "month": m["month"],
            "jobs": dict(m["jobs"]),
            "worker_hours": {k: round(v, 4) for k, v in sorted(m["worker_hours"].items())},
            "gpu_hours": round(m["gpu_hours"], 4),
        }
        for _, m in sorted(out.items(), reverse=True)
    ]


def report(session: Session, settings: Settings, team_id: int, team_name: str, limit: int, after: str | None) -> dict:
    before = decode_cursor(after, CURSOR, _MONTH) if after else None
    rows = session.execute(
        select(
            Job.created_at, Job.status, Job.started_at, Job.finished_at, Job.estimate["worker_class"].as_string()
        ).where(Job.team_id == team_id)
    ).all()
    devices = {queue_of(settings.queue_name, c): c.devices for c in parse_classes(settings.worker_classes)}
    listed = [m for m in months(rows, devices, utcnow()) if before is None or m["month"] < before]
    chunk, more = listed[:limit], len(listed) > limit
    return {
        "object": "usage",
        "team": team_name,
        "disk": {
            "outputs_bytes": disk_usage(settings.publish_dir, team_name),
            "quota_bytes": settings.team_disk_quota_bytes,
        },
        "data": chunk,
        "has_more": more,
        "next_cursor": encode_cursor(CURSOR, chunk[-1]["month"]) if more and chunk else None,
    }
