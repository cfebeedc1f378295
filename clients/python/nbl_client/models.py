"""Typed views of the API's answers: a job, a page of jobs, an event, a page of events, an output's files,
the models a team can run and its usage.

They mirror the server's response bodies (service/jobs/responses.py) and are checked against the app's OpenAPI
by tests/client/test_client_models.py: every field here exists there with a compatible type, so a
rename or a type change on the server fails that test. Fields the server adds later are kept
(extra="allow") and come back in `model_dump()`, so an older client never drops data. Only `id`
and `status` are required, so a client still reads a job that lacks a field it knows.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

TERMINAL = ("succeeded", "failed", "cancelled")


class Model(BaseModel):
    model_config = ConfigDict(extra="allow")


class Items(Sequence):
    """A list object of the API (a page of jobs or events, an output's files) is a sequence of its
    `data`: `for f in nbl.files(job, 4)`, `len(page)`, `page[0]`. `.data` stays, as it always was."""

    def __iter__(self) -> Iterator:  # not pydantic's (field, value) pairs: the items
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index):
        return self.data[index]


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


class Perplexity(Model):
    ppl: float | None = None
    bits_per_byte: float | None = None
    tokens: int | None = None


class Task(Model):
    acc: float | None = None
    acc_norm: float | None = None
    n: int | None = None
    ppl: float | None = None  # LAMBADA-style tasks only


class Params(Model):
    params: int | None = None
    non_embedding_params: int | None = None


class Speed(Model):
    prefill_tokens_per_s: dict[str, float | None] | None = None  # by prompt length
    decode_tokens_per_s: float | None = None
    decode_context: int | None = None
    new_tokens: int | None = None
    kv_cache_bytes_per_token: float | None = None
    kv_cache_layers: int | None = None
    params: int | None = None
    non_embedding_params: int | None = None
    base_non_embedding_params: int | None = None
    sparsity: float | None = None
    repeats: int | None = None
    threads: int | None = None
    device: str | None = None
    dtype: str | None = None


class Metrics(Model):
    """Nested metrics: perplexity[corpus], tasks[task], speed, params; also the shape of `delta`.
    A null number was not measured (or was not finite)."""

    perplexity: dict[str, Perplexity] = {}
    tasks: dict[str, Task] = {}
    speed: Speed | None = None
    params: Params | None = None


class Relative(Model):
    """(output - base) / |base| in the shape of Metrics, every number a float (null over a base of 0)."""

    perplexity: dict[str, dict[str, float | None]] = {}
    tasks: dict[str, dict[str, float | None]] = {}
    speed: dict[str, Any] | None = None
    params: dict[str, float | None] | None = None


class Calibration(Model):
    tokens: int | None = None
    seconds: float | None = None
    cached: bool | None = None


class BaseEvaluation(Model):
    cached: bool | None = None  # reused from the cache (an earlier job on the same base and evaluation)
    seconds: float | None = None


class OutputResult(Model):
    k: int
    mode: str | None = None
    method: str | None = None
    criterion: str | None = None
    layers: list[int] | None = None
    metrics: Metrics | None = None
    delta: Metrics | None = None
    relative: Relative | None = None
    seconds: float | None = None  # its reload and evaluation


class Result(Model):
    """What the job measured: calibration, the base model, and each output with its delta and relative change."""

    calibration: Calibration | None = None
    base: Metrics | None = None
    base_evaluation: BaseEvaluation | None = None
    outputs: list[OutputResult] = []


class SelectedLayers(Model):
    k: int
    mode: str | None = None
    layers: list[int] = []


class Job(Model):
    id: str
    status: str  # queued | running | cancelling | succeeded | failed | cancelled
    stage: str | None = None
    progress: float = 0.0
    stage_progress: float | None = None
    eta_seconds: float | None = None
    attempt: int = 0
    cancel_requested: bool = False
    spec: dict[str, Any] = {}
    metadata: dict[str, str] = {}
    selected_layers: list[SelectedLayers] | None = None
    result: Result | None = None  # None from a server older than `result`
    metrics: dict[str, Any] | None = None  # deprecated by the server: read `result`
    artifacts: list[Artifact] = []
    error: JobError | None = None
    warnings: list[str] = []  # expensive defaults said at submit, and the worker's findings
    gates: dict[str, Any] | None = None  # {"passed", "checks": [...]} when the job has quality gates
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    updated_at: datetime | None = None

    @property
    def done(self) -> bool:
        return self.status in TERMINAL


class JobList(Items, Model):
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
    stage_progress: float | None = None
    eta_seconds: float | None = None
    data: dict[str, Any] | None = None


class EventList(Items, Model):
    data: list[Event]
    has_more: bool = False
    last_id: int | None = None


class OutputFile(Model):
    path: str
    size: int
    sha256: str
    url: str  # relative to the API's base URL


class OutputFileList(Items, Model):
    job_id: str
    k: int
    data: list[OutputFile]


class ModelInfo(Model):
    """GET /v1/models: a `local:` model of the server, or a Hub id the team's recent jobs named."""

    id: str
    source: str | None = None  # local | hub
    shape: dict[str, Any] | None = None  # layers, hidden_size, ..., params (null: unknown)
    size_bytes: int | None = None
    last_used_at: datetime | None = None
    jobs: int | None = None


class ModelList(Items, Model):
    data: list[ModelInfo]
    has_more: bool = False
    next_cursor: str | None = None


class UsageMonth(Model):
    month: str
    jobs: dict[str, int] = {}
    worker_hours: dict[str, float] = {}
    gpu_hours: float | None = None


class Usage(Items, Model):
    """GET /v1/usage: the team's months, newest first, and its disk now."""

    team: str | None = None
    disk: dict[str, int | None] = {}
    data: list[UsageMonth]
    has_more: bool = False
    next_cursor: str | None = None
