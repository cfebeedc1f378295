"""A running job's heartbeat: a thread that renews the job's lease while a long batch runs, since progress
writes alone may be minutes apart. What renews it is the task's (worker/tasks.py: service/jobs/lease.py's
heartbeat, in a session of its own); this only keeps the beat. A renewal that fails (a database blip) is
logged and tried again at the next beat; one that says the lease is gone ends the thread, and the job's next
progress write stops the job.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class Heartbeat(threading.Thread):
    """`renew()` every `every_s` seconds until `stop` is set or it returns False."""

    def __init__(self, job_id: str, renew: Callable[[], bool], every_s: float):
        super().__init__(daemon=True)
        self.job_id, self.renew, self.every_s = job_id, renew, every_s
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(self.every_s):
            try:
                if not self.renew():
                    return  # the lease is gone: the next progress write stops the job
            except Exception as e:  # noqa: BLE001 - a database blip must not end the heartbeat
                log.warning("job %s: heartbeat failed (%s); retrying", self.job_id, type(e).__name__)
