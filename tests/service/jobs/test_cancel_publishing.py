"""Once publishing has begun, no cancel (issue 24 §3): states.begin_publish and request_cancel are one
compare-and-set each on the job row, so of a cancel and the worker's begin_publish exactly one wins, on SQLite
and on Postgres; a job queued again after its worker died mid-publish stays uncancellable."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy import select, update
from testkit.service_lib import assert_problem

from service.core.errors import CancelNotPossible, InvalidJobState
from service.core.models import Job, JobEvent, Team, new_job_id, utcnow
from service.jobs import lease, states
from service.jobs import service as api_jobs


@pytest.fixture
def running(sessions):
    """running(team="alpha") -> (team id, job id, lease token) of a freshly claimed job."""

    def make(team: str = "alpha") -> tuple[int, str, str]:
        with sessions() as s:
            row = s.scalar(select(Team).where(Team.name == team)) or Team(name=team)
            s.add(row)
            s.flush()
            job = Job(id=new_job_id(), team_id=row.id, spec={"model": {"id": "a/b"}})
            s.add(job)
            s.commit()
            team_id, job_id = row.id, job.id
            return team_id, job_id, lease.claim_job(s, job_id, 60)

    return make


def row(sessions, job_id: str) -> Job:
    with sessions() as s:
        job = s.get(Job, job_id)
        s.expunge(job)
        return job


def test_a_cancel_after_begin_publish_is_refused_and_the_job_can_still_succeed(sessions, running):
    team_id, job_id, token = running()
    with sessions() as s:
        assert states.begin_publish(s, job_id, token)
        with pytest.raises(CancelNotPossible, match="is publishing; cancel not possible"):
            api_jobs.cancel_job(s, team_id, job_id)
    job = row(sessions, job_id)
    assert job.status == "running" and not job.cancel_requested and job.publishing_at is not None
    with sessions() as s:
        assert not states.cancel_requested(s, job_id)  # the worker's checkpoints go on
        assert states.finish(s, job_id, token, "succeeded")
        with pytest.raises(InvalidJobState, match="already succeeded"):  # as before
            api_jobs.cancel_job(s, team_id, job_id)


def test_a_cancel_before_begin_publish_wins_and_nothing_is_marked(sessions, running):
    team_id, job_id, token = running()
    with sessions() as s:
        assert api_jobs.cancel_job(s, team_id, job_id).status == "cancelling"
        assert not states.begin_publish(s, job_id, token)  # DbSink raises Cancelled: nothing published
        assert states.finish(s, job_id, token, "cancelled")
    assert row(sessions, job_id).publishing_at is None


def test_a_job_queued_again_after_dying_mid_publish_cannot_be_cancelled(sessions, running):
    team_id, job_id, token = running()
    with sessions() as s:
        assert states.begin_publish(s, job_id, token)
    first = row(sessions, job_id)
    with sessions() as s:  # its worker dies: the reconciler queues it again
        s.execute(update(Job).where(Job.id == job_id).values(lease_expires_at=utcnow() - timedelta(seconds=1)))
        s.commit()
        lost = s.execute(
            select(Job.id, Job.lease_token, Job.attempt, Job.stage, Job.lease_owner).where(Job.id == job_id)
        ).one()
        assert lease.requeue_lost(s, lost, 3, utcnow())
        with pytest.raises(CancelNotPossible):
            api_jobs.cancel_job(s, team_id, job_id)
    assert row(sessions, job_id).status == "queued"
    with sessions() as s:  # attempt 2 publishes again (adopting what is there) and keeps the first time
        token2 = lease.claim_job(s, job_id, 60)
        assert token2 and states.begin_publish(s, job_id, token2)
        assert not states.begin_publish(s, job_id, token)  # the dead attempt's token is fenced off
    assert row(sessions, job_id).publishing_at == first.publishing_at


def test_begin_publish_logs_that_the_job_can_no_longer_be_cancelled(sessions, running):
    _, job_id, token = running()
    with sessions() as s:
        assert states.begin_publish(s, job_id, token)
        messages = s.scalars(select(JobEvent.message).where(JobEvent.job_id == job_id)).all()
    assert "publishing began: the job can no longer be cancelled" in messages


def test_cancel_and_begin_publish_racing_have_exactly_one_winner(sessions, running):
    for _ in range(15):
        team_id, job_id, token = running()
        barrier, outcome = threading.Barrier(2), {}

        def cancel():
            with sessions() as s:
                barrier.wait()
                try:
                    outcome["cancel"] = api_jobs.cancel_job(s, team_id, job_id).status
                except CancelNotPossible:
                    outcome["cancel"] = "refused"

        def publish():
            with sessions() as s:
                barrier.wait()
                outcome["publish"] = states.begin_publish(s, job_id, token)

        threads = [threading.Thread(target=cancel), threading.Thread(target=publish)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert outcome in ({"cancel": "cancelling", "publish": False}, {"cancel": "refused", "publish": True}), outcome
        job = row(sessions, job_id)
        assert (job.publishing_at is None) == job.cancel_requested


def test_the_api_answers_409_problem_json(client, auth, sessions):
    with sessions() as s:  # a job of the key's team, claimed and publishing
        job = Job(
            id=new_job_id(),
            team_id=s.scalar(select(Team.id).where(Team.name == "alpha")),
            spec={"model": {"id": "a/b"}},
        )
        s.add(job)
        s.commit()
        job_id = job.id
        assert states.begin_publish(s, job_id, lease.claim_job(s, job_id, 60))
    problem = assert_problem(client.post(f"/v1/jobs/{job_id}/cancel", headers=auth), 409, "job-publishing")
    assert problem["detail"].endswith("is publishing; cancel not possible: it will end succeeded or failed")
    assert client.get(f"/v1/jobs/{job_id}", headers=auth).json()["status"] == "running"
