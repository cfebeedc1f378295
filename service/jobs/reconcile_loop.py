"""The reconcile loop in a thread, so that `nbl worker` and `nbl serve` recover lost jobs on their own.

A worker killed whole (parent and pool child, or the solo worker of the embedded default) leaves its
job `running` under a lease nobody renews, and the embedded SQLite broker never re-delivers a message
that was taken. Only a reconcile pass queues that job again (service/jobs/reconciler.py). So every
`nbl worker` and `nbl serve` runs the loop: one pass as it starts, then one every
NBL_RECONCILE_INTERVAL seconds; a restarted worker alone recovers what its predecessor lost, with no
third process to forget. `nbl reconcile` remains for deployments that want it apart.

The thread lives in the process that starts it: the worker's main process, never the child that
runs a job (under prefork, a child is forked from that process without its threads). It has its own
engine and Celery app: nothing it holds is used by the job's code. Copies are safe together (see
reconciler.py: compare-and-sets, and one pass at a time on Postgres). The loop starts one more
thread, the webhook deliverer (service/webhooks/deliverer.py), so that no receiver delays a pass.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from service.core.settings import Settings

log = logging.getLogger(__name__)


@dataclass
class Background:
    thread: threading.Thread
    stop: threading.Event

    def close(self, timeout_s: float = 10.0) -> None:
        self.stop.set()
        self.thread.join(timeout_s)


def start(settings: Settings, who: str, interval_s: float | None = None) -> Background:
    """Start the loop in a daemon thread (it must not keep a dying process alive); `who` names it in
    the log."""
    from service.jobs import reconciler

    interval = settings.reconcile_interval_s if interval_s is None else interval_s
    stop = threading.Event()

    def loop() -> None:
        try:
            reconciler.run(settings, interval_s=interval, stop=stop)
        except Exception:  # noqa: BLE001 - run() survives failed passes; this is a bug, say so loudly
            log.exception("%s: the reconcile loop stopped", who)

    thread = threading.Thread(target=loop, name=f"nbl-reconcile-{who}", daemon=True)
    thread.start()
    log.info("%s: reconcile loop started (a pass now, then every %g s)", who, interval)
    return Background(thread, stop)
