"""`nbl wait JOB` (and `nbl submit --wait`): follow a job through nbl_client's Client.wait.

On stderr, one line per stage (a line when the status or the stage changes, with the job's progress and
the ETA), every warning, and a heartbeat when nothing was said for QUIET_HEARTBEAT_S, so a CI log shows the
job is alive in a few lines (a 5-minute job: about ten, not ninety). `--verbose`: a line whenever something
changes (the job's progress to 0.1 %, the stage's to 1 %, or a stage, warning or status event) and a
heartbeat after HEARTBEAT_S. The job itself (and its metrics table) goes to stdout.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from cli.client import junit as junit_report
from cli.client.format import eta, event_line, job_lines, metrics_table, readable
from cli.client.result_table import result_lines
from nbl_client import ApiError, Client, Unavailable

HEARTBEAT_S = 60.0
QUIET_HEARTBEAT_S = 300.0
EXIT = {"succeeded": 0, "failed": 1, "cancelled": 2}
EXIT_TIMEOUT, EXIT_API, EXIT_QUALITY = 3, 4, 5
SHOWN_EVENTS = ("stage", "warning", "status")  # with --verbose; else warnings only (the stage line says the rest)


def failed(error: Exception) -> int:
    """An API failure said in one line; its exit code: 3 when the API was unreachable or busy (or
    the wait ran out), 4 when it refused (ApiError, or no API key to send)."""
    print(f"nbl: {error}", file=sys.stderr)
    return EXIT_TIMEOUT if isinstance(error, Unavailable) else EXIT_API


class WaitPrinter:
    """Client.wait's on_poll: prints what changed since the last poll, else a heartbeat."""

    def __init__(
        self,
        out: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
        heartbeat_s: float | None = None,
        verbose: bool = False,
    ):
        self.out, self.clock, self.verbose = out, clock, verbose
        self.heartbeat_s = heartbeat_s or (HEARTBEAT_S if verbose else QUIET_HEARTBEAT_S)
        self.state: tuple | None = None
        self.last_line = clock()
        self.changed_at = self.last_line

    def _say(self, line: str) -> None:
        print(line, file=self.out or sys.stderr, flush=True)
        self.last_line = self.clock()

    def __call__(self, job, events) -> None:
        now = self.clock()
        for ev in events.data:
            if ev.kind in (SHOWN_EVENTS if self.verbose else ("warning",)):
                self._say(event_line(ev.model_dump(mode="json")))
        stage_progress = getattr(job, "stage_progress", None)  # None from a server before migration 0008
        state = (job.status, job.stage)
        if self.verbose:
            state += (round(job.progress * 1000), round((stage_progress or 0) * 100))
        line = (
            f"{job.status:<10} {job.stage or '':<10} {job.progress:6.1%}"
            + (f"  (stage {stage_progress:4.0%})" if self.verbose and job.stage and stage_progress is not None else "")
            + eta(job.eta_seconds)
        )
        if state != self.state:  # the ETA alone moves at every poll: it rides on the lines that change
            self.state, self.changed_at = state, now
            self._say(line)
        elif now - self.last_line >= self.heartbeat_s:
            self._say(f"{line}  (still; no change for {readable(int(now - self.changed_at))} s)")


def exit_code(job) -> int:
    """0 succeeded, 1 failed, 2 cancelled; 5 failed because no output passed its quality gates."""
    if job.status == "failed" and job.error is not None and job.error.type == "quality":
        return EXIT_QUALITY
    return EXIT[job.status]


def print_result(job, as_json: bool) -> None:
    data = job.model_dump(mode="json")
    if as_json:
        print(json.dumps(data, indent=2))
        return
    for line in job_lines(data):
        print(line)
    # The typed result (base, each output, delta, relative); a server older than `result`: its flat metrics.
    table = result_lines(data["result"]) if data.get("result") is not None else metrics_table(data.get("metrics"))
    if table:
        print()
        for line in table:
            print(line)


def wait_for(
    client: Client,
    job_id: str,
    *,
    timeout: float,
    interval: float,
    quiet: bool,
    as_json: bool,
    junit: Path | None = None,
    verbose: bool = False,
) -> int:
    """Waits and prints; the exit code by the job's end (0/1/2, 5 quality), 3 on a timeout, 4 if refused. `junit`:
    also write the JUnit XML report there (cli/client/junit.py), whatever the exit code."""
    try:
        job = client.wait(
            job_id, timeout=timeout or None, interval=interval, on_poll=None if quiet else WaitPrinter(verbose=verbose)
        )
    except (Unavailable, ApiError) as e:  # WaitTimeout is an Unavailable
        if junit is not None:
            junit_report.write(junit, junit_report.unreachable_xml(job_id, str(e)))
        return failed(e)
    if junit is not None:
        junit_report.write(junit, junit_report.junit_xml(job.model_dump(mode="json")))
    print_result(job, as_json)
    return exit_code(job)
