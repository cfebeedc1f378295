"""The webhook tables (migration 0004): a team's signing secret, the outbox of deliveries and each attempt at one.
Their own file, beside the job's tables (models.py), as stage_rate.py and class_cache.py are; migrations/env.py
imports it, so its tables are in Base.metadata there too. service/jobs/outbox.py writes a delivery in the
transaction of the job's change; service/webhooks sends it.
"""

from __future__ import annotations

import enum
from datetime import datetime

from sqlalchemy import CheckConstraint, Float, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from service.core.models import Base, BigId, sql_in_list, utcnow


class WebhookStatus(str, enum.Enum):
    pending = "pending"
    delivered = "delivered"
    failed = "failed"  # gave up after Settings.webhook_max_attempts


class WebhookSecret(Base):
    """A team's Standard Webhooks signing secret (`whsec_...`), set by `nbl admin webhook-secret`.
    The deliverer needs it to sign, so it is encrypted (service.core.secrets), not hashed; the API never
    returns it."""

    __tablename__ = "webhook_secrets"

    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"), primary_key=True)
    secret: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class WebhookDelivery(Base):
    """The outbox: one row per event, written in the transaction that changed the job's state, so
    an event is never lost nor sent for a change that rolled back. `id` is the webhook-id header,
    the same on every retry; `payload` is the exact body, signed afresh at each attempt."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        CheckConstraint(f"status IN ({sql_in_list(WebhookStatus)})", name="status"),
        Index("ix_webhook_deliveries_status_next_attempt_at", "status", "next_attempt_at"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)  # msg_ + 32 hex
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    event: Mapped[str] = mapped_column(String(32))  # job.succeeded, job.failed, ...
    url: Mapped[str] = mapped_column(Text)
    payload: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16), default=WebhookStatus.pending.value)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None]


class WebhookAttempt(Base):
    """One POST of a delivery (or one refusal to send it): when, the response status or the error."""

    __tablename__ = "webhook_attempts"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    delivery_id: Mapped[str] = mapped_column(ForeignKey("webhook_deliveries.id", ondelete="CASCADE"), index=True)
    attempt: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[datetime] = mapped_column(default=utcnow)
    duration_ms: Mapped[float | None] = mapped_column(Float)
    status_code: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)
