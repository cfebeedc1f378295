"""Job webhooks per Standard Webhooks (https://www.standardwebhooks.com): an outbox and a deliverer.

Producer: service/jobs/outbox.py, inside the transaction that moves a job to a new state (the job's
state machine writes the row with the change), so this package needs nothing of the jobs: each row
holds its exact body already.

Deliverer: `deliver_due(session, settings)` (the deliverer thread beside each reconcile loop,
service.webhooks.deliverer, or `nbl admin deliver-webhooks`) POSTs the due rows, a few at once
and fairly across teams (service.webhooks.fair: one team's slow receivers hold at most half the
slots, so another team's webhook never waits behind them), each signed with the team's secret (service.webhooks.signing) and each under a total deadline of
webhook_timeout_s (service.webhooks.post). A non-2xx answer, a timeout or a refused address is
retried after webhook_backoff_s * 2**(attempt-1) (capped), up to webhook_max_attempts; each
attempt is recorded. Delivery is at least once: a row is claimed by a compare-and-set before its
POST, so deliverers in several processes send it once, unless one dies mid-send (then it is sent
again, with the same webhook-id, after the claim's hold). Delivery never touches the job: a
webhook that fails cannot change a job's state.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import httpx
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from nbl.webhook_urls import Resolver, system_resolver
from service.core.cas import cas
from service.core.models import Job, utcnow
from service.core.secrets import SecretError
from service.core.settings import Settings
from service.core.webhook_tables import WebhookAttempt, WebhookDelivery, WebhookStatus
from service.webhooks import fair, post
from service.webhooks.signing import team_secret

log = logging.getLogger(__name__)

# --- retries (pure) ----------------------------------------------------------------------------


def backoff_s(attempts: int, base: float, cap: float) -> float:
    """Wait after the `attempts`-th failed attempt: base, 2 base, 4 base, ... at most cap."""
    return min(cap, base * 2 ** max(attempts - 1, 0))


# --- the deliverer -------------------------------------------------------------------------------

CONCURRENCY = 8  # POSTs in flight at once, per deliverer
POLL_S = 1.0  # how often a slot with nothing to take looks again while the pass has POSTs in flight
RACES = 10  # claims lost in a row to other deliverers before a slot waits a little


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


def deliver_due(
    session: Session,
    settings: Settings,
    now: datetime | None = None,
    *,
    limit: int = 100,
    budget_s: float = 60.0,
    resolve: Resolver = system_resolver,
    concurrency: int = CONCURRENCY,
    per_team: int | None = None,
) -> dict[str, int]:
    """Send the pending deliveries that are due, up to `concurrency` at once and at most `per_team`
    (default: half the slots) for one team (service.webhooks.fair); at most `limit` in all, starting
    no new one after `budget_s` (but always one). Rows that come due while the pass has POSTs in
    flight join it. Returns counts by outcome (delivered, retrying, failed). `now` fixes the
    scheduler's clock (tests move it); without it the clock is read at each pick. The
    webhook-timestamp header is always the real time of the attempt. Runs its own event loop: call
    it from plain (not async) code."""
    clock = (lambda: now) if now is not None else utcnow
    if not _due_by_team(session, clock()):
        return {}
    share = fair.Share(per_team or max(1, concurrency // 2))
    outcomes = asyncio.run(
        _deliver_all(session, settings, clock, resolve, concurrency, share, limit, time.monotonic() + budget_s)
    )
    return dict(Counter(outcomes))


async def _deliver_all(
    session: Session,
    settings: Settings,
    clock: Callable[[], datetime],
    resolve: Resolver,
    concurrency: int,
    share: fair.Share,
    limit: int,
    stop_at: float,
) -> list[str]:
    # The slots share one session: they touch it only between awaits, in steps that commit
    # (_next, _record), so no two use it at once and no transaction spans a POST.
    outcomes: list[str] = []
    started = 0
    freed = asyncio.Condition()  # a POST ended: a slot held back by the shares may go now

    async def slot(http: httpx.AsyncClient) -> None:
        nonlocal started
        while started < limit and (started == 0 or time.monotonic() <= stop_at):
            now = clock()
            taken, waiting = _next(session, settings, share, now)
            if taken is None:
                if not waiting and not share.busy:
                    return  # nothing due, nothing in flight: the pass is over
                async with freed:  # look again when a POST ends, or for rows that come due meanwhile
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(freed.wait(), POLL_S)
                continue
            (claim, secret, error), team = taken
            started += 1
            share.begin(team)
            try:
                started_at, t0, status_code = utcnow(), time.monotonic(), None
                if secret is not None:
                    status_code, error = await post.attempt(
                        http,
                        claim.url,
                        secret,
                        claim.id,
                        claim.payload,
                        deadline_s=settings.webhook_timeout_s,
                        allowlist=settings.webhook_networks,
                        resolve=resolve,
                    )
                duration_ms = (time.monotonic() - t0) * 1000
                outcomes.append(_record(session, settings, claim, now, started_at, duration_ms, status_code, error))
            finally:
                share.end(team)
                async with freed:
                    freed.notify_all()

    async with post.client(settings.webhook_timeout_s) as http:
        await asyncio.gather(*(slot(http) for _ in range(concurrency)))
    return outcomes


def _due_by_team(session: Session, now: datetime) -> dict[int, datetime]:
    """{team id: its oldest due delivery's time}."""
    rows = session.execute(
        select(Job.team_id, func.min(WebhookDelivery.next_attempt_at))
        .join(Job, Job.id == WebhookDelivery.job_id)
        .where(WebhookDelivery.status == WebhookStatus.pending.value, WebhookDelivery.next_attempt_at <= now)
        .group_by(Job.team_id)
    ).all()
    session.commit()  # no transaction stays open across HTTP calls
    return {team: oldest for team, oldest in rows}


def _next(session: Session, settings: Settings, share: fair.Share, now: datetime):
    """Claim the next delivery the shares allow: ((claim, secret, error), team), or None and whether
    something is due that the shares hold back. A row another deliverer claimed first is skipped."""
    for _ in range(RACES):
        due = _due_by_team(session, now)
        team = share.pick(due)
        if team is None:
            return None, bool(due)
        delivery_id = session.scalar(
            select(WebhookDelivery.id)
            .join(Job, Job.id == WebhookDelivery.job_id)
            .where(
                Job.team_id == team,
                WebhookDelivery.status == WebhookStatus.pending.value,
                WebhookDelivery.next_attempt_at <= now,
            )
            .order_by(WebhookDelivery.next_attempt_at, WebhookDelivery.id)
            .limit(1)
        )
        session.commit()
        if delivery_id is not None:
            claimed = _claim(session, settings, delivery_id, now)
            if claimed[0] is not None:
                return (claimed, team), True
    return None, True  # others keep winning the claims: look again shortly


def _claim(
    session: Session,
    settings: Settings,
    delivery_id: str,
    now: datetime,
) -> tuple[Claim | None, str | None, str | None]:
    """Claim a due row (claim, team secret, why not sendable), or (None, None, None) when another
    deliverer has it. The claim pushes the row's time out, so that a second deliverer running now
    skips it; if this process dies mid-send, the row comes due again after the hold and is re-sent
    with the same webhook-id."""
    if not cas(
        session,
        update(WebhookDelivery)
        .where(
            WebhookDelivery.id == delivery_id,
            WebhookDelivery.status == WebhookStatus.pending.value,
            WebhookDelivery.next_attempt_at <= now,
        )
        .values(next_attempt_at=now + claim_hold(settings)),
        commit=True,
    ):
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


def _record(
    session: Session,
    settings: Settings,
    claim: Claim,
    now: datetime,
    started: datetime,
    duration_ms: float,
    status_code: int | None,
    error: str | None,
) -> str:
    attempts = claim.attempts + 1
    values: dict = {"attempts": attempts, "last_error": error}
    if error is None:
        outcome, values["status"], values["finished_at"] = "delivered", WebhookStatus.delivered.value, utcnow()
    elif attempts >= settings.webhook_max_attempts:
        outcome, values["status"], values["finished_at"] = "failed", WebhookStatus.failed.value, utcnow()
        log.warning(
            "webhook %s (%s of %s) given up after %d attempts: %s", claim.id, claim.event, claim.job_id, attempts, error
        )
    else:
        outcome = "retrying"
        values["next_attempt_at"] = now + timedelta(
            seconds=backoff_s(attempts, settings.webhook_backoff_s, settings.webhook_backoff_max_s)
        )
    session.add(
        WebhookAttempt(
            delivery_id=claim.id,
            attempt=attempts,
            started_at=started,
            duration_ms=duration_ms,
            status_code=status_code,
            error=error,
        )
    )
    session.execute(
        update(WebhookDelivery)
        .where(WebhookDelivery.id == claim.id, WebhookDelivery.attempts == claim.attempts)
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    session.commit()
    return outcome
