"""How a job's events leave the service, the part of Settings (service/core/settings.py) that says it: webhooks
(the outbox's delivery: which private addresses it may reach, its retries and timeout, service/webhooks) and
event streams (how often one reads the job's new events, how long it stays open, the Redis that wakes it,
service/jobs/stream.py and service/core/wakeup.py).

A mixin, as settings_limits.py: Settings inherits these fields and reads them from the same NBL_* variables.
Settings derives the wake-up's default from the broker (a Redis broker wakes the streams too).
"""

from __future__ import annotations

from pydantic import AliasChoices, BaseModel, Field


class EventSettings(BaseModel):
    webhook_allowlist: str = Field(
        default="",
        validation_alias=AliasChoices("NBL_WEBHOOK_ALLOWLIST"),
        description="comma-separated IPs or CIDR networks webhooks may reach although "
        "private (e.g. 10.0.0.0/8); empty: public addresses only",
    )
    webhook_max_attempts: int = Field(default=8, ge=1, validation_alias=AliasChoices("NBL_WEBHOOK_MAX_ATTEMPTS"))
    webhook_backoff_s: float = Field(
        default=30.0,
        gt=0,
        validation_alias=AliasChoices("NBL_WEBHOOK_BACKOFF"),
        description="wait before the first retry; doubles at each attempt",
    )
    webhook_backoff_max_s: float = Field(
        default=6 * 3600, gt=0, validation_alias=AliasChoices("NBL_WEBHOOK_BACKOFF_MAX")
    )
    webhook_timeout_s: float = Field(default=10.0, gt=0, validation_alias=AliasChoices("NBL_WEBHOOK_TIMEOUT"))
    stream_poll_s: float = Field(
        default=1.0,
        gt=0,
        le=60,
        validation_alias=AliasChoices("NBL_STREAM_POLL_S"),
        description="how often an open event stream reads the job's new events",
    )
    stream_max_s: float = Field(
        default=300.0,
        gt=0,
        validation_alias=AliasChoices("NBL_STREAM_MAX_S"),
        description="an event stream ends after this long; the client resumes it "
        "with Last-Event-ID (so a revoked key or a stopping server frees it)",
    )
    wakeup_url: str | None = Field(
        default=None,
        validation_alias=AliasChoices("NBL_WAKEUP_URL"),
        description="the Redis whose pub/sub wakes open event streams when a job writes "
        "events (service/core/wakeup.py); default the broker when it is Redis; empty: "
        "none, the streams poll every NBL_STREAM_POLL_S",
    )

    @property
    def webhook_networks(self) -> tuple:
        """NBL_WEBHOOK_ALLOWLIST as ip_network objects."""
        from nbl.webhook_urls import parse_networks

        return parse_networks(self.webhook_allowlist)
