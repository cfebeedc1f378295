"""A Hypothesis state machine over the job's ownership protocol, driving the real service.jobs.store,
service.jobs.service.cancel_job and service.jobs.reconciler functions against a migrated SQLite database. The
broker is a list (the edge of the world); workers are plain records of (job, lease token).

Steps: submit, deliver a message (claim), a duplicate delivery, progress and heartbeat (fenced),
publish (fenced, to a destination that, like LocalDir and the Hub, adopts an output already there),
finish, kill a worker (its lease stays behind), lease expiry (the clock jumps), cancel, reconcile.

Invariants after every step: terminal states never change; at most one success and one publish per
job; only the current lease holder ever publishes or succeeds; attempts never exceed NBL_MAX_ATTEMPTS; a
cancelled job published nothing (once publishing began, a cancel is refused, even after a requeue).
At the end, with no more faults, every job reaches a terminal state.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test
from sqlalchemy import delete, func, select, update

from service.core.db import make_engine, make_sessionmaker
from service.core.errors import InvalidJobState
from service.core.models import TERMINAL, Artifact, Job, JobEvent, Team, new_job_id, utcnow
from service.core.settings import Settings
from service.jobs import lease, states, store
from service.jobs import service as api_jobs
from service.jobs.reconciler import reconcile_once

MAX_ATTEMPTS = 2


class Broker:
    """What service.jobs.queue needs of a Celery app: send_task."""

    def __init__(self):
        self.messages: list[str] = []

    def send_task(self, name: str, args: list) -> None:
        self.messages.append(args[0])


def machine(sessions, service_settings):
    class Ownership(RuleBasedStateMachine):
        def __init__(self):
            super().__init__()
            with sessions() as s:
                for table in (Artifact, JobEvent, Job, Team):
                    s.execute(delete(table))
                self.team = Team(name="sm")
                s.add(self.team)
                s.commit()
            self.broker = Broker()
            self.jobs: list[str] = []
            self.workers: dict[int, tuple[str, str, bool]] = {}  # id -> (job, token, published)
            self.next_worker = 0
            self.terminal: dict[str, str] = {}
            self.destination: set[str] = set()  # jobs whose output is published
            self.publishes: dict[str, int] = {}
            self.successes: dict[str, int] = {}

        # --- the world -----------------------------------------------------------------------

        @rule()
        def submit(self):
            with sessions() as s:
                job = Job(id=new_job_id(), team_id=self.team.id, spec={"model": {"id": "a/b"}})
                s.add(job)
                s.commit()
            self.jobs.append(job.id)
            self.broker.messages.append(job.id)  # the API's enqueue after the commit

        def _claim(self, job_id: str) -> None:
            with sessions() as s:
                token = lease.claim_job(s, job_id, 60, max_attempts=MAX_ATTEMPTS, owner=f"w{self.next_worker}")
            if token is not None:
                self.workers[self.next_worker] = (job_id, token, False)
                self.next_worker += 1

        @precondition(lambda self: self.broker.messages)
        @rule(data=st.data())
        def deliver(self, data):
            i = data.draw(st.integers(0, len(self.broker.messages) - 1))
            self._claim(self.broker.messages.pop(i))

        @precondition(lambda self: self.jobs)
        @rule(data=st.data())
        def duplicate_delivery(self, data):
            self._claim(data.draw(st.sampled_from(self.jobs)))

        @precondition(lambda self: self.jobs)
        @rule(data=st.data())
        def expire_lease(self, data):
            with sessions() as s:
                s.execute(
                    update(Job)
                    .where(Job.id == data.draw(st.sampled_from(self.jobs)), Job.lease_expires_at.is_not(None))
                    .values(lease_expires_at=utcnow() - timedelta(seconds=1))
                )
                s.commit()

        @precondition(lambda self: self.jobs)
        @rule(data=st.data())
        def cancel(self, data):
            with sessions() as s:
                try:
                    api_jobs.cancel_job(s, self.team.id, data.draw(st.sampled_from(self.jobs)))
                except InvalidJobState:
                    pass

        @rule()
        def reconcile(self):
            with sessions() as s:
                reconcile_once(s, self.broker, service_settings)

        # --- a worker ------------------------------------------------------------------------

        def _worker(self, data) -> int:
            return data.draw(st.sampled_from(sorted(self.workers)))

        @precondition(lambda self: self.workers)
        @rule(data=st.data())
        def kill(self, data):
            del self.workers[self._worker(data)]

        @precondition(lambda self: self.workers)
        @rule(data=st.data())
        def heartbeat(self, data):
            w = self._worker(data)
            job_id, token, _ = self.workers[w]
            with sessions() as s:
                if not lease.heartbeat(s, job_id, token):
                    del self.workers[w]  # the lease is gone: the next progress write stops it

        @precondition(lambda self: self.workers)
        @rule(data=st.data())
        def progress_or_publish(self, data):
            self.step(self._worker(data))

        @precondition(lambda self: self.workers)
        @rule(data=st.data())
        def finish(self, data):
            w = self._worker(data)
            job_id, token, published = self.workers.pop(w)
            if not published:
                return
            with sessions() as s:
                holder = s.scalar(select(Job.lease_token).where(Job.id == job_id))
                if states.finish(s, job_id, token, "succeeded"):
                    assert holder == token, "a worker without the lease succeeded"
                    self.successes[job_id] = self.successes.get(job_id, 0) + 1

        def step(self, w: int) -> None:
            """One checkpoint of the pipeline (as worker.tasks.DbSink.progress), then publish once, after
            begin_publish (as DbSink.begin_publish: a cancel that came first stops the job)."""
            job_id, token, published = self.workers[w]
            with sessions() as s:
                if not store.set_progress(s, job_id, "publish", 0.5, lease_token=token):
                    del self.workers[w]  # lease lost
                    return
                if states.cancel_requested(s, job_id) or not (published or states.begin_publish(s, job_id, token)):
                    states.finish(s, job_id, token, "cancelled")
                    del self.workers[w]
                    return
                if not published:
                    assert s.scalar(select(Job.lease_token).where(Job.id == job_id)) == token
                    if job_id not in self.destination:  # else adopted: nothing is written again
                        self.destination.add(job_id)
                        self.publishes[job_id] = self.publishes.get(job_id, 0) + 1
                    store.save_artifact(s, job_id, 1, "local_dir", f"/published/{job_id}", lease_token=token)
                    self.workers[w] = (job_id, token, True)

        # --- invariants ----------------------------------------------------------------------

        @invariant()
        def terminal_states_never_change(self):
            with sessions() as s:
                rows = s.execute(select(Job.id, Job.status, Job.attempt)).all()
                succeeded_events = dict(
                    s.execute(
                        select(JobEvent.job_id, func.count())
                        .where(JobEvent.message == "succeeded")
                        .group_by(JobEvent.job_id)
                    ).all()
                )
                artifacts = dict(s.execute(select(Artifact.job_id, func.count()).group_by(Artifact.job_id)).all())
                s.commit()
            for job_id, status, attempt in rows:
                if job_id in self.terminal:
                    assert status == self.terminal[job_id], f"{job_id}: {self.terminal[job_id]} -> {status}"
                elif status in TERMINAL:
                    self.terminal[job_id] = status
                assert attempt <= MAX_ATTEMPTS
                assert succeeded_events.get(job_id, 0) <= 1 and self.successes.get(job_id, 0) <= 1
                assert self.publishes.get(job_id, 0) <= 1 and artifacts.get(job_id, 0) <= 1

        @invariant()
        def a_cancelled_job_published_nothing(self):
            with sessions() as s:
                cancelled = set(s.scalars(select(Job.id).where(Job.status == "cancelled")))
                recorded = set(s.scalars(select(Artifact.job_id)))
                s.commit()
            assert not cancelled & (self.destination | recorded), "a cancelled job has a published output"

        def teardown(self):
            """No more faults: finish live workers, then expire, reconcile and deliver until quiet."""
            for _ in range(4 * MAX_ATTEMPTS + 4):
                for w in sorted(self.workers):
                    while w in self.workers and not self.workers[w][2]:
                        self.step(w)
                    if w in self.workers:
                        with sessions() as s:
                            states.finish(s, self.workers[w][0], self.workers[w][1], "succeeded")
                        del self.workers[w]
                with sessions() as s:
                    s.execute(
                        update(Job)
                        .where(Job.lease_expires_at.is_not(None))
                        .values(lease_expires_at=utcnow() - timedelta(seconds=1))
                    )
                    s.commit()
                self.reconcile()
                while self.broker.messages:
                    self._claim(self.broker.messages.pop(0))
            self.terminal_states_never_change()
            with sessions() as s:
                stuck = s.execute(select(Job.id, Job.status).where(Job.status.not_in(TERMINAL))).all()
            assert not stuck, f"jobs never finished: {stuck}"

    return Ownership


def test_ownership_state_machine(sqlite_clean_url, tmp_path):
    service_settings = Settings(
        home=tmp_path / "home", database_url=sqlite_clean_url, max_attempts=MAX_ATTEMPTS, redispatch_after_s=600
    )
    engine = make_engine(service_settings)
    try:
        run_state_machine_as_test(
            machine(make_sessionmaker(engine), service_settings),
            settings=settings(
                max_examples=150, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
            ),
        )
    finally:
        engine.dispose()


@pytest.mark.parametrize("message, transient", [("database is locked", True), ("no such table: jobs", False)])
def test_sqlite_errors_that_are_an_outage(message, transient):
    import sqlite3

    from sqlalchemy.exc import OperationalError

    from service.core.dbretry import is_transient

    assert is_transient(OperationalError("SELECT 1", {}, sqlite3.OperationalError(message))) is transient
