"""Typed views of the API's answers: a job, a page of jobs, an event, a page of events, an output's files.

They mirror the server's schemas (service/jobs/schemas.py) and are checked against the app's OpenAPI
by tests/service/test_client_models.py: every field here exists there with a compatible type, so a
rename or a type change on the server fails that test. Fields the server adds later are kept
(extra="allow") and come back in `model_dump()`, so an older client never drops data. Only `id`
and `status` are required, so a client still reads a job that lacks a field it knows.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

TERMINAL = ("succeeded", "failed", "cancelled")


class Model(BaseModel):
    model_config = ConfigDict(extra="allow")


class JobError(Model):
    type: str
    message: str | None = None


class Artifact(Model):
    k: int | None = None
    kind: str
    uri: str
    revision: str | None = None
    commit_sha: str | None = None
    created_at: datetime | None = None


class Job(Model):
    id: str
    status: str  # queued | running | cancelling | succeeded | failed | cancelled
    stage: str | None = None
    progress: float = 0.0
    eta_seconds: float | None = None
    attempt: int = 0
    cancel_requested: bool = False
    spec: dict[str, Any] = {}
    metadata: dict[str, str] = {}
    selected_layers: list[Any] | None = None
    metrics: dict[str, Any] | None = None
    artifacts: list[Artifact] = []
    error: JobError | None = None
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    updated_at: datetime | None = None

    @property
    def done(self) -> bool:
        return self.status in TERMINAL


class JobList(Model):
    data: list[Job]
    has_more: bool = False
    next_cursor: str | None = None


class Event(Model):
    id: int
    created_at: datetime | None = None
    kind: str  # stage | progress | warning | status | log
    stage: str | None = None
    message: str | None = None
    progress: float | None = None
    data: dict[str, Any] | None = None


class EventList(Model):
    data: list[Event]
    has_more: bool = False
    last_id: int | None = None


class OutputFile(Model):
    path: str
    size: int
    sha256: str
    url: str  # relative to the API's base URL


class OutputFileList(Model):
    job_id: str
    k: int
    data: list[OutputFile]
