"""What a job leaves on the worker's disk once it ends: nothing but its published output.

- its scratch directory (NBL_HOME/jobs/<id>: full checkpoints before publishing) is deleted when
  the job ended under this attempt's lease (succeeded, failed, cancelled). An attempt that lost its
  lease leaves it: another worker may own the job now, on this host, in the same directory. Jobs
  ended elsewhere (the reconciler, a cancel after the worker died) are `nbl admin gc`'s (service/outputs/gc.py);
- the statistics cache is cut back to NBL_STATS_CACHE_MAX_BYTES, least recently used first.

Never fails the job: tidying is best effort, and gc catches what is left.
"""

from __future__ import annotations

import logging
import shutil

from nbl import lru
from service.core.paths import scratch_dir
from service.core.settings import Settings

log = logging.getLogger(__name__)


def after_job(settings: Settings, job_id: str, ended: bool) -> None:
    if ended:
        shutil.rmtree(scratch_dir(settings, job_id), ignore_errors=True)
    try:
        for e in lru.evict(settings.stats_dir, settings.stats_cache_max_bytes):
            log.info("statistics cache: evicted %s (%d bytes, least recently used)", e.path.name, e.size)
    except OSError as e:
        log.warning("statistics cache eviction failed (%s); `nbl admin gc` will retry", type(e).__name__)
