"""What the dashboard can do to a job, through the API's own functions (so its rules and team
scoping: another team's job is the 404 page, a finished job's cancel the 409 page):

    POST /ui/jobs/{id}/cancel      = POST /v1/jobs/{id}/cancel
    POST /ui/jobs/{id}/rerun       = POST /v1/jobs with the job's request
    GET  /ui/jobs/{id}/clone       the job's request as JSON in a form, to edit
    POST /ui/jobs/new              = POST /v1/jobs with the form's JSON (validated as the API does)
    GET  /ui/jobs/{id}/events/stream   = GET /v1/jobs/{id}/events/stream, with the login cookie

Every POST passed csrf.protect first (install() puts it on the router). A form's `nonce` becomes
the Idempotency-Key, so a double click makes one job. A job's Hub token is never in its stored
request, so a re-run or a clone publishing to a private repo uses the team's token.
"""

from __future__ import annotations

import json
import secrets
from typing import Annotated
from urllib.parse import parse_qsl

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import RedirectResponse, Response
from fastapi.sse import EventSourceResponse
from pydantic import ValidationError

from nbl.request import JobCreate
from service.core.errors import ServiceError
from service.http.deps import CeleryDep, SessionDep, SettingsDep
from service.http.hops import OneHopRoute
from service.jobs import service as jobs
from service.jobs import stream
from service.jobs.submit import submit

from .render import page
from .routes import Who, as_page

router = APIRouter(prefix="/ui/jobs", include_in_schema=False, route_class=OneHopRoute)


async def _form(request: Request) -> dict[str, str]:
    return dict(parse_qsl((await request.body()).decode("utf-8", "replace"), max_num_fields=8))


def _nonce() -> str:
    return secrets.token_urlsafe(12)


@router.post("/{job_id}/cancel")
def cancel(job_id: str, session: SessionDep, who: Who) -> Response:
    with as_page():
        jobs.cancel_job(session, who.team_id, job_id)
    return RedirectResponse(f"/ui/jobs/{job_id}", status_code=303)


def _submit(session, celery, settings, who, spec: dict, nonce: str | None) -> str:
    """The new job's id; ValidationError or ServiceError as the API raises them."""
    body = JobCreate.model_validate(spec)
    job, _ = submit(session, celery, who, body, f"ui-{nonce}" if nonce else None, settings)
    return job.id


@router.post("/{job_id}/rerun")
async def rerun(
    request: Request, job_id: str, session: SessionDep, celery: CeleryDep, settings: SettingsDep, who: Who
) -> Response:
    form = await _form(request)
    with as_page():
        spec = jobs.get_job(session, who.team_id, job_id).spec
        session.commit()
        try:
            new = _submit(session, celery, settings, who, spec, form.get("nonce"))
        except ValidationError as e:  # a request an older release accepted: edit it instead
            return _clone_page(request, who, json.dumps(spec, indent=2), job_id, _messages(e), 422)
    return RedirectResponse(f"/ui/jobs/{new}", status_code=303)


def _clone_page(request: Request, who, text: str, source: str | None, errors: list[str], code: int = 200) -> Response:
    return page(request, "clone.html", code=code, who=who, text=text, source=source, errors=errors, nonce=_nonce())


def _messages(e: ValidationError) -> list[str]:
    return [f"{'.'.join(str(x) for x in err['loc']) or 'request'}: {err['msg']}" for err in e.errors()]


@router.get("/{job_id}/clone")
def clone_form(request: Request, job_id: str, session: SessionDep, who: Who) -> Response:
    with as_page():
        spec = jobs.get_job(session, who.team_id, job_id).spec
    session.commit()
    return _clone_page(request, who, json.dumps(spec, indent=2), job_id, [])


@router.post("/new")
async def submit_form(
    request: Request, session: SessionDep, celery: CeleryDep, settings: SettingsDep, who: Who
) -> Response:
    form = await _form(request)
    text, source = form.get("spec", ""), form.get("source") or None
    try:
        try:
            spec = json.loads(text)
        except RecursionError:  # a 500 before; the API's own body parser refuses it too
            raise ValueError("nested too deeply") from None
        if not isinstance(spec, dict):
            raise ValueError("the request must be a JSON object")
        new = _submit(session, celery, settings, who, spec, form.get("nonce"))
    except ValueError as e:  # not JSON, or (ValidationError is a ValueError) not a valid request
        errors = _messages(e) if isinstance(e, ValidationError) else [f"not a JSON object: {e}"]
        return _clone_page(request, who, text, source, errors, 422)
    except ServiceError as e:  # the API's own refusals: caps (429), limits, a reused key
        details = [f"{'.'.join(str(x) for x in err.get('loc', []))}: {err.get('msg')}" for err in e.errors or []]
        return _clone_page(request, who, text, source, details or [f"{e.title}: {e.detail or ''}"], e.status)
    return RedirectResponse(f"/ui/jobs/{new}", status_code=303)


def ui_start(
    request: Request,
    job_id: str,
    session: SessionDep,
    who: Who,
    after: Annotated[int | None, Query(ge=0, le=stream.MAX_EVENT_ID)] = None,
) -> stream.Start:
    with as_page():
        return stream.start_for(request, session, who.team_id, job_id, after, request.headers.get("last-event-id"))


@router.get("/{job_id}/events/stream", response_class=EventSourceResponse)
async def live(start: Annotated[stream.Start, Depends(ui_start)]):
    async for item in stream.events(start):
        yield item
