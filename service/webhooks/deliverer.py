"""Webhook delivery in a thread of its own, beside the reconcile loop (service.jobs.reconciler.run).

The reconcile loop once delivered webhooks itself, after each pass: a receiver that trickled its
answer held that thread, and no lease was recovered for anyone until the receiver gave up (issue 24).
Now the loop starts this thread, which sends what is due every `interval_s` (at once again when a
pass found a full batch); each POST has a total deadline and a few run at once (delivery.py,
post.py), so this thread is never stuck either, and the recovery pass never waits on it.

Every process that runs a reconcile loop (`nbl serve`, `nbl worker`, `nbl reconcile`) runs one:
the rows' compare-and-set claims give each due event to one deliverer.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from sqlalchemy.orm import Session, sessionmaker

from service.core.settings import Settings
from service.webhooks.delivery import deliver_due

log = logging.getLogger(__name__)
BATCH = 100  # deliveries a pass takes at most; a full pass is followed by another at once


@dataclass
class Deliverer:
    thread: threading.Thread
    stop: threading.Event

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop after the POSTs in flight (each ends by its deadline); a daemon thread, so a process
        that exits does not wait for it beyond `timeout_s`."""
        self.stop.set()
        self.thread.join(timeout_s)


def deliver_once(sessions: sessionmaker[Session], settings: Settings) -> dict[str, int]:
    """One delivery pass; a failure (database down) is logged, and the rows stay due."""
    try:
        with sessions() as s:
            return deliver_due(s, settings, limit=BATCH)
    except Exception as e:  # noqa: BLE001 - the next pass retries
        log.warning("webhook delivery failed (%s: %s)", type(e).__name__, (str(e).splitlines() or [""])[0])
        return {}


def start(sessions: sessionmaker[Session], settings: Settings, interval_s: float) -> Deliverer:
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            counts = deliver_once(sessions, settings)
            if stop.wait(0 if sum(counts.values()) >= BATCH else interval_s):
                return

    thread = threading.Thread(target=loop, name="nbl-webhooks", daemon=True)
    thread.start()
    return Deliverer(thread, stop)
