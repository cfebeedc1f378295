"""Job webhooks per Standard Webhooks (https://www.standardwebhooks.com): an outbox and a deliverer.

Producer: service/jobs/outbox.py, inside the transaction that moves a job to a new state (the job's
state machine writes the row with the change), so this package needs nothing of the jobs: each row
holds its exact body already.

Deliverer: `deliver_due(session, settings)` (the deliverer thread beside each reconcile loop,
service.webhooks.deliverer, or `nbl admin deliver-webhooks`) POSTs the due rows, a few at once,
each signed with the team's secret (service.webhooks.signing) and each under a total deadline of
webhook_timeout_s (service.webhooks.post). A non-2xx answer, a timeout or a refused address is
retried after webhook_backoff_s * 2**(attempt-1) (capped), up to webhook_max_attempts; each
attempt is recorded. Delivery is at least once: a row is claimed by a compare-and-set before its
POST, so deliverers in several processes send it once, unless one dies mid-send (then it is sent
again, with the same webhook-id, after the claim's hold). Delivery never touches the job: a
webhook that fails cannot change a job's state.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from nbl.webhook_urls import Resolver, system_resolver
from service.core.cas import cas
from service.core.models import (
    Job,
    WebhookAttempt,
    WebhookDelivery,
    WebhookStatus,
    utcnow,
)
from service.core.secrets import SecretError
from service.core.settings import Settings
from service.webhooks import post
from service.webhooks.signing import team_secret

log = logging.getLogger(__name__)

# --- retries (pure) ----------------------------------------------------------------------------


def backoff_s(attempts: int, base: float, cap: float) -> float:
    """Wait after the `attempts`-th failed attempt: base, 2 base, 4 base, ... at most cap."""
    return min(cap, base * 2 ** max(attempts - 1, 0))


# --- the deliverer -------------------------------------------------------------------------------

CONCURRENCY = 8  # POSTs in flight at once, per deliverer


@dataclass(frozen=True)
class Claim:
    """A delivery this deliverer holds, as read when it claimed it (no ORM object across awaits)."""
    id: str
    job_id: str
    event: str
    url: str
    payload: str
    attempts: int


def claim_hold(settings: Settings) -> timedelta:
    """How long a claim keeps other deliverers off a row: more than any POST can take now that each
    has a total deadline (post.py), so a row is sent again only when its deliverer died mid-send."""
    return timedelta(seconds=3 * settings.webhook_timeout_s + 60)


def deliver_due(session: Session, settings: Settings, now: datetime | None = None, *, limit: int = 100,
                budget_s: float = 60.0, resolve: Resolver = system_resolver,
                concurrency: int = CONCURRENCY) -> dict[str, int]:
    """Send the pending deliveries whose time has come (at most `limit`, up to `concurrency` at once,
    starting no new one after `budget_s`); returns counts by outcome (delivered, retrying, failed).
    `now` is the scheduler's clock (tests move it); the webhook-timestamp header is always the real
    time of the attempt. Runs its own event loop: call it from plain (not async) code."""
    now = now or utcnow()
    ids = list(session.scalars(select(WebhookDelivery.id)
                               .where(WebhookDelivery.status == WebhookStatus.pending.value,
                                      WebhookDelivery.next_attempt_at <= now)
                               .order_by(WebhookDelivery.next_attempt_at).limit(limit)))
    session.commit()  # no transaction stays open across HTTP calls
    if not ids:
        return {}
    outcomes = asyncio.run(_deliver_all(session, settings, ids, now, resolve, concurrency,
                                        time.monotonic() + budget_s))
    return dict(Counter(o for o in outcomes if o))


async def _deliver_all(session: Session, settings: Settings, ids: list[str], now: datetime, resolve: Resolver,
                       concurrency: int, stop_at: float) -> list[str | None]:
    # The tasks share one session: they touch it only between awaits, in steps that commit
    # (_claim, _record), so no two use it at once and no transaction spans a POST.
    gate = asyncio.Semaphore(concurrency)
    async with post.client(settings.webhook_timeout_s) as http:
        async def one(i: int, delivery_id: str) -> str | None:
            async with gate:
                if i and time.monotonic() > stop_at:
                    return None  # stays due for the next pass (each pass sends at least one)
                claim, secret, error = _claim(session, settings, delivery_id, now)
                if claim is None:
                    return None
                started, t0, status_code = utcnow(), time.monotonic(), None
                if secret is not None:
                    status_code, error = await post.attempt(
                        http, claim.url, secret, claim.id, claim.payload, deadline_s=settings.webhook_timeout_s,
                        allowlist=settings.webhook_networks, resolve=resolve)
                duration_ms = (time.monotonic() - t0) * 1000
                return _record(session, settings, claim, now, started, duration_ms, status_code, error)

        return await asyncio.gather(*(one(i, d) for i, d in enumerate(ids)))


def _claim(session: Session, settings: Settings, delivery_id: str, now: datetime,
           ) -> tuple[Claim | None, str | None, str | None]:
    """Claim a due row (claim, team secret, why not sendable), or (None, None, None) when another
    deliverer has it. The claim pushes the row's time out, so that a second deliverer running now
    skips it; if this process dies mid-send, the row comes due again after the hold and is re-sent
    with the same webhook-id."""
    if not cas(session, update(WebhookDelivery)
               .where(WebhookDelivery.id == delivery_id, WebhookDelivery.status == WebhookStatus.pending.value,
                      WebhookDelivery.next_attempt_at <= now)
               .values(next_attempt_at=now + claim_hold(settings)), commit=True):
        return None, None, None
    row = session.get(WebhookDelivery, delivery_id, populate_existing=True)
    claim = Claim(row.id, row.job_id, row.event, row.url, row.payload, row.attempts)
    team_id = session.scalar(select(Job.team_id).where(Job.id == row.job_id))
    try:
        secret = team_secret(session, settings, team_id) if team_id is not None else None
        error = None if secret is not None else "the team has no webhook secret (nbl admin webhook-secret --team NAME)"
    except SecretError as e:
        secret, error = None, str(e)
    session.commit()
    return claim, secret, error


def _record(session: Session, settings: Settings, claim: Claim, now: datetime, started: datetime,
            duration_ms: float, status_code: int | None, error: str | None) -> str:
    attempts = claim.attempts + 1
    values: dict = {"attempts": attempts, "last_error": error}
    if error is None:
        outcome, values["status"], values["finished_at"] = "delivered", WebhookStatus.delivered.value, utcnow()
    elif attempts >= settings.webhook_max_attempts:
        outcome, values["status"], values["finished_at"] = "failed", WebhookStatus.failed.value, utcnow()
        log.warning("webhook %s (%s of %s) given up after %d attempts: %s", claim.id, claim.event, claim.job_id,
                    attempts, error)
    else:
        outcome = "retrying"
        values["next_attempt_at"] = now + timedelta(
            seconds=backoff_s(attempts, settings.webhook_backoff_s, settings.webhook_backoff_max_s))
    session.add(WebhookAttempt(delivery_id=claim.id, attempt=attempts, started_at=started, duration_ms=duration_ms,
                               status_code=status_code, error=error))
    session.execute(update(WebhookDelivery).where(WebhookDelivery.id == claim.id,
                                                  WebhookDelivery.attempts == claim.attempts)
                    .values(**values).execution_options(synchronize_session=False))
    session.commit()
    return outcome
