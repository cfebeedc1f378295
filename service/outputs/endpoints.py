"""/v1/jobs/{id}/outputs/{k}/files: a local output's files, listed and streamed (HTTP Range).

Only local outputs (`publish: {local_dir: ...}`) are served. A Hub output is a 409 problem+json
`output-on-hub` whose `hub_url` (and `Link` header) says where it is: not a redirect, so a client
that follows redirects never mistakes the Hub's HTML page for a file. Another team's job, an output
that is gone, and any path the output does not list are 404s (service.outputs.files).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Annotated

from fastapi import APIRouter, Header, Path, Request
from fastapi.responses import Response, StreamingResponse
from sqlalchemy.orm import Session

from nbl.outputs.manifest import CHUNK
from service.core.errors import Problem
from service.core.settings import Settings
from service.http.deps import PrincipalDep, SessionDep, SettingsDep
from service.http.hops import OneHopRoute
from service.http.problems import problem

from . import files as output_files
from .ranges import Unsatisfiable, byte_range
from .schemas import OutputFileList, file_entry

PROBLEM = {"model": Problem, "content": {"application/problem+json": {}}}
K = Annotated[int, Path(ge=0, le=10_000, description="the output's k (number of replaced layers)")]

router = APIRouter(
    prefix="/v1/jobs", tags=["outputs"], route_class=OneHopRoute, responses={401: PROBLEM, 404: PROBLEM, 422: PROBLEM}
)


@router.get(
    "/{job_id}/outputs/{k}/files",
    response_model=OutputFileList,
    responses={409: PROBLEM},
    summary="List the files of a local output",
    description="Sizes and SHA-256 sums as published (read from the output's manifest, not rehashed). "
    "A Hub output is a 409 `output-on-hub` with its `hub_url`.",
)
def list_files(
    job_id: str,
    k: K,
    session: SessionDep,
    principal: PrincipalDep,
    settings: SettingsDep,
) -> OutputFileList:
    with output_files.open_output(session, settings, principal.team_id, job_id, k) as out:
        return OutputFileList(job_id=job_id, k=k, data=[file_entry(job_id, k, f) for f in out.files.values()])


@router.get(
    "/{job_id}/outputs/{k}/files/{path:path}",
    responses={
        200: {"content": {"application/octet-stream": {}}, "description": "the whole file"},
        206: {"content": {"application/octet-stream": {}}, "description": "one range (`Content-Range`)"},
        409: PROBLEM,
        416: PROBLEM | {"description": "no byte of the file is in the range"},
    },
    summary="Download one file of a local output",
    description="Streams the file. `ETag` is its SHA-256 as published. One `Range: bytes=...` range "
    "(`first-last`, `first-`, `-suffix`) gives a 206 with `Content-Range`; a range past the end is a 416; "
    "several ranges, or an `If-Range` that is not the current ETag, give the whole file (200).",
)
def get_file(
    job_id: str,
    k: K,
    path: str,
    session: SessionDep,
    principal: PrincipalDep,
    settings: SettingsDep,
    request: Request,
    range_: str | None = Header(None, alias="Range"),
    if_range: str | None = Header(None, alias="If-Range"),
):
    return file_response(session, settings, principal.team_id, job_id, k, path, request, range_, if_range)


def file_response(
    session: Session,
    settings: Settings,
    team_id: int,
    job_id: str,
    k: int,
    path: str,
    request: Request,
    range_: str | None,
    if_range: str | None,
) -> Response:
    """The file (or its one range) as a streamed response; the dashboard serves its downloads with it
    too (service.ui.outputs), so both answer the same bytes and headers."""
    with output_files.open_output(session, settings, team_id, job_id, k) as out:
        fd, st, entry = output_files.open_file(out, path)
    etag = f'"{entry["sha256"]}"'
    headers = {"ETag": etag, "Accept-Ranges": "bytes"}
    try:
        span = byte_range(range_, st.st_size, if_range=if_range, etag=etag)
    except Unsatisfiable:
        os.close(fd)
        return problem(
            416,
            "range-not-satisfiable",
            "Range not satisfiable",
            f"the file has {st.st_size} bytes",
            instance=request.url.path,
            headers=headers | {"Content-Range": f"bytes */{st.st_size}"},
        )
    first, last = span or (0, st.st_size - 1)
    headers["Content-Length"] = str(last - first + 1)
    if span:
        headers["Content-Range"] = f"bytes {first}-{last}/{st.st_size}"
    return StreamingResponse(
        _read(fd, first, last + 1),
        status_code=206 if span else 200,
        headers=headers,
        media_type="application/octet-stream",
    )


def _read(fd: int, start: int, stop: int) -> Iterator[bytes]:
    """The bytes [start, stop) of an open file; the descriptor is closed when the stream ends or is dropped."""
    try:
        while start < stop:
            block = os.pread(fd, min(CHUNK, stop - start), start)
            if not block:  # truncated meanwhile: stop short; the client's length and sha checks catch it
                return
            start += len(block)
            yield block
    finally:
        os.close(fd)
