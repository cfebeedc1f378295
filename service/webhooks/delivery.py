"""Job webhooks per Standard Webhooks (https://www.standardwebhooks.com): an outbox and a deliverer.

Producer: `enqueue(session, job_id, event)` is called inside the transaction that moves a job to
a new state (service.jobs.states, the only caller), so the event commits or rolls
back with the change. It writes one `webhook_deliveries` row with the exact body:

    {"type": "job.succeeded", "timestamp": "...Z", "data": <the job, as GET /v1/jobs/{id} shows it>}

Deliverer: `deliver_due(session, settings)` (the reconciler loop, or `nbl admin deliver-webhooks`)
POSTs each due row, signed with the team's secret (service.webhooks.signing). A non-2xx answer, a
timeout or a refused address is retried after webhook_backoff_s * 2**(attempt-1) (capped), up to
webhook_max_attempts; each attempt is recorded. Delivery never touches the job: a webhook that
fails cannot change a job's state. Redirects are not followed, the connection goes to the address
that was checked (no DNS rebinding between the check and the connect), and proxies from the
environment are ignored.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections import Counter
from datetime import datetime, timedelta
from urllib.parse import urlsplit, urlunsplit

import httpx
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from service.core.models import (
    Job,
    JobStatus,
    WebhookAttempt,
    WebhookDelivery,
    WebhookStatus,
    utcnow,
)
from service.core.secrets import SecretError
from service.core.settings import Settings
from service.jobs.views import job_view
from service.webhooks.signing import signed_headers, team_secret
from service.webhooks.urls import IPAddress, Resolver, WebhookUrlError, resolve_checked, system_resolver

log = logging.getLogger(__name__)

USER_AGENT = "nbl-service-webhooks/1"
EVENTS = {  # job status -> event type
    JobStatus.running.value: "job.running",
    JobStatus.succeeded.value: "job.succeeded",
    JobStatus.failed.value: "job.failed",
    JobStatus.cancelled.value: "job.cancelled",
}
# Keys never sent in a webhook body, at any depth (belt and braces: the job view holds none today).
_SECRET_KEY = re.compile(r"(^|_)token$|secret|password|authorization|api_?key", re.IGNORECASE)


# --- payloads (pure) ---------------------------------------------------------------------------


def backoff_s(attempts: int, base: float, cap: float) -> float:
    """Wait after the `attempts`-th failed attempt: base, 2 base, 4 base, ... at most cap."""
    return min(cap, base * 2 ** max(attempts - 1, 0))


def scrub(value):
    """A copy of a JSON value without any key that names a secret."""
    if isinstance(value, dict):
        return {k: scrub(v) for k, v in value.items() if not _SECRET_KEY.search(str(k))}
    if isinstance(value, list):
        return [scrub(v) for v in value]
    return value


# --- the outbox ----------------------------------------------------------------------------------


def enqueue(session: Session, job_id: str, status: str, now: datetime | None = None) -> str | None:
    """Queue the event for a job's new `status`, in the caller's transaction (no commit). Returns
    the webhook-id, or None when the job has no webhook_url or the status has no event."""
    event = EVENTS.get(status)
    if event is None:
        return None
    job = session.scalar(select(Job).where(Job.id == job_id).execution_options(populate_existing=True))
    url = (job.spec or {}).get("webhook_url") if job is not None else None
    if not url:
        return None
    now = now or utcnow()
    body = {"type": event, "timestamp": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "data": scrub(job_view(session, job).model_dump(mode="json"))}
    msg_id = "msg_" + os.urandom(16).hex()
    session.add(WebhookDelivery(id=msg_id, job_id=job_id, event=event, url=url, status=WebhookStatus.pending.value,
                                payload=json.dumps(body, separators=(",", ":")), attempts=0, next_attempt_at=now,
                                created_at=now))
    return msg_id


# --- the deliverer -------------------------------------------------------------------------------


def deliver_due(session: Session, settings: Settings, now: datetime | None = None, *, limit: int = 100,
                budget_s: float = 60.0, resolve: Resolver = system_resolver) -> dict[str, int]:
    """Send the pending deliveries whose time has come (at most `limit`, starting no new one after
    `budget_s`, so slow receivers cannot hold up the reconciler's loop); returns counts by outcome
    (delivered, retrying, failed). `now` is the scheduler's clock (tests move it); the
    webhook-timestamp header is always the real time of the attempt."""
    now = now or utcnow()
    deadline = time.monotonic() + budget_s
    ids = list(session.scalars(select(WebhookDelivery.id)
                               .where(WebhookDelivery.status == WebhookStatus.pending.value,
                                      WebhookDelivery.next_attempt_at <= now)
                               .order_by(WebhookDelivery.next_attempt_at).limit(limit)))
    session.commit()  # no transaction stays open across HTTP calls
    counts: Counter[str] = Counter()
    if not ids:
        return {}
    with httpx.Client(timeout=settings.webhook_timeout_s, follow_redirects=False, trust_env=False,
                      limits=httpx.Limits(max_keepalive_connections=0),
                      headers={"user-agent": USER_AGENT}) as client:
        for i, delivery_id in enumerate(ids):
            if i and time.monotonic() > deadline:
                break  # the rest stay due for the next pass (each pass sends at least one)
            outcome = _deliver_one(session, settings, client, delivery_id, now, resolve)
            if outcome:
                counts[outcome] += 1
    return dict(counts)


def _deliver_one(session: Session, settings: Settings, client: httpx.Client, delivery_id: str, now: datetime,
                 resolve: Resolver) -> str | None:
    # Claim: push the row's time out so that a second deliverer running now skips it. If this
    # process dies mid-send, the row comes due again later and is re-sent with the same webhook-id.
    hold = now + timedelta(seconds=3 * settings.webhook_timeout_s + 60)
    claimed = session.execute(update(WebhookDelivery)
                              .where(WebhookDelivery.id == delivery_id,
                                     WebhookDelivery.status == WebhookStatus.pending.value,
                                     WebhookDelivery.next_attempt_at <= now)
                              .values(next_attempt_at=hold).execution_options(synchronize_session=False))
    session.commit()
    if claimed.rowcount != 1:
        return None
    row = session.get(WebhookDelivery, delivery_id, populate_existing=True)
    team_id = session.scalar(select(Job.team_id).where(Job.id == row.job_id))
    try:
        secret = team_secret(session, settings, team_id) if team_id is not None else None
        error = None if secret is not None else "the team has no webhook secret (nbl admin webhook-secret --team NAME)"
    except SecretError as e:
        secret, error = None, str(e)
    session.commit()

    started, t0 = utcnow(), time.monotonic()
    status_code = None
    if secret is not None:
        try:
            addresses = resolve_checked(row.url, settings.webhook_networks, resolve)
            status_code = _post(client, row.url, addresses[0], secret, row.id, row.payload)
            if not 200 <= status_code < 300:
                error = f"HTTP {status_code}"
        except WebhookUrlError as e:
            error = f"refused: {e}"
        except Exception as e:  # noqa: BLE001 - any failure is a recorded, retried attempt, never a lost row
            error = f"{type(e).__name__}: {e}"[:500]
    duration_ms = (time.monotonic() - t0) * 1000
    return _record(session, settings, row, now, started, duration_ms, status_code, error)


def _post(client: httpx.Client, url: str, address: IPAddress, secret: str, msg_id: str, body: str) -> int:
    """POST to the checked address, keeping the URL's host for the Host header and TLS (SNI and
    certificate check). Only the status is read, never a body the receiver may make huge."""
    parts = urlsplit(url)
    netloc = f"[{address}]" if address.version == 6 else str(address)
    if parts.port:
        netloc += f":{parts.port}"
    target = urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))
    headers = signed_headers(secret, msg_id, int(time.time()), body) | {"host": parts.netloc}
    extensions = {"sni_hostname": parts.hostname} if parts.scheme == "https" else {}
    with client.stream("POST", target, content=body.encode(), headers=headers, extensions=extensions) as resp:
        return resp.status_code


def _record(session: Session, settings: Settings, row: WebhookDelivery, now: datetime, started: datetime,
            duration_ms: float, status_code: int | None, error: str | None) -> str:
    attempts = row.attempts + 1
    values: dict = {"attempts": attempts, "last_error": error}
    if error is None:
        outcome, values["status"], values["finished_at"] = "delivered", WebhookStatus.delivered.value, utcnow()
    elif attempts >= settings.webhook_max_attempts:
        outcome, values["status"], values["finished_at"] = "failed", WebhookStatus.failed.value, utcnow()
        log.warning("webhook %s (%s of %s) given up after %d attempts: %s", row.id, row.event, row.job_id,
                    attempts, error)
    else:
        outcome = "retrying"
        values["next_attempt_at"] = now + timedelta(
            seconds=backoff_s(attempts, settings.webhook_backoff_s, settings.webhook_backoff_max_s))
    session.add(WebhookAttempt(delivery_id=row.id, attempt=attempts, started_at=started, duration_ms=duration_ms,
                               status_code=status_code, error=error))
    session.execute(update(WebhookDelivery).where(WebhookDelivery.id == row.id,
                                                  WebhookDelivery.attempts == row.attempts)
                    .values(**values).execution_options(synchronize_session=False))
    session.commit()
    return outcome
