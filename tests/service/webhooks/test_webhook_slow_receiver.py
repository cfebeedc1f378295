"""A slow webhook receiver holds up nothing (issue 24, item 2): one POST gives up by its total
deadline although every single read is quick, deliveries run apart from the reconcile pass, so a
killed worker's job is requeued on time while a trickling receiver holds connections open, and
several deliverers at once still send each event once. Real databases, real receivers on 127.0.0.1
(tests/testkit/webhook_receiver.py), the real reconcile loop."""

from __future__ import annotations

import threading
import time
from collections import Counter
from datetime import timedelta

import pytest
from sqlalchemy import select
from testkit.service_lib import body
from testkit.webhook_receiver import Receiver, Trickler

from nbl.request import JobCreate
from service.core.db import make_engine, make_sessionmaker
from service.core.models import Job, utcnow
from service.core.webhook_tables import WebhookAttempt, WebhookDelivery
from service.jobs import lease, reconcile_loop
from service.jobs import service as jobs
from service.jobs.submit import create_job
from service.keys.auth import Principal, get_or_create_team
from service.webhooks import delivery as webhooks
from service.webhooks import signing

GENEROUS_S = 10.0  # slack for a loaded test machine; every bound below is far from what it guards against


@pytest.fixture
def env(db_url, settings_for):
    class Env:
        def __init__(self, **overrides):
            self.settings = settings_for(db_url, webhook_allowlist="127.0.0.1", **overrides)
            self.engine = make_engine(self.settings)
            self.sessions = make_sessionmaker(self.engine)
            with self.sessions() as s:
                team, _ = get_or_create_team(s, "alpha")
                self.principal = Principal(team_id=team.id, team_name="alpha", max_active_jobs=None)
                signing.set_team_secret(s, self.settings, team.id)

        def job(self, url: str | None = None, cancel: bool = True) -> str:
            """A job; with a URL and cancel, one job.cancelled delivery is due."""
            extra = {"webhook_url": url} if url else {}
            with self.sessions() as s:
                job, _ = create_job(s, self.principal, JobCreate.model_validate(body(**extra)), None, self.settings)
                if cancel:
                    jobs.cancel_job(s, self.principal.team_id, job.id)
            return job.id

    made: list[Env] = []
    yield lambda **overrides: made.append(Env(**overrides)) or made[-1]
    for e in made:
        e.engine.dispose()


@pytest.fixture
def trickler():
    made: list[Trickler] = []
    yield lambda **kw: made.append(Trickler(**kw)) or made[-1]
    for t in made:
        t.close()


def wait_for(check, timeout: float, every: float = 0.05):
    end = time.monotonic() + timeout
    while not (value := check()) and time.monotonic() < end:
        time.sleep(every)
    return value


def test_one_post_to_a_trickling_receiver_gives_up_by_its_total_deadline(env, trickler):
    """Each header byte comes within 0.2 s, far inside any per-read timeout; the whole POST still
    ends at its 1 s deadline, the socket is closed (the receiver sees the hang-up), and the attempt
    is retried later as any failed one."""
    e, slow = env(webhook_timeout_s=1.0, webhook_backoff_s=30.0), trickler(every_s=0.2, max_s=30)
    e.job(slow.url)
    t0 = time.monotonic()
    with e.sessions() as s:
        assert webhooks.deliver_due(s, e.settings) == {"retrying": 1}
    elapsed = time.monotonic() - t0
    assert elapsed < 1.0 + GENEROUS_S, elapsed  # without the deadline: until the receiver stops, 30 s
    assert wait_for(lambda: slow.hung_up == 1, GENEROUS_S)  # aborted, not left to trickle
    with e.sessions() as s:
        [attempt] = s.scalars(select(WebhookAttempt))
        [row] = s.scalars(select(WebhookDelivery))
    assert attempt.status_code is None and "no answer within 1 s" in attempt.error, attempt.error
    assert 900 <= attempt.duration_ms < (1.0 + GENEROUS_S) * 1000
    assert (row.status, row.attempts) == ("pending", 1)
    assert row.next_attempt_at >= utcnow() + timedelta(seconds=20)  # the usual backoff


def test_a_slow_resolver_counts_against_the_deadline(env):
    """Resolving the host is part of the POST's time: a name server that does not answer costs
    the deadline, not the resolver's own timeouts."""
    e, release = env(webhook_timeout_s=1.0), threading.Event()

    def stuck_dns(host, port):
        release.wait(60)
        return ["127.0.0.1"]

    e.job("http://hooks.example.test:9/in")
    t0 = time.monotonic()
    try:
        with e.sessions() as s:
            assert webhooks.deliver_due(s, e.settings, resolve=stuck_dns) == {"retrying": 1}
            error = s.scalar(select(WebhookAttempt.error))
    finally:
        release.set()
    assert time.monotonic() - t0 < 1.0 + GENEROUS_S and "no answer within 1 s" in error, error


@pytest.mark.slow
def test_a_trickling_receiver_does_not_hold_up_recovery_of_a_killed_workers_job(env, trickler):
    """Six cancelled jobs name a receiver that never finishes an answer (and a deadline of a minute,
    so the deadline alone cannot free the loop); a worker is killed holding a 3 s lease. The
    reconcile loop requeues that job within its lease and one interval while the POSTs are still
    held open."""
    interval = 0.5
    e, slow = env(webhook_timeout_s=60.0), trickler(every_s=1.0, max_s=90)
    for _ in range(6):
        e.job(slow.url)
    lost = e.job(cancel=False)
    with e.sessions() as s:
        assert lease.claim_job(s, lost, 3, max_attempts=3, owner="killed:1@host")
        expires = s.scalar(select(Job.lease_expires_at).where(Job.id == lost))
    loop = reconcile_loop.start(e.settings, "test", interval_s=interval)
    try:
        assert wait_for(lambda: slow.open >= 1, GENEROUS_S), "no delivery reached the receiver"

        def status():
            with e.sessions() as s:
                return s.scalar(select(Job.status).where(Job.id == lost).execution_options(populate_existing=True))

        budget = (expires - utcnow()).total_seconds() + interval + GENEROUS_S
        assert wait_for(lambda: status() == "queued", budget), f"still {status()}: recovery waited on the receiver"
        late = (utcnow() - expires).total_seconds()
        assert slow.open >= 1 and slow.hung_up == 0  # the receiver still holds its POSTs open
        assert late < interval + GENEROUS_S, late
    finally:
        slow.close()  # frees a loop stuck in a POST (before the fix), so that it can stop
        loop.close()


@pytest.mark.slow
def test_deliveries_run_side_by_side_up_to_the_bound(env, trickler):
    e, slow = env(webhook_timeout_s=1.0), trickler(every_s=0.2)
    for _ in range(10):
        e.job(slow.url)
    with e.sessions() as s:
        assert webhooks.deliver_due(s, e.settings, concurrency=4) == {"retrying": 10}
    assert slow.accepted == 10 and 1 < slow.most_open <= 4, (slow.accepted, slow.most_open)


def test_several_deliverers_at_once_send_each_event_once(env):
    """Every `nbl serve`, `nbl worker` and `nbl reconcile` runs a deliverer: the database claim
    (a compare-and-set on next_attempt_at) gives each due event to one of them."""
    e, rx = env(), Receiver()
    try:
        for _ in range(12):
            e.job(rx.url)
        start, outcomes, errors = threading.Barrier(3), Counter(), []

        def deliverer():
            try:
                start.wait(10)
                with e.sessions() as s:
                    outcomes.update(webhooks.deliver_due(s, e.settings))
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=deliverer) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors, errors
        assert outcomes == {"delivered": 12}
        assert sorted(Counter(h["webhook-id"] for h, _ in rx.requests).values()) == [1] * 12
        with e.sessions() as s:
            assert set(s.scalars(select(WebhookDelivery.status))) == {"delivered"}
            assert s.scalar(select(WebhookAttempt.attempt).order_by(WebhookAttempt.attempt.desc()).limit(1)) == 1
    finally:
        rx.close()
