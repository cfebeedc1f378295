"""The database: typed SQLAlchemy 2 models. The job row is the source of truth for job state.

Statuses and kinds are short strings guarded by CHECK constraints (portable, and adding a value is
a one-line migration). Timestamps are timezone-aware UTC on both SQLite and Postgres.

    queued -> running -> succeeded | failed | cancelled,  running -> cancelling -> cancelled
    terminal states never change

Other tables stand on the Base here, each in a file of its own: the webhooks' (webhook_tables.py), the
stages' measured rates (stage_rate.py), the class caches (class_cache.py); migrations/env.py imports them.
"""

from __future__ import annotations

import enum
import os
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class JobStatus(str, enum.Enum):
    queued = "queued"
    running = "running"
    cancelling = "cancelling"
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"


TERMINAL = frozenset({JobStatus.succeeded.value, JobStatus.failed.value, JobStatus.cancelled.value})
ACTIVE = frozenset({JobStatus.queued.value, JobStatus.running.value, JobStatus.cancelling.value})
OWNED = frozenset({JobStatus.running.value, JobStatus.cancelling.value})  # a worker holds the lease


class EventKind(str, enum.Enum):
    stage = "stage"
    progress = "progress"
    warning = "warning"
    status = "status"
    log = "log"


class ErrorType(str, enum.Enum):
    """Why a job failed: the caller's input, our system, a time limit, or its quality gates (no output passed)."""

    user = "user"
    system = "system"
    timeout = "timeout"
    quality = "quality"


def sql_in_list(e: type[enum.Enum]) -> str:
    """An enum's values as the list of a CHECK constraint's IN."""
    return ", ".join(f"'{m.value}'" for m in e)


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def new_job_id(now: datetime | None = None) -> str:
    """`job_` + 32 hex: 48 bits of milliseconds then 80 random bits (ULID/UUIDv7 layout), so ids
    sort by creation time as plain strings, which keyset pagination relies on."""
    ms = int((now or utcnow()).timestamp() * 1000)
    return f"job_{ms:012x}{os.urandom(10).hex()}"


class UTCDateTime(TypeDecorator):
    """Aware UTC datetimes in, aware UTC datetimes out; SQLite stores naive UTC text."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        value = value.astimezone(timezone.utc)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)


JSONType = JSON().with_variant(JSONB(), "postgresql")
BigId = BigInteger().with_variant(Integer(), "sqlite")  # SQLite autoincrements only INTEGER keys


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {datetime: UTCDateTime(), dict[str, Any]: JSONType, list[Any]: JSONType}


class Team(Base):
    __tablename__ = "teams"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    # Overrides Settings.max_active_jobs_per_team when set.
    max_active_jobs: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # The team's Hub write token, Fernet ciphertext (service/core/secrets.py); never plaintext, never returned.
    hub_token_encrypted: Mapped[str | None] = mapped_column(Text)


class ApiKey(Base):
    """Only sha256(key) is stored; `prefix` (e.g. `nbl_ab12cd34`) lets people tell keys apart."""

    __tablename__ = "api_keys"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"), index=True)
    prefix: Mapped[str] = mapped_column(String(16))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    name: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[datetime | None]  # set by `nbl admin revoke-key`: the key answers 401 from then on
    # When the key last authenticated, to the minute (service/keys/auth.py writes it at most once a minute).
    last_used_at: Mapped[datetime | None]


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        UniqueConstraint("team_id", "idempotency_key"),
        CheckConstraint(f"status IN ({sql_in_list(JobStatus)})", name="status"),
        CheckConstraint(f"error_type IS NULL OR error_type IN ({sql_in_list(ErrorType)})", name="error_type"),
        CheckConstraint("progress >= 0 AND progress <= 1", name="progress"),
        Index("ix_jobs_team_id_id", "team_id", "id"),
        Index("ix_jobs_status_created_at", "status", "created_at"),
        Index("ix_jobs_status_lease_expires_at", "status", "lease_expires_at"),  # the reconciler's scan
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"))
    status: Mapped[str] = mapped_column(String(16), default=JobStatus.queued.value)
    stage: Mapped[str | None] = mapped_column(String(32))
    progress: Mapped[float] = mapped_column(Float, default=0.0)  # the whole job's (worker/progress.py)
    stage_progress: Mapped[float | None] = mapped_column(Float)  # the current stage's (migration 0008)
    eta_seconds: Mapped[float | None] = mapped_column(Float)
    spec: Mapped[dict[str, Any]]
    idempotency_key: Mapped[str | None] = mapped_column(String(255))
    request_hash: Mapped[str | None] = mapped_column(String(64))
    error_type: Mapped[str | None] = mapped_column(String(16))
    error_message: Mapped[str | None] = mapped_column(Text)
    selected_layers: Mapped[list[Any] | None]
    metrics: Mapped[dict[str, Any] | None]  # {variant: {name: value}}, mirrors the metrics table
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    dispatched_at: Mapped[datetime | None]  # last time the task was sent to the broker
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    lease_token: Mapped[str | None] = mapped_column(String(64))
    lease_expires_at: Mapped[datetime | None]
    heartbeat_at: Mapped[datetime | None]
    lease_owner: Mapped[str | None] = mapped_column(String(255))  # latest claimant: host:pid@boot
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    publishing_at: Mapped[datetime | None]  # when its worker began publishing: no cancel from then on (0010)
    # A per-job Hub token (publish.token), Fernet ciphertext; set to NULL when the job ends.
    hub_token_encrypted: Mapped[str | None] = mapped_column(Text)
    estimate: Mapped[dict[str, Any] | None]  # service/estimates: memory, disk, time, worker_class (its queue)
    gates: Mapped[dict[str, Any] | None]  # {"passed", "checks": [...]} of the job's quality gates (worker/gates.py)
    selection: Mapped[dict[str, Any] | None]  # measured selection (worker/engine/selection/auto_k.py), migration 0009


class JobEvent(Base):
    __tablename__ = "job_events"
    __table_args__ = (
        CheckConstraint(f"kind IN ({sql_in_list(EventKind)})", name="kind"),
        Index("ix_job_events_job_id_id", "job_id", "id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    kind: Mapped[str] = mapped_column(String(16))
    stage: Mapped[str | None] = mapped_column(String(32))
    message: Mapped[str | None] = mapped_column(Text)
    progress: Mapped[float | None] = mapped_column(Float)
    stage_progress: Mapped[float | None] = mapped_column(Float)  # as on the job when the event was written
    eta_seconds: Mapped[float | None] = mapped_column(Float)
    data: Mapped[dict[str, Any] | None]


class LayerScore(Base):
    __tablename__ = "layer_scores"
    __table_args__ = (CheckConstraint("mode IN ('attn', 'block')", name="mode"),)

    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    layer: Mapped[int] = mapped_column(Integer, primary_key=True)
    mode: Mapped[str] = mapped_column(String(8), primary_key=True)
    cca_bound: Mapped[float | None] = mapped_column(Float)
    nmse: Mapped[float | None] = mapped_column(Float)
    cosine: Mapped[float | None] = mapped_column(Float)
    cond: Mapped[float | None] = mapped_column(Float)
    heldout_nmse: Mapped[float | None] = mapped_column(Float)
    loss_rise: Mapped[float | None] = mapped_column(Float)


class Metric(Base):
    __tablename__ = "metrics"

    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    variant: Mapped[str] = mapped_column(String(32), primary_key=True)  # "base", "k4", ...
    name: Mapped[str] = mapped_column(String(128), primary_key=True)  # "perplexity/wikitext2", ...
    value: Mapped[float | None] = mapped_column(Float)


class Artifact(Base):
    __tablename__ = "artifacts"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    k: Mapped[int | None] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(32))  # "model", "hub", "local", ...
    uri: Mapped[str] = mapped_column(Text)
    revision: Mapped[str | None] = mapped_column(String(255))
    commit_sha: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
