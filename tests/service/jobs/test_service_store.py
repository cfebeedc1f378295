"""service.jobs.store, the worker's side of the job row, on SQLite and Postgres: claims are
compare-and-set, writes are fenced by the lease, terminal states never change."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy import select, update

from service.core.models import Job, JobEvent, Team, utcnow
from service.jobs import lease, states, store


@pytest.fixture
def new_job(sessions):
    def make() -> str:
        from service.core.models import new_job_id

        with sessions() as s:
            team = s.scalar(select(Team).where(Team.name == "store")) or Team(name="store")
            s.add(team)
            s.flush()
            job = Job(id=new_job_id(), team_id=team.id, spec={"model": {"id": "a/b"}})
            s.add(job)
            s.commit()
            return job.id

    return make


def expire_lease(sessions, job_id):
    with sessions() as s:
        s.execute(update(Job).where(Job.id == job_id).values(lease_expires_at=utcnow() - timedelta(seconds=1)))
        s.commit()


def test_claim_is_compare_and_set(sessions, new_job):
    job_id = new_job()
    with sessions() as s:
        token = lease.claim_job(s, job_id, 60)
        assert token and lease.claim_job(s, job_id, 60) is None
        job = s.get(Job, job_id, populate_existing=True)
        assert job.status == "running" and job.attempt == 1 and job.started_at and job.lease_token == token
        assert job.lease_expires_at > utcnow() + timedelta(seconds=50)
        assert lease.claim_job(s, "job_" + "f" * 32, 60) is None  # unknown


def test_concurrent_claims_have_one_winner(sessions, new_job):
    job_id = new_job()
    barrier, tokens = threading.Barrier(8), []

    def claim():
        with sessions() as s:
            barrier.wait()
            tokens.append(lease.claim_job(s, job_id, 60))

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len([t for t in tokens if t]) == 1


def test_expired_lease_is_taken_over_and_the_old_owner_is_fenced(sessions, new_job):
    job_id = new_job()
    with sessions() as s:
        old = lease.claim_job(s, job_id, 60)
    expire_lease(sessions, job_id)
    with sessions() as s:
        new = lease.claim_job(s, job_id, 60)
        assert new and new != old
        assert s.get(Job, job_id, populate_existing=True).attempt == 2
        # The old worker wakes up: every write it tries is refused.
        assert not lease.heartbeat(s, job_id, old)
        assert not store.set_progress(s, job_id, "score", 0.5, lease_token=old)
        assert not store.save_metrics(s, job_id, "base", {"x": 1.0}, lease_token=old)
        assert not store.save_layer_scores(s, job_id, [], lease_token=old)
        assert not store.save_artifact(s, job_id, 1, "local", "file:///x", lease_token=old)
        assert not states.finish(s, job_id, old, "failed", error_type="system", error_message="stale")
        assert lease.heartbeat(s, job_id, new)
        assert states.finish(s, job_id, new, "succeeded")
        assert s.get(Job, job_id, populate_existing=True).status == "succeeded"


def test_a_takeover_says_the_worker_was_lost_as_a_requeue_does(sessions, new_job):
    """The second attempt is explained in the history whichever comes first after the lease expires: a worker's
    claim taking the job over, or the reconciler's requeue (then the claim of the queued job adds nothing)."""

    def lost_events(job_id):
        with sessions() as s:
            rows = s.scalars(select(JobEvent).where(JobEvent.job_id == job_id).order_by(JobEvent.id)).all()
            return [(e.message, e.data) for e in rows if (e.data or {}).get("reason") == "worker lost"]

    taken, requeued = new_job(), new_job()
    for job_id in (taken, requeued):
        with sessions() as s:
            lease.claim_job(s, job_id, 60, owner="w1@host")
            s.execute(update(Job).where(Job.id == job_id).values(stage="calibrate"))
            s.commit()
        expire_lease(sessions, job_id)
    with sessions() as s:
        assert lease.claim_job(s, taken, 60, max_attempts=3, owner="w2@host")
        job = s.get(Job, requeued)
        assert lease.requeue_lost(s, job, 3, utcnow())
        assert lease.claim_job(s, requeued, 60, max_attempts=3, owner="w2@host")
    want = [
        (
            "queued again: worker w1@host lost at stage calibrate (attempt 1 of 3)",
            {"status": "queued", "reason": "worker lost", "attempt": 1, "stage": "calibrate"},
        )
    ]
    assert lost_events(taken) == want and lost_events(requeued) == want
    with sessions() as s:
        assert s.get(Job, taken).attempt == 2 and s.get(Job, taken).status == "running"


def test_terminal_states_never_change(sessions, new_job):
    job_id = new_job()
    with sessions() as s:
        token = lease.claim_job(s, job_id, 60)
        assert states.finish(s, job_id, token, "failed", error_type="timeout", error_message="soft time limit")
        assert not states.finish(s, job_id, token, "succeeded")
        assert not store.set_progress(s, job_id, "publish", 1.0, lease_token=token)
        assert not lease.heartbeat(s, job_id, token)
    expire_lease(sessions, job_id)
    with sessions() as s:
        assert lease.claim_job(s, job_id, 60) is None
        job = s.get(Job, job_id, populate_existing=True)
        assert (job.status, job.error_type, job.error_message) == ("failed", "timeout", "soft time limit")


def test_finish_checks_its_arguments(sessions, new_job):
    job_id = new_job()
    with sessions() as s:
        token = lease.claim_job(s, job_id, 60)
        with pytest.raises(ValueError):
            states.finish(s, job_id, token, "running")
        with pytest.raises(ValueError):
            states.finish(s, job_id, token, "failed")  # a failure needs its type
        with pytest.raises(ValueError):
            states.finish(s, job_id, token, "failed", error_type="oops")
        with pytest.raises(ValueError):
            store.add_event(s, job_id, "gossip", "no such kind")
        with pytest.raises(ValueError):
            store.add_event(s, job_id, "status", "succeeded")  # only with a transition (states.py)


def test_a_cancelling_job_whose_worker_died_ends_cancelled(sessions, new_job):
    job_id = new_job()
    with sessions() as s:
        lease.claim_job(s, job_id, 60)
        s.execute(update(Job).where(Job.id == job_id).values(status="cancelling", cancel_requested=True))
        s.commit()
    expire_lease(sessions, job_id)
    with sessions() as s:
        assert lease.claim_job(s, job_id, 60) is None
        assert s.get(Job, job_id, populate_existing=True).status == "cancelled"
        kinds = [e.data.get("status") for e in s.scalars(select(JobEvent).where(JobEvent.job_id == job_id))]
        assert kinds[-1] == "cancelled"


def test_heartbeat_extends_the_lease(sessions, new_job):
    job_id = new_job()
    with sessions() as s:
        token = lease.claim_job(s, job_id, 30)
        s.execute(
            update(Job)
            .where(Job.id == job_id)
            .values(lease_expires_at=utcnow() + timedelta(seconds=2), heartbeat_at=utcnow() - timedelta(seconds=28))
        )
        s.commit()
        assert lease.heartbeat(s, job_id, token)
        assert s.get(Job, job_id, populate_existing=True).lease_expires_at > utcnow() + timedelta(seconds=25)
        assert lease.heartbeat(s, job_id, token, lease_seconds=300)
        assert s.get(Job, job_id, populate_existing=True).lease_expires_at > utcnow() + timedelta(seconds=290)
