"""/v1/models and /v1/usage: thin; the work is in service.catalog.models and .usage."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from service.catalog import models, usage
from service.core.errors import Problem
from service.http.deps import PrincipalDep, SessionDep, SettingsDep
from service.http.hops import OneHopRoute

PROBLEM = {"model": Problem, "content": {"application/problem+json": {}}}
router = APIRouter(prefix="/v1", tags=["catalog"], route_class=OneHopRoute, responses={401: PROBLEM, 422: PROBLEM})


class ModelOut(BaseModel):
    id: str = Field(description="what a job's model.id takes: local:NAME, or a Hub id", examples=["local:smollm2"])
    source: str = Field(description="local (on this server, for every team) or hub (named by your recent jobs)")
    shape: dict[str, Any] | None = Field(
        description="from its config.json: architecture, model_type, layers, "
        "hidden_size, intermediate_size, heads, kv_heads, head_dim, vocab_size, "
        "context, params; null when unknown (a Hub model the API could not read)"
    )
    size_bytes: int | None = Field(description="local: bytes on disk; null for the Hub")
    last_used_at: datetime | None = Field(description="when your newest job on it was created; null: none of yours")
    jobs: int | None = Field(description="how many of your recent jobs named it (0: none)")


class ModelList(BaseModel):
    object: str = "list"
    data: list[ModelOut]
    has_more: bool
    next_cursor: str | None = Field(description="pass as `after` for the next page; null on the last page")


class Month(BaseModel):
    month: str = Field(examples=["2026-12"])
    jobs: dict[str, int] = Field(description="jobs created this month, by status, and `total`")
    worker_hours: dict[str, float] = Field(description="hours jobs held a worker, by worker class (queue)")
    gpu_hours: float = Field(description="worker hours times the class's GPUs (NBL_WORKER_CLASSES)")


class UsageOut(BaseModel):
    object: str = "usage"
    team: str
    disk: dict[str, int | None] = Field(
        description="outputs_bytes: the team's local outputs on disk now; "
        "quota_bytes: NBL_TEAM_DISK_QUOTA_BYTES (null: none)"
    )
    data: list[Month]
    has_more: bool
    next_cursor: str | None


@router.get(
    "/models",
    response_model=ModelList,
    summary="Models your team can run",
    description="The `local:` models on this server, then the Hub ids your team's recent jobs named "
    "(newest first), with their shapes. Paged with `limit` and `after`.",
)
def list_models(
    session: SessionDep,
    principal: PrincipalDep,
    settings: SettingsDep,
    limit: Annotated[int, Query(ge=1, le=100)] = 50,
    after: Annotated[str | None, Query(description="`next_cursor` of the previous page")] = None,
) -> dict:
    return models.page(session, settings, principal.team_id, limit, after)


@router.get(
    "/usage",
    response_model=UsageOut,
    summary="Your team's usage by month",
    description="Jobs by status, worker-hours by worker class and GPU-hours per calendar month (UTC), "
    "newest first, and the team's disk now. Paged by month with `limit` and `after`.",
)
def team_usage(
    session: SessionDep,
    principal: PrincipalDep,
    settings: SettingsDep,
    limit: Annotated[int, Query(ge=1, le=120)] = 12,
    after: Annotated[str | None, Query(description="`next_cursor` of the previous page")] = None,
) -> dict:
    return usage.report(session, settings, principal.team_id, principal.team_name, limit, after)
