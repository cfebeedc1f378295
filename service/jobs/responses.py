"""Response bodies of the /v1 API (the requests are in service.jobs.schemas)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from service.jobs.score_fields import SCORE_FIELDS


class Response(BaseModel):
    model_config = ConfigDict(from_attributes=True)


class JobError(Response):
    type: str = Field(description="user | system | timeout")
    message: str | None


class ArtifactOut(Response):
    k: int | None
    kind: str
    uri: str
    revision: str | None = None
    commit_sha: str | None = None
    created_at: datetime


class JobOut(Response):
    id: str
    object: Literal["job"] = "job"
    status: Literal["queued", "running", "cancelling", "succeeded", "failed", "cancelled"]
    stage: str | None
    progress: float
    eta_seconds: float | None
    attempt: int
    cancel_requested: bool
    spec: dict[str, Any]
    metadata: dict[str, str]
    selected_layers: list[Any] | None
    metrics: dict[str, Any] | None
    artifacts: list[ArtifactOut]
    error: JobError | None
    estimate: dict[str, Any] | None = Field(default=None, description="memory, disk, time and worker_class (its "
                                            "queue) from the model's config.json, as POST /v1/estimates answers; "
                                            "null when the API could not read the config (a Hub model, offline)")
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    updated_at: datetime


class JobList(Response):
    object: Literal["list"] = "list"
    data: list[JobOut]
    has_more: bool
    next_cursor: str | None = Field(description="pass as `after` for the next page; null on the last page")


class EventOut(Response):
    id: int
    created_at: datetime
    kind: Literal["stage", "progress", "warning", "status", "log"]
    stage: str | None
    message: str | None
    progress: float | None
    data: dict[str, Any] | None


class EventList(Response):
    object: Literal["list"] = "list"
    data: list[EventOut]
    has_more: bool
    last_id: int | None = Field(description="pass as `after` to poll for newer events")


# One optional float per score field (score_fields.py), in its order.
LayerModeScores = create_model("LayerModeScores", __base__=Response,
                               **{f: (float | None, None) for f in SCORE_FIELDS})  # type: ignore[call-overload]


class LayerScoresOut(Response):
    layer: int
    attn: LayerModeScores | None = None
    block: LayerModeScores | None = None


class LayerList(Response):
    object: Literal["list"] = "list"
    data: list[LayerScoresOut]


class Problem(BaseModel):
    """RFC 9457 problem details."""

    type: str
    title: str
    status: int
    detail: str | None = None
    instance: str | None = None
    errors: list[dict[str, Any]] | None = None
