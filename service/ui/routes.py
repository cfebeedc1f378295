"""/ui: the dashboard's pages, server-rendered from the jobs service (the same functions as /v1/jobs,
so the pages show what the API returns, with the same team scoping and filters).

Every page answers HTML, errors included: a missing job and another team's job are the same 404
page, a bad filter is a 422 page. Pages send a CSP with no scripts and no inline styles.
"""

from __future__ import annotations

import secrets
from contextlib import contextmanager
from functools import partial
from typing import Annotated
from urllib.parse import parse_qsl, urlencode

from fastapi import APIRouter, Depends, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from service.core.errors import ServiceError, Unauthorized
from service.core.models import utcnow
from service.http.deps import SessionDep
from service.http.hops import OneHopRoute
from service.jobs import filters as job_filters
from service.jobs import service as jobs
from service.jobs.views import job_view, job_views
from service.keys.auth import Principal, authenticate

from . import chart, compare, csrf, metrics, views
from . import session as ui_session
from . import sort as metric_sort
from .outcome import outcome
from .render import page
from .request_diff import request_diff

router = APIRouter(prefix="/ui", include_in_schema=False, route_class=OneHopRoute)
MAX_COMPARE = 10
PAGE_SIZE = 25


class PageError(Exception):
    """Rendered as the error page with this status (install() registers the handler)."""

    def __init__(self, status: int, title: str, detail: str = ""):
        super().__init__(detail or title)
        self.status, self.title, self.detail = status, title, detail


@contextmanager
def as_page():
    """Domain errors of the jobs service as error pages (the API renders the same ones as JSON)."""
    try:
        yield
    except ServiceError as e:
        title = "Not found" if e.status == 404 else e.title
        detail = "No such job, or not one of your team's." if e.status == 404 else (e.detail or "")
        raise PageError(e.status, title, detail) from None


def ui_principal(request: Request, session: SessionDep) -> Principal:
    with as_page():
        return ui_session.principal(request, session)


Who = Annotated[Principal, Depends(ui_principal)]


@router.get("")
@router.get("/")
def index() -> RedirectResponse:
    return RedirectResponse(ui_session.PATH + "/jobs", status_code=303)


def login_page(request: Request, target: str, code: int = 200, **extra: str) -> HTMLResponse:
    """The login form, with a pre-session CSRF token (and its cookie) when the browser has none."""
    fresh = None if csrf.token(request) else secrets.token_urlsafe(32)
    response = page(request, "login.html", code=code, next=target, **({"csrf": fresh} if fresh else {}), **extra)
    if fresh:
        csrf.set_presession(request, response, fresh)
    return response


@router.get("/login")
def login_form(request: Request, next: str | None = None) -> HTMLResponse:  # noqa: A002
    return login_page(request, ui_session.safe_next(next))


@router.post("/login")
async def login(request: Request) -> Response:
    """A urlencoded form (`key`, `next`, `csrf`: checked by csrf.protect before this runs); parsed
    here, so no multipart dependency."""
    try:
        form = dict(parse_qsl((await request.body()).decode("utf-8", "replace"), max_num_fields=4))
    except ValueError:  # more fields than the form has: not our form
        form = {}
    key, target = form.get("key", "").strip(), ui_session.safe_next(form.get("next"))

    def check() -> bool:
        with request.app.state.sessions() as s:
            try:
                authenticate(s, f"Bearer {key}")
                s.commit()
                return True
            except Unauthorized:
                return False

    if not key or not await run_in_threadpool(check):
        return login_page(request, target, 401, error="That key is not valid (or was revoked).")
    response = RedirectResponse(target, status_code=303)
    ui_session.set_key(response, request, key)
    return response


@router.post("/logout")
def logout(request: Request) -> RedirectResponse:
    response = RedirectResponse(ui_session.PATH + "/login", status_code=303)
    ui_session.clear_key(response, request)
    return response


@router.get("/jobs")
@job_filters.takes_metadata
def jobs_page(
    request: Request,
    session: SessionDep,
    who: Who,
    status: str = "",
    after: str | None = None,
    meta: Annotated[str | None, Query(description="KEY=VALUE, from the filter form")] = None,
    sort: str | None = None,
    order: str | None = None,
    limit: int = PAGE_SIZE,
) -> Response:
    if meta is not None:  # the form's KEY=VALUE box becomes the API's own `metadata.KEY=VALUE`
        params = [(k, v) for k, v in request.query_params.multi_items() if k not in ("meta", "after")]
        key, sep, value = meta.partition("=")
        if sep and key.strip():
            params.append((job_filters.PREFIX + key.strip(), value.strip()))
        return RedirectResponse(f"{request.url.path}?{urlencode(params)}", status_code=303)
    limit = min(max(limit, 1), 100)
    with as_page():
        filters = job_filters.metadata_filters(request)
        by = metric_sort.parse(sort, order)
        lister = jobs.list_jobs if by is None else partial(metric_sort.list_sorted, sort=by)
        rows, has_more, cursor = lister(
            session,
            who.team_id,
            limit=limit,
            after=after,
            statuses=jobs.parse_statuses([status]),
            where=job_filters.metadata_clauses(filters),
        )
        data = job_views(session, rows)
        cols = metric_sort.columns(session, who.team_id, by)
        values = metric_sort.best(session, [j.id for j in data], cols)
    session.commit()
    keep = [(k, v) for k, v in request.query_params.multi_items() if k != "after"]
    now = utcnow()
    items = [
        {
            "job": j,
            "recipe": views.recipe(j.spec, j.metadata),
            "age": views.age(j.created_at, now),
            "eta": views.duration(j.eta_seconds) if j.status not in views.TERMINAL else "",
            "values": [_cell(c, values.get((j.id, c))) for c in cols],
        }
        for j in data
    ]
    return page(
        request,
        "jobs.html",
        who=who,
        items=items,
        status=status,
        filters=filters,
        columns=_sort_links(request, cols, by),
        newest_url=_sort_links(request, [], None, newest=True),
        next_url=f"{request.url.path}?{urlencode(keep + [('after', cursor)])}" if has_more else None,
        statuses=["queued", "running", "cancelling", "succeeded", "failed", "cancelled"],
    )


def _cell(path: str, best: tuple[float, str] | None) -> dict:
    """A metric cell of the list: the job's best output's value and which output that is (k2, k4, ...)."""
    value, variant = best if best is not None else (None, None)
    return {"value": metrics.value(metrics.describe(path), value), "output": variant}


def _sort_links(request: Request, cols: list[str], by, newest: bool = False):
    """A header per metric column: its label, the link that sorts by it (again: the other way), its
    arrow; with `newest`, the link back to the plain list (newest first) with the same filters."""
    base = [(k, v) for k, v in request.query_params.multi_items() if k not in ("after", "sort", "order")]
    if newest:
        return f"{request.url.path}?{urlencode(base)}"
    out = []
    for c in cols:
        here = by is not None and by.path == c
        toggle = [("order", "asc" if by.desc else "desc")] if here else []
        params = base + [("sort", metric_sort.PREFIX + c)] + toggle
        out.append(
            {
                "label": metrics.describe(c).label,
                "path": c,
                "url": f"{request.url.path}?{urlencode(params)}",
                "arrow": ("↓" if by.desc else "↑") if here else "",
            }
        )
    return out


RECENT_EVENTS = 5  # the job page shows these; the rest fold under "All N events" (a job writes hundreds)


@router.get("/jobs/{job_id}")
def job_page(request: Request, job_id: str, session: SessionDep, who: Who) -> Response:
    with as_page():
        job = job_view(session, jobs.get_job(session, who.team_id, job_id))
        events = jobs.list_events(session, who.team_id, job_id, after=None, limit=1000).data
        layers = [row.model_dump() for row in jobs.layer_scores(session, who.team_id, job_id).data]
    session.commit()
    now = utcnow()
    return page(
        request,
        "job.html",
        who=who,
        job=job,
        nonce=secrets.token_urlsafe(12),
        stage_class=views.stage_class,
        recipe=views.recipe(job.spec, job.metadata),
        events=events,
        recent_events=RECENT_EVENTS,
        age=views.age(job.created_at, now),
        timeline=views.timeline(events, job, now),
        charts=chart.job_charts(layers, [s.model_dump() for s in job.selected_layers or []], job.spec),
        result=views.result_table(job.result),
        duration=views.duration,
        num=views.num,
        eta=views.duration(job.eta_seconds) if job.status not in views.TERMINAL else "",
        artifacts=[(a, views.artifact_href(a.uri)) for a in job.artifacts],
        outcome=outcome(job),
    )


@router.get("/compare")
def compare_page(
    request: Request,
    session: SessionDep,
    who: Who,
    ids: Annotated[list[str], Query(description="job ids: a,b or repeated")] = [],  # noqa: B006
    baseline: str = "base",
) -> Response:
    wanted = list(dict.fromkeys(i.strip() for v in ids for i in v.split(",") if i.strip()))
    if not 2 <= len(wanted) <= MAX_COMPARE:
        raise PageError(422, "Pick jobs to compare", f"Compare takes 2 to {MAX_COMPARE} job ids (ids=a,b).")
    with as_page():
        data = job_views(session, [jobs.get_job(session, who.team_id, i) for i in wanted])
    session.commit()
    baseline = baseline if baseline in wanted else "base"
    label = "each job's base model" if baseline == "base" else f"job …{baseline[-8:]}"
    return page(
        request,
        "compare.html",
        who=who,
        jobs=data,
        recipes=[views.recipe(j.spec, j.metadata) for j in data],
        diff=request_diff([j.spec for j in data]),
        selected=views.selected_side_by_side(data),
        baseline=baseline,
        charts=[{"metric": r["metric"], "svg": compare.chart(r, label)} for r in compare.rows(data, baseline)],
    )
