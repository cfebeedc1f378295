"""One team's slow receivers cannot delay another team's webhooks (red-team pass on issue 24: after
400 jobs naming a trickling receiver, another team's webhook waited 128 s instead of 4 s). A
deliverer's slots are shared by team (service/webhooks/fair.py): a team holds at most half of them,
a free slot serves the team with the fewest POSTs in flight, and a row that comes due while a pass
is busy joins it. Real databases, real receivers on 127.0.0.1 (tests/testkit/webhook_receiver.py)."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import select
from testkit.service_lib import body
from testkit.webhook_receiver import Receiver, Trickler

from nbl.request import JobCreate
from service.core.db import make_engine, make_sessionmaker
from service.core.models import Job
from service.core.webhook_tables import WebhookAttempt, WebhookDelivery
from service.jobs import service as jobs
from service.jobs.submit import create_job
from service.keys.auth import Principal, get_or_create_team
from service.webhooks import delivery as webhooks
from service.webhooks import signing
from service.webhooks.fair import Share


@pytest.fixture
def env(db_url, settings_for):
    class Env:
        def __init__(self, **overrides):
            self.settings = settings_for(db_url, webhook_allowlist="127.0.0.1", webhook_backoff_s=600.0, **overrides)
            self.engine = make_engine(self.settings)
            self.sessions = make_sessionmaker(self.engine)
            self.teams = {}
            with self.sessions() as s:
                for name in ("attacker", "victim"):
                    team, _ = get_or_create_team(s, name)
                    self.teams[name] = Principal(team_id=team.id, team_name=name, max_active_jobs=None)
                    signing.set_team_secret(s, self.settings, team.id)

        def cancelled_job(self, team: str, url: str) -> str:
            """A job of `team` cancelled at once: one job.cancelled delivery to `url` is due."""
            who = self.teams[team]
            with self.sessions() as s:
                job, _ = create_job(s, who, JobCreate.model_validate(body(webhook_url=url)), None, self.settings)
                jobs.cancel_job(s, who.team_id, job.id)
            return job.id

        def attempts(self, team: str) -> list[WebhookAttempt]:
            with self.sessions() as s:
                return list(
                    s.scalars(
                        select(WebhookAttempt)
                        .join(WebhookDelivery)
                        .join(Job)
                        .where(Job.team_id == self.teams[team].team_id)
                    )
                )

    made = []
    yield lambda **kw: made.append(Env(**kw)) or made[-1]
    for e in made:
        e.engine.dispose()


@pytest.fixture
def receivers():
    made = []
    yield lambda cls, **kw: made.append(cls(**kw)) or made[-1]
    for r in made:
        r.close()


def ended(a: WebhookAttempt) -> datetime:
    return a.started_at + timedelta(milliseconds=a.duration_ms)


@pytest.mark.slow
def test_another_teams_webhook_does_not_wait_behind_a_trickling_receiver(env, receivers):
    """Six deliveries of one team to a receiver that never finishes an answer are older than the
    other team's one; with four slots, taken oldest first, it waited for the first two to give up."""
    e = env(webhook_timeout_s=2.0)
    slow, rx = receivers(Trickler, every_s=0.2, max_s=30), receivers(Receiver)
    for _ in range(6):
        e.cancelled_job("attacker", slow.url)
    e.cancelled_job("victim", rx.url)
    with e.sessions() as s:
        assert webhooks.deliver_due(s, e.settings, concurrency=4) == {"retrying": 6, "delivered": 1}
    [mine], theirs = e.attempts("victim"), e.attempts("attacker")
    assert mine.status_code == 200 and len(rx.requests) == 1
    assert mine.started_at < min(ended(a) for a in theirs), "the victim's POST waited for a slot the attacker held"
    assert slow.most_open <= 2, slow.most_open  # half of the four slots


@pytest.mark.slow
def test_a_webhook_that_comes_due_mid_pass_joins_it(env, receivers):
    """The pass is busy with the attacker's POSTs (5 s deadline each) when the victim's job ends: its
    webhook goes out in that pass, without waiting for any of those POSTs to end."""
    e = env(webhook_timeout_s=5.0)
    slow, rx = receivers(Trickler, every_s=0.2, max_s=60), receivers(Receiver)
    for _ in range(4):
        e.cancelled_job("attacker", slow.url)
    outcomes = {}

    def deliver():
        with e.sessions() as s:
            outcomes.update(webhooks.deliver_due(s, e.settings, concurrency=4))

    worker = threading.Thread(target=deliver)
    worker.start()
    try:
        deadline = time.monotonic() + 30
        while slow.open < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert slow.open >= 1, "the pass never reached the slow receiver"
        e.cancelled_job("victim", rx.url)
    finally:
        worker.join(60)
    assert outcomes == {"retrying": 4, "delivered": 1}, outcomes
    [mine], theirs = e.attempts("victim"), e.attempts("attacker")
    assert mine.started_at < min(ended(a) for a in theirs), "the victim's POST waited for the attacker's to end"


def test_the_share_serves_the_team_with_the_fewest_in_flight_and_caps_each():
    t0 = datetime(2025, 1, 1, tzinfo=timezone.utc)
    share = Share(per_team=2)
    due = {1: t0, 2: t0 + timedelta(seconds=5)}
    assert share.pick(due) == 1  # none in flight: the oldest first
    share.begin(1)
    assert share.pick(due) == 2  # then the team with fewer in flight
    share.begin(2)
    share.begin(1)
    assert share.pick({1: t0}) is None and share.busy == 3  # team 1 holds its share
    share.end(1)
    assert share.pick({1: t0}) == 1
    assert share.pick({}) is None
    with pytest.raises(ValueError):
        Share(per_team=0)
