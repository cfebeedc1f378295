"""Live event streams woken through Redis pub/sub instead of waiting out their poll.

The database stays the truth: a stream (service/jobs/stream.py) reads the job's new events from it.
Redis only says "job X has new events". A session factory with a Publisher attached (`attach`: the
worker's and the API's) publishes, after each commit that added job events (progress, logs, warnings,
the end of a job, a cancel), each such job id on CHANNEL. Each API process runs one Waker: a single
subscription that sets the asyncio.Event of every stream open on that job, so the stream reads at once
(within ~0.1 s of the commit) instead of at its next poll (NBL_STREAM_POLL_S). A stream waits on its
event for at most that poll interval: with Redis away, or a message lost while it restarts, it polls as
before and no event is ever lost, only later. A failed publish mutes publishing for DOWN_S, so a commit
waits on an unreachable Redis (up to TIMEOUT_S) at most once per DOWN_S.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable

from sqlalchemy import event
from sqlalchemy.orm import Session, sessionmaker

from service.core.models import JobEvent
from service.core.settings import Settings

log = logging.getLogger(__name__)
CHANNEL = "nbl:job-events"  # message: a job id
TIMEOUT_S = 0.25  # a publish's connect and reply
DOWN_S = 5.0
RETRY_S = 2.0  # the Waker's wait before subscribing again
_PENDING = "nbl_woken_jobs"  # session.info: job ids with events flushed in the open transaction


class Publisher:
    def __init__(self, url: str):
        import redis

        self.client = redis.Redis.from_url(url, socket_timeout=TIMEOUT_S, socket_connect_timeout=TIMEOUT_S)
        self.muted_until = 0.0

    def publish(self, job_ids: Iterable[str]) -> bool:
        """Whether Redis took them (False: muted, or it failed; the streams poll)."""
        import redis

        if time.monotonic() < self.muted_until:
            return False
        try:
            pipe = self.client.pipeline(transaction=False)
            for job_id in sorted(set(job_ids)):
                pipe.publish(CHANNEL, job_id)
            pipe.execute()
            return True
        except (redis.RedisError, OSError) as e:
            self.muted_until = time.monotonic() + DOWN_S
            log.warning(
                "event wake-up not published (%s); streams poll; trying again in %g s", type(e).__name__, DOWN_S
            )
            return False


def publisher_for(settings: Settings) -> Publisher | None:
    url = settings.wakeup_url
    return Publisher(url) if url else None


def touch(session: Session, job_id: str) -> None:
    """Publish `job_id` after this session's commit although it added no event (a progress update that
    changes only the job's row: the streams' `event: job`)."""
    session.info.setdefault(_PENDING, set()).add(job_id)


def attach(factory: sessionmaker[Session], publisher: Publisher | None) -> sessionmaker[Session]:
    """`factory`, whose sessions publish the jobs whose events they committed (nothing without a publisher)."""
    if publisher is None:
        return factory

    @event.listens_for(factory, "after_flush")
    def _flushed(session: Session, _ctx) -> None:  # session.new: what this flush inserted
        ids = {o.job_id for o in session.new if isinstance(o, JobEvent)}
        if ids:
            session.info.setdefault(_PENDING, set()).update(ids)

    @event.listens_for(factory, "after_commit")
    def _committed(session: Session) -> None:
        ids = session.info.pop(_PENDING, None)
        if ids:
            publisher.publish(ids)

    @event.listens_for(factory, "after_rollback")
    def _rolled_back(session: Session) -> None:
        session.info.pop(_PENDING, None)

    return factory


class Waker:
    """The API process's one subscription to CHANNEL; `watch(job_id)` gives a stream its Event."""

    def __init__(self, url: str):
        self.url = url
        self.waiting: dict[str, set[asyncio.Event]] = {}
        self.subscribed = False

    def watch(self, job_id: str) -> asyncio.Event:
        wake = asyncio.Event()
        self.waiting.setdefault(job_id, set()).add(wake)
        return wake

    def unwatch(self, job_id: str, wake: asyncio.Event) -> None:
        held = self.waiting.get(job_id)
        if held is not None:
            held.discard(wake)
            if not held:
                del self.waiting[job_id]

    def _wake(self, job_ids: Iterable[str]) -> None:
        for job_id in job_ids:
            for wake in self.waiting.get(job_id, ()):
                wake.set()

    async def run(self) -> None:
        """Subscribe, and again after RETRY_S whenever Redis goes away; every stream is woken on each
        (re)subscription, for what was published while it was not listening. Runs until cancelled."""
        import redis.asyncio as aredis

        while True:
            client = aredis.Redis.from_url(self.url, socket_connect_timeout=1.0)
            try:
                async with client.pubsub() as sub:
                    await sub.subscribe(CHANNEL)
                    self.subscribed = True
                    self._wake(list(self.waiting))
                    async for message in sub.listen():
                        if message.get("type") == "message":
                            self._wake([message["data"].decode()])
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - Redis away: the streams poll meanwhile
                if self.subscribed:
                    log.warning("event wake-up subscription lost (%s); streams poll", type(e).__name__)
            finally:
                self.subscribed = False
                await client.aclose()
            await asyncio.sleep(RETRY_S)


async def nap(wake: asyncio.Event | None, seconds: float) -> None:
    """Until `wake` is set or `seconds` pass (a stream's wait between reads)."""
    if wake is None:
        await asyncio.sleep(seconds)
        return
    try:
        await asyncio.wait_for(wake.wait(), seconds)
    except TimeoutError:
        pass
