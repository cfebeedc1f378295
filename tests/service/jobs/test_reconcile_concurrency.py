"""Several copies of the reconcile loop at once (every `nbl worker`, `nbl serve`, `nbl reconcile` runs
one): a lost job is requeued once and every job is sent once, on SQLite and on Postgres; on Postgres
a copy that finds another's pass under way skips its turn. Real databases, the real embedded broker
(its messages are counted)."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import timedelta

from sqlalchemy import select, update
from testkit.service_lib import sqla_broker_messages

from service.core.celery_app import make_celery
from service.core.db import make_engine, make_sessionmaker
from service.core.models import Job, JobEvent, Team, new_job_id, utcnow
from service.jobs import lease
from service.jobs.queue import dispatch_one, due_for_dispatch
from service.jobs.reconciler import locked_pass, pass_lock, reconcile_once


def _jobs(sessions, lost: int, unsent: int) -> tuple[list[str], list[str]]:
    """`lost` jobs running under an expired lease (their worker died), `unsent` queued jobs never
    dispatched (the broker was down at submit)."""
    with sessions() as s:
        team = Team(name=f"rc-{new_job_id()[-6:]}")
        s.add(team)
        s.commit()
        ids = [new_job_id() for _ in range(lost + unsent)]
        s.add_all([Job(id=i, team_id=team.id, spec={"model": {"id": "a/b"}}) for i in ids])
        s.commit()
        for job_id in ids[:lost]:
            assert lease.claim_job(s, job_id, 60, max_attempts=3, owner="dead-worker")
        s.execute(update(Job).where(Job.id.in_(ids[:lost])).values(lease_expires_at=utcnow() - timedelta(seconds=5)))
        s.commit()
    return ids[:lost], ids[lost:]


def _requeue_events(sessions) -> Counter:
    with sessions() as s:
        rows = s.scalars(select(JobEvent.job_id).where(JobEvent.message.like("queued again:%"))).all()
    return Counter(rows)


def test_two_passes_at_once_requeue_and_send_each_job_once(db_url, settings_for):
    settings = settings_for(db_url)
    engine = make_engine(settings)
    sessions = make_sessionmaker(engine)
    lost, unsent = _jobs(sessions, 30, 30)
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def one_copy():  # a copy of the loop: its own Celery app and sessions, no lock (the compare-and-sets alone)
        celery = make_celery(settings)
        try:
            start.wait(10)
            with sessions() as s:
                reconcile_once(s, celery, settings)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)
        finally:
            celery.close()

    copies = [threading.Thread(target=one_copy) for _ in range(2)]
    for t in copies:
        t.start()
    for t in copies:
        t.join(60)
    assert not errors, errors
    assert _requeue_events(sessions) == Counter(lost)
    sent = Counter(m["args"][0] for m in sqla_broker_messages(settings))
    assert sent == Counter(lost + unsent)  # each job once, although both copies saw each
    with sessions() as s:
        assert set(s.scalars(select(Job.status).where(Job.id.in_(lost + unsent)))) == {"queued"}
    engine.dispose()


def test_a_send_claimed_by_another_pass_is_not_repeated(db_url, settings_for):
    """Deterministic interleaving: both passes read the same due rows, then both send."""
    settings = settings_for(db_url)
    engine = make_engine(settings)
    sessions = make_sessionmaker(engine)
    _, unsent = _jobs(sessions, 0, 3)
    celery = make_celery(settings)
    with sessions() as a, sessions() as b:
        due_a = due_for_dispatch(a, stale_after_s=600)
        due_b = due_for_dispatch(b, stale_after_s=600)
        assert sorted(due_a) == sorted(due_b) == sorted((i, None) for i in unsent)
        assert [dispatch_one(a, celery, i, seen) for i, seen in due_a] == [True] * 3
        assert [dispatch_one(b, celery, i, seen) for i, seen in due_b] == [False] * 3
    assert sorted(m["args"][0] for m in sqla_broker_messages(settings)) == sorted(unsent)

    down = make_celery(settings_for(db_url, broker_url="redis://127.0.0.1:1/0", publish_timeout_s=0.3))
    _, more = _jobs(sessions, 0, 1)
    with sessions() as s:
        assert not dispatch_one(s, down, more[0], None)  # the broker is down: not sent ...
        assert s.scalar(select(Job.dispatched_at).where(Job.id == more[0])) is None  # ... and still due
    down.close()
    celery.close()
    engine.dispose()


def test_on_postgres_a_pass_skips_while_another_copy_runs_one(pg_url, settings_for):
    settings = settings_for(pg_url)
    engine = make_engine(settings)
    other = make_engine(settings)  # another process's connection
    sessions = make_sessionmaker(engine)
    lost, unsent = _jobs(sessions, 1, 1)
    celery = make_celery(settings)
    with pass_lock(other) as held:
        assert held
        assert locked_pass(engine, sessions, celery, settings) is None  # skipped: nothing touched
        with sessions() as s:
            assert s.scalar(select(Job.status).where(Job.id == lost[0])) == "running"
            assert s.scalar(select(Job.dispatched_at).where(Job.id == unsent[0])) is None
    result = locked_pass(engine, sessions, celery, settings)  # the lock went with the other's transaction
    assert result.requeued == lost and sorted(result.dispatched) == sorted(lost + unsent)
    assert locked_pass(engine, sessions, celery, settings).requeued == []  # idempotent
    assert Counter(m["args"][0] for m in sqla_broker_messages(settings)) == Counter(lost + unsent)
    celery.close()
    other.dispose()
    engine.dispose()
