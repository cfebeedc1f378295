"""Response bodies of the /v1 API (the requests are in nbl.request)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, model_serializer

from nbl.result_schema import JobResult
from nbl.selection.out import SelectionOut
from nbl.selection.schema import without_none
from nbl.selection.score_fields import SCORE_FIELDS


class Response(BaseModel):
    model_config = ConfigDict(from_attributes=True)


class JobError(Response):
    type: str = Field(description="user | system | timeout | quality (no output passed its gates)")
    message: str | None


class ArtifactOut(Response):
    k: int | None
    kind: str
    uri: str
    revision: str | None = None
    commit_sha: str | None = None
    created_at: datetime


class SelectedLayers(Response):
    k: int = Field(description="layers replaced in this output", examples=[4])
    mode: str | None = Field(None, description="attn or block", examples=["attn"])
    layers: list[int] = Field(description="the replaced layers, ascending", examples=[[19, 21, 22, 23]])
    criterion: str | None = Field(
        None,
        description="measured selection (greedy, auto): the criterion that won; absent otherwise",
        examples=["cosine"],
    )
    family: str | None = Field(
        None,
        description="the base model's family (its config's model_type): which runtimes "
        "run the output depends on it (result.outputs[].runs_in); absent on older jobs",
        examples=["qwen3_moe"],
    )
    _dump = model_serializer(mode="wrap")(without_none("criterion", "family"))  # as before when absent


class GateCheck(Response):
    output: str = Field(description="the output checked: k4, ...")
    metric: str = Field(description="the flat metric name, e.g. perplexity/wikitext2/ppl or tasks/arc_easy/acc")
    gate: str = Field(description="max_ppl_increase | max_acc_drop | budget (k auto's, on the evaluation)")
    allowed: float = Field(description="the gate's number: a relative rise (0.10) or an absolute drop (0.02)")
    base: float | None
    value: float | None
    limit: float | None = Field(description="the bound on the value: the most perplexity, the least accuracy")
    passed: bool


class GatesOut(Response):
    passed: bool = Field(description="some output passed every gate (only those are published)")
    checks: list[GateCheck]


class JobOut(Response):
    id: str
    object: Literal["job"] = "job"
    status: Literal["queued", "running", "cancelling", "succeeded", "failed", "cancelled"]
    stage: str | None
    progress: float = Field(
        description="the whole job's fraction done, 0 to 1, weighted by each stage's expected "
        "cost; it never goes back within an attempt"
    )
    stage_progress: float | None = Field(default=None, description="the current stage's fraction done, 0 to 1")
    eta_seconds: float | None = Field(
        description="seconds left, from this job's measured rates (tokens/s in "
        "calibration, layers/s in scoring, documents/s in evaluation); null before "
        "the first measurement and once the job ends"
    )
    attempt: int
    cancel_requested: bool
    spec: dict[str, Any]
    metadata: dict[str, str]
    selected_layers: list[SelectedLayers] | None = Field(
        description="per output; null until scoring ends (also in result.outputs[].layers)"
    )
    result: JobResult = Field(
        description="what the job measured, typed: calibration, base, and each output with "
        "its metrics, delta and relative change; parts not measured yet are null"
    )
    metrics: dict[str, dict[str, float | None]] | None = Field(
        description="DEPRECATED (kept one release): the same figures as flat names by variant, e.g. "
        '{"k4": {"perplexity/wikitext2/ppl": 21.7}}; read `result` instead. Non-finite values are null',
        json_schema_extra={"deprecated": True},
    )
    artifacts: list[ArtifactOut]
    error: JobError | None
    estimate: dict[str, Any] | None = Field(
        default=None,
        description="memory, disk, time and worker_class (its "
        "queue) from the model's config.json, as POST /v1/estimates answers; "
        "null when the API could not read the config (a Hub model, offline)",
    )
    warnings: list[str] = Field(
        default_factory=list,
        description="the job's `warning` events, oldest first: "
        "expensive defaults said at submit, and what the worker found (e.g. too few "
        "calibration tokens, a truncated evaluation)",
        examples=[
            [
                "evaluation not given: the default is wikitext2 perplexity on the whole "
                "test set, for the base and for every output; ..."
            ]
        ],
    )
    gates: GatesOut | None = Field(
        default=None, description="the quality gates' checks, once evaluated; null when the job has no gates"
    )
    selection: SelectionOut | None = Field(
        default=None,
        description="criterion greedy or auto, or k auto: the "
        "layer sets measured on the selection data and the one kept per k",
    )
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
    stage_progress: float | None = None
    eta_seconds: float | None = None
    data: dict[str, Any] | None = Field(
        description="stage events: the previous stage; progress events: the "
        "stage's measured rate {value, unit}; status events: the status"
    )


class EventList(Response):
    object: Literal["list"] = "list"
    data: list[EventOut]
    has_more: bool
    last_id: int | None = Field(description="pass as `after` to poll for newer events")


# One optional float per score field (score_fields.py), in its order.
LayerModeScores = create_model("LayerModeScores", __base__=Response, **{f: (float | None, None) for f in SCORE_FIELDS})  # type: ignore[call-overload]


class LayerMark(Response):
    k: int = Field(description="the output (layers replaced)", examples=[4])
    mode: str = Field(description="the branch ranked: attn or block", examples=["attn"])
    selected: bool = Field(description="whether this output replaced the layer", examples=[True])
    criterion: str | None = Field(
        None,
        description="measured selection (greedy, auto): the criterion that chose "
        "this output's layers; absent otherwise",
        examples=["greedy"],
    )
    _dump = model_serializer(mode="wrap")(without_none("criterion"))  # ranked by the job's criterion: as before
    rank: int | None = Field(
        description="the layer's place by the job's criterion in this mode, 1 = replaced "
        "first (an output with k layers replaces ranks 1..k); null when the layer has no "
        "score in this mode, or the criterion measures layer sets (greedy, auto)",
        examples=[2],
    )


class LayerScoresOut(Response):
    layer: int
    attn: LayerModeScores | None = None
    block: LayerModeScores | None = None
    outputs: list[LayerMark] = Field(
        default_factory=list, description="one per output of the job; empty until scoring ends"
    )


class LayerList(Response):
    object: Literal["list"] = "list"
    data: list[LayerScoresOut]
