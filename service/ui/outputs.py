"""The dashboard's downloads: a job's outputs and the job as JSON, with the login cookie.

The key cookie covers /ui only (session.py), and the API takes only `Authorization` headers, so the
job page's links to /v1 answered 401 in a browser. These routes serve the same things under /ui,
by the same functions as the API (so the same team scoping: another team's job is a 404), for
GET only: the API stays header-only, and no cookie ever authorises a change there.

    /ui/jobs/{id}/json                      = GET /v1/jobs/{id}
    /ui/jobs/{id}/outputs/{k}/files         the file list as a page, each file a download link
    /ui/jobs/{id}/outputs/{k}/files/{path}  = GET /v1/jobs/{id}/outputs/{k}/files/{path} (Range too)
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Header, Request
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse, Response

from service.http.deps import SessionDep, SettingsDep
from service.http.hops import OneHopRoute
from service.jobs import service as jobs
from service.jobs.views import job_view
from service.outputs import files as output_files
from service.outputs.endpoints import K, file_response
from service.outputs.schemas import file_entry

from . import views
from .render import HEADERS, page
from .routes import Who, as_page

router = APIRouter(prefix="/ui/jobs", include_in_schema=False, route_class=OneHopRoute)


@router.get("/{job_id}/json")
def job_json(job_id: str, session: SessionDep, who: Who) -> Response:
    with as_page():
        job = job_view(session, jobs.get_job(session, who.team_id, job_id))
    session.commit()
    return JSONResponse(jsonable_encoder(job), headers=HEADERS)  # as the API renders its JobOut


@router.get("/{job_id}/outputs/{k}/files")
def output_page(request: Request, job_id: str, k: K, session: SessionDep, settings: SettingsDep, who: Who) -> Response:
    with as_page():
        with output_files.open_output(session, settings, who.team_id, job_id, k) as out:
            entries = [file_entry(job_id, k, f) for f in out.files.values()]
    return page(
        request,
        "outputs.html",
        who=who,
        job_id=job_id,
        k=k,
        num=views.num,
        files=[(f, views.artifact_href(f.url)) for f in sorted(entries, key=lambda f: f.path)],
    )


@router.get("/{job_id}/outputs/{k}/files/{path:path}")
def output_file(
    request: Request,
    job_id: str,
    k: K,
    path: str,
    session: SessionDep,
    settings: SettingsDep,
    who: Who,
    range_: Annotated[str | None, Header(alias="Range")] = None,
    if_range: Annotated[str | None, Header(alias="If-Range")] = None,
) -> Response:
    with as_page():
        response = file_response(session, settings, who.team_id, job_id, k, path, request, range_, if_range)
    # A download, never a document of this origin (an output's README.md or HTML is not rendered here).
    name = path.rsplit("/", 1)[-1]
    ascii_name = "".join(c if c.isascii() and c.isprintable() and c not in '"\\' else "_" for c in name)
    response.headers.update(HEADERS)
    response.headers["Content-Disposition"] = f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(name)}"
    return response
