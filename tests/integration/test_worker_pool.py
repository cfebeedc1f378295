"""`nbl worker`'s pool (worker/host/pool.py): solo whenever SQLite holds state in the worker's process (a
fork there can deadlock the child), prefork otherwise; and the soft time limit that stands in for
prefork's under solo."""

from __future__ import annotations

import signal
import time

import pytest
from celery.exceptions import SoftTimeLimitExceeded

from service.core.settings import Settings
from worker.host.pool import SoloTimeLimit, pool_options

PG, REDIS = "postgresql://nbl@db.example/nbl", "redis://broker.example:6379/0"


@pytest.mark.parametrize(
    "database_url,broker_url,pool",
    [
        (None, None, "solo"),  # the embedded default
        (PG, None, "solo"),  # the SQLite broker
        (None, REDIS, "solo"),  # a SQLite database: the reconcile thread holds SQLite state
        (PG, REDIS, "prefork"),  # docker-compose
    ],
)
def test_the_pool_is_solo_whenever_sqlite_holds_state(tmp_path, database_url, broker_url, pool):
    settings = Settings(home=tmp_path, database_url=database_url, broker_url=broker_url)
    assert pool_options(settings)[:2] == ["--pool", pool]


def test_a_solo_task_past_its_soft_time_limit_is_interrupted_and_a_finished_one_is_not():
    previous = signal.getsignal(signal.SIGALRM)
    try:
        limit = SoloTimeLimit(0.2)
        limit.arm()
        with pytest.raises(SoftTimeLimitExceeded, match=r"soft time limit \(0.2 s\) exceeded"):
            time.sleep(30)
        limit.disarm()
        limit.arm()
        limit.disarm()  # the task ended in time
        time.sleep(0.5)  # nothing fires
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
