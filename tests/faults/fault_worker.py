"""`nbl worker` (prefork, one child per job) with faults injected by monkeypatching, for the fault
tests only: production code has no fault hooks.

A job chooses its fault with its request's metadata {"fault": ...}; each acts when the job reports
calibration progress:

  kill-once     SIGKILL the pool child mid-calibration, on the first attempt only (marker file)
  kill-always   SIGKILL the pool child mid-calibration, on every attempt (a poison job)
  hold          once calibration is recorded as the stage, write FAULT_DIR/<job>.held (the child's
                pid) and wait for FAULT_DIR/<job>.go (the job stays in calibration meanwhile)
  hold-before-publish   the same hold once the publish stage is recorded, before publishing begins
  hold-publishing       the same hold just after publishing began (DbSink.begin_publish), before any output

Every pipeline run and every recorded publish is appended to FAULT_DIR/runs.log and publish.log
(one short line per write, O_APPEND), so a test counts them across processes and restarts.
NBL_FAULT_TRANSPORT_OPTIONS (JSON) overrides broker transport options, e.g. a short Redis
visibility timeout that the service's Settings would refuse. NBL_FAULT_SKIP_LOADCHECK=1 skips the
pipeline's load check (each output reloaded in a fresh interpreter), which these tests do not study.

    NBL_FAULT_DIR=... python tests/faults/fault_worker.py [nbl worker options]
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FAULT_DIR = Path(os.environ["NBL_FAULT_DIR"])
HOLD_LIMIT_S = 120


def note(name: str, line: str) -> None:
    """One line `JOB PID [WHAT] @UNIXTIME` appended to FAULT_DIR/name."""
    with open(FAULT_DIR / name, "a") as f:
        f.write(f"{line} @{time.time():.3f}\n")


def install() -> None:
    from service.jobs import store
    from worker import tasks

    faults: dict[str, str | None] = {}
    run, progress, output = tasks.run, tasks.DbSink.progress, tasks.DbSink.output
    begin_publish = tasks.DbSink.begin_publish

    def hold(job_id: str) -> None:
        marker = FAULT_DIR / job_id
        if marker.with_suffix(".go").exists():
            return
        marker.with_suffix(".held").write_text(str(os.getpid()))
        deadline = time.monotonic() + HOLD_LIMIT_S
        while not marker.with_suffix(".go").exists() and time.monotonic() < deadline:
            time.sleep(0.05)

    def faulty_run(recipe, sink, *args, **kwargs):
        job_id = sink.job_id
        spec = tasks.db(store.job_spec, job_id)  # the request as stored (the recipe quotes no metadata)
        faults[job_id] = spec.metadata.get("fault") if spec is not None else None
        note("runs.log", f"{job_id} {os.getpid()} start")
        result = run(recipe, sink, *args, **kwargs)
        note("runs.log", f"{job_id} {os.getpid()} end")
        return result

    def faulty_progress(self, stage, fraction, message):
        fault, marker = faults.get(self.job_id), FAULT_DIR / self.job_id
        if stage == "calibrate" and 0 < fraction < 1 and fault in ("kill-once", "kill-always"):
            if fault == "kill-always" or not marker.with_suffix(".killed").exists():
                marker.with_suffix(".killed").write_text(str(os.getpid()))
                note("kills.log", f"{self.job_id} {os.getpid()}")
                os.kill(os.getpid(), signal.SIGKILL)
        progress(self, stage, fraction, message)  # the row says "calibrate" while a job is held
        if (stage, fault) in (("calibrate", "hold"), ("publish", "hold-before-publish")):
            hold(self.job_id)

    def held_begin_publish(self):
        begin_publish(self)
        if faults.get(self.job_id) == "hold-publishing":
            hold(self.job_id)

    def counted_output(self, k, *args, **kwargs):
        note("publish.log", f"{self.job_id} {os.getpid()} k{k}")
        return output(self, k, *args, **kwargs)

    tasks.run, tasks.DbSink.progress, tasks.DbSink.output = faulty_run, faulty_progress, counted_output
    tasks.DbSink.begin_publish = held_begin_publish
    if os.environ.get("NBL_FAULT_SKIP_LOADCHECK") == "1":  # a fresh interpreter per output: 5 s a job here
        from worker import pipeline

        pipeline.check = lambda outputs, refs, sink, timeout_s, devices=None: None
    extra = json.loads(os.environ.get("NBL_FAULT_TRANSPORT_OPTIONS") or "{}")
    tasks.celery.conf.broker_transport_options = {**tasks.celery.conf.broker_transport_options, **extra}


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    install()
    from cli.main import main

    sys.exit(main(["worker", *sys.argv[1:]]))
