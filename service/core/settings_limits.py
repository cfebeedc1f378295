"""The limits of Settings (service/core/settings.py): what one request, one team and one job may use, and
the bounds the worker hands the engine (the largest model, the host cache, the greedy width, the devices).

A mixin, not settings of its own: Settings inherits these fields, so they are read from the same NBL_*
variables by the same source, and stay `settings.max_k` everywhere. Where they are held: a request's by
service/estimates/limits.py (its body's size by service/http/limits.py), a team's by service/jobs/team_caps.py,
service/jobs/disk_quota.py and service/http/admission.py; the engine's are passed down by worker/run_settings.py.
"""

from __future__ import annotations

from pydantic import AliasChoices, BaseModel, Field, field_validator

from nbl.selection.score_fields import GREEDY_WIDTH


class LimitSettings(BaseModel):
    max_num_samples: int = Field(default=4096, ge=1, validation_alias=AliasChoices("NBL_MAX_NUM_SAMPLES"))
    max_seq_len: int = Field(default=32768, ge=1, validation_alias=AliasChoices("NBL_MAX_SEQ_LEN"))
    max_k: int = Field(default=512, ge=1, validation_alias=AliasChoices("NBL_MAX_K"))
    max_eval_limit: int = Field(default=100_000, ge=1, validation_alias=AliasChoices("NBL_MAX_EVAL_LIMIT"))
    max_request_bytes: int = Field(default=64 * 1024, ge=1024, validation_alias=AliasChoices("NBL_MAX_REQUEST_BYTES"))
    max_active_jobs_per_team: int = Field(
        default=20, ge=1, validation_alias=AliasChoices("NBL_MAX_ACTIVE_JOBS_PER_TEAM")
    )
    max_queued_jobs_per_team: int | None = Field(
        default=None,
        ge=1,
        validation_alias=AliasChoices("NBL_MAX_QUEUED_JOBS_PER_TEAM"),
        description="a separate cap on a team's queued jobs (default: only the active cap)",
    )
    max_jobs_per_team_per_hour: int | None = Field(
        default=600,
        ge=1,
        validation_alias=AliasChoices("NBL_MAX_JOBS_PER_TEAM_PER_HOUR"),
        description="jobs a team may create in any hour, cancelled ones included (a job cancelled at once still "
        "leaves a message for a worker to drop); a 429 beyond it. Empty: no limit",
    )
    # Per API process, counted before a request takes a thread or a connection (service/http/admission.py).
    max_reads_per_team: int = Field(
        default=16,
        ge=1,
        validation_alias=AliasChoices("NBL_MAX_READS_PER_TEAM"),
        description="a team's GET requests in flight at once in one API process; more "
        "are refused at once (429 too-many-requests, Retry-After 1), not queued",
    )
    max_writes_per_team: int = Field(
        default=20,
        ge=1,
        validation_alias=AliasChoices("NBL_MAX_WRITES_PER_TEAM"),
        description="a team's other requests (submits, cancels, estimates) in flight "
        "at once in one API process; more are a 429 too-many-requests",
    )
    max_streams_per_team: int = Field(
        default=50,
        ge=1,
        validation_alias=AliasChoices("NBL_MAX_STREAMS_PER_TEAM"),
        description="a team's open event streams (the API's and the dashboard's) in "
        "one API process; more are a 429 too-many-streams",
    )
    cap_retry_after_s: int = Field(
        default=30,
        ge=1,
        validation_alias=AliasChoices("NBL_CAP_RETRY_AFTER"),
        description="Retry-After of a 429 from a per-team cap",
    )
    team_disk_quota_bytes: int | None = Field(
        default=10**12,
        ge=1,
        validation_alias=AliasChoices("NBL_TEAM_DISK_QUOTA_BYTES"),
        description="bytes of local outputs a team may keep under NBL_PUBLISH_DIR/<team>: a job whose estimate "
        "would exceed it is a 422 at submit, and one whose outputs would is failed (`user`) at publish, before "
        "writing (nbl/outputs/quota.py); Hub outputs do not count. Default 1 TB; empty: no limit",
    )
    # The worker passes it to the model loader (worker.engine.loading.load.load_model's max_bytes).
    max_model_bytes: int | None = Field(
        default=None,
        ge=1,
        validation_alias=AliasChoices("NBL_MAX_MODEL_BYTES"),
        description="refuse input models whose weights are larger (default: no limit)",
    )
    # The worker passes it to calibration (CompressConfig.host_cache_bytes): the engine reads no setting.
    host_cache_bytes: int | None = Field(
        default=None,
        ge=0,
        validation_alias=AliasChoices("NBL_HOST_CACHE_BYTES"),
        description="hidden states kept in memory between calibration layers; the "
        "rest is spilt to NBL_HOME/spill (default: no limit)",
    )
    # The worker passes it to measured selection (CompressConfig.greedy_width).
    greedy_width: int = Field(
        default=GREEDY_WIDTH,
        ge=1,
        validation_alias=AliasChoices("NBL_GREEDY_WIDTH"),
        description="candidate layers the greedy criterion tries per step",
    )
    # The worker passes it to calibration (CompressConfig.devices); `nbl worker --devices` sets it too.
    devices: str | None = Field(
        default=None,
        pattern=r"^\s*[\w:]+(\s*,\s*[\w:]+)*\s*$",
        validation_alias=AliasChoices("NBL_DEVICES"),
        description="comma-separated torch devices the worker calibrates on, one process "
        "each, e.g. cuda:0,cuda:1 (default: every visible GPU, else cpu)",
    )

    @field_validator("team_disk_quota_bytes", "max_jobs_per_team_per_hour", mode="before")
    @classmethod
    def _no_limit_if_empty(cls, value):
        return None if isinstance(value, str) and not value.strip() else value  # NBL_TEAM_DISK_QUOTA_BYTES= : no limit
