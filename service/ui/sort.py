"""The dashboard's jobs list sorted by a metric of the result: `?sort=metric:perplexity/wikitext2/ppl&order=asc`.

A job's value for a metric is the best over its outputs (the `k…` variants; the base model's is not
the job's result): the lowest where lower is better, else the highest, so a job with k=[2, 4] sorts
by its better output whatever the order. Jobs without the metric (queued, failed, not measured) come
last, newest first. `perplexity/NAME` and `tasks/NAME` stand for their `ppl` and `acc`.

The sort runs in the database, team-scoped and with the list's filters, and pages by keyset on
(has the metric, value, id): the cursor carries the last row's value and id and names its sort, so a
next page continues exactly; a cursor of another sort (or of the plain list) is a 422 page. A job that
gets its metric between two pages may be missed or shown twice, as in any keyset over a changing key.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy import and_, case, func, or_, select
from sqlalchemy.orm import Session

from service.core.errors import InvalidRequest
from service.core.models import Job, Metric

from . import metrics as names

PREFIX = "metric:"
MAX_COLUMNS = 4  # metric columns on the list: the team's most common shown metrics


@dataclass(frozen=True)
class Sort:
    path: str  # a stored metric name, e.g. perplexity/wikitext2/ppl
    desc: bool

    @property
    def key(self) -> str:
        return PREFIX + self.path


def _bad(field: str, msg: str) -> InvalidRequest:
    return InvalidRequest(msg, errors=[{"loc": ["query", field], "msg": msg, "type": "value_error"}])


def parse(sort: str | None, order: str | None) -> Sort | None:
    """None for the plain list (newest first); InvalidRequest for what is not a metric sort."""
    if not sort or sort == "created":
        return None
    path = sort.removeprefix(PREFIX)
    if not sort.startswith(PREFIX) or not path or len(path) > 128 or "\x00" in path:
        raise _bad("sort", "sort must be `created` or `metric:NAME`, e.g. metric:perplexity/wikitext2/ppl")
    parts = path.split("/")
    if len(parts) == 2 and parts[0] in ("perplexity", "tasks"):
        path += "/ppl" if parts[0] == "perplexity" else "/acc"
    if order not in (None, "", "asc", "desc"):
        raise _bad("order", "order must be asc or desc")
    better = names.describe(path).better
    return Sort(path, order == "desc" if order else better > 0)  # unset: the better values first


def _values(path: str):
    """(job_id, v): each job's best output value of the metric (module docstring)."""
    pick = func.max if names.describe(path).better > 0 else func.min
    return (
        select(Metric.job_id, pick(Metric.value).label("v"))
        .where(Metric.name == path, Metric.variant.like("k%"), Metric.value.is_not(None))
        .group_by(Metric.job_id)
        .subquery()
    )


def encode(sort: Sort, value: float | None, job_id: str) -> str:
    raw = json.dumps({"s": sort.key, "d": sort.desc, "v": value, "id": job_id}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode(sort: Sort, cursor: str) -> tuple[float | None, str]:
    try:
        raw = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        ok = (
            raw["s"] == sort.key
            and raw["d"] == sort.desc
            and isinstance(raw["id"], str)
            and (raw["v"] is None or isinstance(raw["v"], (int, float)))
        )
    except (binascii.Error, UnicodeDecodeError, ValueError, TypeError, KeyError, RecursionError):
        ok = False  # RecursionError: nested deeper than the parser goes (a 500 before)
    if not ok:
        raise _bad("after", "`after` is not a cursor of this sort: start from the first page")
    return raw["v"], raw["id"]


def list_sorted(
    session: Session,
    team_id: int,
    sort: Sort,
    *,
    limit: int,
    after: str | None,
    statuses: Sequence[str],
    where: Sequence = (),
) -> tuple[list[Job], bool, str | None]:
    """One page of the team's jobs in `sort`'s order (module docstring), as jobs.list_jobs answers."""
    vals = _values(sort.path)
    v = vals.c.v
    q = select(Job, v).outerjoin(vals, vals.c.job_id == Job.id).where(Job.team_id == team_id, *where)
    if statuses:
        q = q.where(Job.status.in_(statuses))
    if after:
        cv, cid = decode(sort, after)
        if cv is None:
            q = q.where(v.is_(None), Job.id < cid)
        else:
            q = q.where(or_(v.is_(None), v < cv if sort.desc else v > cv, and_(v == cv, Job.id < cid)))
    missing_last = case((v.is_(None), 1), else_=0)
    q = q.order_by(missing_last, v.desc() if sort.desc else v.asc(), Job.id.desc()).limit(limit + 1)
    rows = list(session.execute(q))
    has_more = len(rows) > limit
    rows = rows[:limit]
    cursor = encode(sort, rows[-1][1], rows[-1][0].id) if has_more and rows else None
    return [r[0] for r in rows], has_more, cursor


def columns(session: Session, team_id: int, sort: Sort | None) -> list[str]:
    """The metric columns of the list: the sorted one, then the team's most common shown metrics."""
    counts = session.execute(
        select(Metric.name, func.count())
        .join(Job, Job.id == Metric.job_id)
        .where(Job.team_id == team_id, Metric.variant.like("k%"))
        .group_by(Metric.name)
        .order_by(func.count().desc(), Metric.name)
        .limit(50)
    )
    shown = [n for n, _ in counts if names.describe(n).shown and names.describe(n).better]
    first = [sort.path] if sort else []
    return (first + [n for n in shown if n not in first])[:MAX_COLUMNS]


def best(session: Session, job_ids: Iterable[str], paths: Sequence[str]) -> dict[tuple[str, str], tuple[float, str]]:
    """{(job id, metric): (the job's value, the output it comes from, e.g. "k4")} for the page's jobs, by
    the same rule as the sort (a tie: the smaller k, as the rows are ordered)."""
    ids, out = list(job_ids), {}
    if not ids or not paths:
        return out
    rows = session.execute(
        select(Metric.job_id, Metric.name, Metric.value, Metric.variant).where(
            Metric.job_id.in_(ids), Metric.name.in_(paths), Metric.variant.like("k%"), Metric.value.is_not(None)
        )
    )
    for job_id, name, value, variant in sorted(rows, key=lambda r: (len(r.variant), r.variant)):
        sign = 1 if names.describe(name).better > 0 else -1
        held = out.get((job_id, name))
        if held is None or sign * value > sign * held[0]:
            out[(job_id, name)] = (value, variant)
    return out
