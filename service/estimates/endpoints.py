"""/v1/estimates: a job body in, its estimate out (memory, disk, time, worker class); no job is created.
Checked as POST /v1/jobs checks a body (limits, `local:NAME` rules), authenticated the same way."""

from __future__ import annotations

from fastapi import APIRouter

from nbl.recipe import from_request
from service.core.errors import InvalidRequest, Problem
from service.http.deps import PrincipalDep, SessionDep, SettingsDep
from service.http.hops import OneHopRoute

from . import local_model
from .inline_config import EstimateCreate
from .limits import check_limits
from .placement import placement_for
from .rates import with_rates
from .schemas import EstimateOut

PROBLEM = {"model": Problem, "content": {"application/problem+json": {}}}

# The body is read as POST /v1/jobs reads it: the same 400 (not UTF-8 JSON) and 413 (too large) answers.
router = APIRouter(
    prefix="/v1/estimates",
    tags=["estimates"],
    route_class=OneHopRoute,
    responses={
        400: PROBLEM | {"description": "the body is not UTF-8 JSON text"},
        401: PROBLEM,
        413: PROBLEM,
        422: PROBLEM,
        503: PROBLEM
        | {
            "description": "a Hub model's config.json could not be fetched; retry after `Retry-After` "
            "seconds, or give a `local:NAME` model",
            "headers": {"Retry-After": {"schema": {"type": "integer"}}},
        },
    },
)


@router.post(
    "",
    response_model=EstimateOut,
    summary="Estimate a job without creating it",
    description="Peak device and host memory, disk, a time range, and the worker class the job would "
    "go to, from the model's config.json alone (nothing is downloaded but that file), or from the `config` "
    "given inline for a model that is not on the Hub.",
)
def create_estimate(
    body: EstimateCreate, principal: PrincipalDep, settings: SettingsDep, session: SessionDep
) -> EstimateOut:
    inline = body.config is not None  # a model named only: no local model to find
    errors = check_limits(body, settings) or ([] if inline else local_model.submit_problems(body, settings))
    if errors:
        raise InvalidRequest(errors[0]["msg"], errors=errors)
    placement, stored = placement_for(body, settings, required=True, config=body.config)
    stored = with_rates(session, stored, from_request(body), settings)  # the class's measured stages
    session.commit()  # end the read
    return EstimateOut(**stored, refusal=placement.reason or None)
