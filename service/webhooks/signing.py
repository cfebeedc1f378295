"""Signing job webhooks per Standard Webhooks (https://www.standardwebhooks.com), and the teams'
secrets that sign them.

    webhook-id: msg_...                 the same on every retry (receivers deduplicate on it)
    webhook-timestamp: <unix seconds>   of this attempt
    webhook-signature: v1,<base64(HMAC-SHA256(key, f"{id}.{timestamp}.{body}"))>

where key is the base64-decoded part of the team's `whsec_...` secret, stored encrypted with the
server's key (service.core.secrets).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.core.models import utcnow
from service.core.secrets import decrypt, encrypt
from service.core.settings import Settings
from service.core.webhook_tables import WebhookSecret

SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    """`whsec_` + base64 of 32 random bytes, the format Standard Webhooks libraries accept."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def secret_key(secret: str) -> bytes:
    if not secret.startswith(SECRET_PREFIX):
        raise ValueError("a webhook secret starts with whsec_")
    return base64.b64decode(secret[len(SECRET_PREFIX) :])


def sign(secret: str, msg_id: str, timestamp: int, body: str) -> str:
    """The webhook-signature header: `v1,` + base64(HMAC-SHA256(key, "{id}.{timestamp}.{body}"))."""
    digest = hmac.new(secret_key(secret), f"{msg_id}.{timestamp}.{body}".encode(), hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def signed_headers(secret: str, msg_id: str, timestamp: int, body: str) -> dict[str, str]:
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(secret, msg_id, timestamp, body),
        "content-type": "application/json",
    }


# --- team secrets --------------------------------------------------------------------------------


def set_team_secret(session: Session, settings: Settings, team_id: int) -> str:
    """Create or rotate the team's secret; returns it (print it once). Stored encrypted with the
    server's key (service.core.secrets). Commits. Pending deliveries are signed with the new one."""
    secret = new_secret()
    sealed = encrypt(settings, secret)
    row = session.get(WebhookSecret, team_id)
    if row is None:
        session.add(WebhookSecret(team_id=team_id, secret=sealed, created_at=utcnow()))
    else:
        row.secret, row.created_at = sealed, utcnow()
    session.commit()
    return secret


def team_secret(session: Session, settings: Settings, team_id: int) -> str | None:
    sealed = session.scalar(select(WebhookSecret.secret).where(WebhookSecret.team_id == team_id))
    return None if sealed is None else decrypt(settings, sealed)


def has_secret(session: Session, team_id: int) -> bool:
    return session.scalar(select(WebhookSecret.team_id).where(WebhookSecret.team_id == team_id)) is not None
