"""`Client(url, key)`: submit, read, list, cancel, follow and wait for jobs of the nbl-service API.

    from nbl_client import Client
    with Client("https://nbl.example.com", "nbl_...") as c:
        job = c.submit({"model": {"id": "HuggingFaceTB/SmolLM2-135M"}, "compression": {"k": 4}})
        job = c.wait(job.id, timeout=3600)          # a Job; WaitTimeout if it has not ended

Every call retries 429/502/503/504 after the answer's Retry-After and a refused connection for up
to `connect_timeout` seconds (nbl_client.http). `timeout` bounds a call's retries while the API is
busy (and, for `wait`, the job itself). `download` fetches a local output's files, resumable and
checked against their sha256 (nbl_client.download).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from .download import Fetched, fetch_all
from .http import Api, Unavailable
from .models import Event, EventList, Job, JobList, ModelList, OutputFileList, Usage
from .stream import StreamUnavailable, follow

DEFAULT_URL = "http://127.0.0.1:8000"


class MissingKey(ValueError):
    """No API key was given, nor set in NBL_API_KEY."""


class NoOutput(ValueError):
    """The job has no published output (yet): nothing to download. A ValueError, as it always was."""


class WaitTimeout(Unavailable):
    """The job did not end within `wait`'s timeout; `.job` is its last state."""

    def __init__(self, message: str, job: Job):
        super().__init__(message)
        self.job = job


class _Resume(Exception):
    """The stream stopped working after some events: wait() polls on from `after`."""

    def __init__(self, after: int):
        super().__init__(after)
        self.after = after


def _deadline(timeout: float | None) -> float | None:
    return time.monotonic() + timeout if timeout else None


class Client:
    def __init__(
        self,
        url: str | None = None,
        key: str | None = None,
        *,
        connect_timeout: float = 60.0,
        warn: Callable[[str], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ):
        url = url or os.environ.get("NBL_API_URL") or DEFAULT_URL
        key = key or os.environ.get("NBL_API_KEY")
        self._api = Api(url, key or "", connect_timeout=connect_timeout, warn=warn, sleep=sleep)
        if not key:  # the URL is checked first: a bad URL is the caller's usage error, told first
            self.close()
            raise MissingKey("no API key: set NBL_API_KEY or pass --api-key (see `nbl admin create-key`)")
        self.url, self._sleep = self._api.url, sleep

    def close(self) -> None:
        self._api.__exit__()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def submit(
        self, request: Mapping[str, Any], *, idempotency_key: str | None = None, timeout: float | None = 120.0
    ) -> Job:
        """POST /v1/jobs. One Idempotency-Key for all retries (a fresh one by default), so a retried
        request still makes one job."""
        key = idempotency_key or f"nbl-client-{uuid.uuid4().hex}"
        return Job.model_validate(
            self._api.request(
                "POST", "/v1/jobs", json=dict(request), deadline=_deadline(timeout), headers={"Idempotency-Key": key}
            )
        )

    def estimate(self, request: Mapping[str, Any], *, timeout: float | None = 120.0) -> dict:
        """POST /v1/estimates: what the job would take (seconds [low, high], memory, disk, worker class), as JSON."""
        return self._api.request("POST", "/v1/estimates", json=dict(request), deadline=_deadline(timeout))

    def job(self, job_id: str, *, timeout: float | None = None) -> Job:
        return Job.model_validate(self._api.request("GET", f"/v1/jobs/{job_id}", deadline=_deadline(timeout)))

    def jobs(
        self,
        *,
        status: str | Sequence[str] | None = None,
        metadata: Mapping[str, str] | None = None,
        limit: int = 20,
        after: str | None = None,
        timeout: float | None = None,
    ) -> JobList:
        """One page of the team's jobs, newest first; `metadata` filters are ANDed; pass the page's
        `next_cursor` as `after` for the next one."""
        params: list[tuple[str, str | int]] = [("limit", limit)]
        statuses = [status] if isinstance(status, str) else list(status or [])
        params += [("status", s) for s in statuses]
        params += [(f"metadata.{k}", v) for k, v in (metadata or {}).items()]
        if after:
            params.append(("after", after))
        return JobList.model_validate(self._api.request("GET", "/v1/jobs", params=params, deadline=_deadline(timeout)))

    def cancel(self, job_id: str, *, timeout: float | None = None) -> Job:
        """queued -> cancelled, running -> cancelling. ApiError 409 for a finished job (problem type
        .../invalid-job-state) or one that began publishing (.../job-publishing: it ends succeeded or failed)."""
        return Job.model_validate(self._api.request("POST", f"/v1/jobs/{job_id}/cancel", deadline=_deadline(timeout)))

    def events(
        self, job_id: str, *, after: int | None = None, limit: int = 100, timeout: float | None = None
    ) -> EventList:
        """Events newer than `after` (an event id; the page's `last_id` for the next poll), oldest first."""
        return self._events(job_id, after, limit, _deadline(timeout))

    def _events(self, job_id: str, after: int | None, limit: int, deadline: float | None) -> EventList:
        params: dict[str, int] = {"limit": limit} | ({} if after is None else {"after": after})
        return EventList.model_validate(
            self._api.request("GET", f"/v1/jobs/{job_id}/events", params=params, deadline=deadline)
        )

    def wait(
        self,
        job_id: str,
        *,
        timeout: float | None = None,
        interval: float = 1.0,
        max_interval: float = 15.0,
        on_poll: Callable[[Job, EventList], None] | None = None,
        stream: bool = True,
    ) -> Job:
        """Follow the job until it ends and return it: over its event stream (as each event is
        written), or, where the server has none (or `stream=False`), by polling every `interval`
        seconds, growing by half each poll up to `max_interval`. `on_poll(job, new_events)` is
        called at each change. Raises WaitTimeout after `timeout` seconds (None: no limit),
        Unavailable or ApiError."""
        deadline, after = _deadline(timeout), None
        job = Job.model_validate(self._api.request("GET", f"/v1/jobs/{job_id}", deadline=deadline))
        if stream and not job.done:
            try:
                return self._wait_streaming(job, deadline, timeout, on_poll)
            except StreamUnavailable as e:
                self._api.warn_once(f"nbl: event stream unusable ({e}); polling instead")
            except _Resume as r:
                after = r.after
                job = Job.model_validate(self._api.request("GET", f"/v1/jobs/{job_id}", deadline=deadline))
        interval = max(interval, 0.05)
        while True:
            events = self._events(job_id, after, 1000, deadline) if on_poll else EventList(data=[], last_id=after)
            after = events.last_id if events.last_id is not None else after
            if on_poll:
                on_poll(job, events)
            if job.done:
                return job
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(f"timed out after {timeout:g} s; job {job_id} is {job.status}", job)
            self._sleep(interval if deadline is None else min(interval, max(deadline - time.monotonic(), 0)))
            interval = min(interval * 1.5, max_interval)
            job = Job.model_validate(self._api.request("GET", f"/v1/jobs/{job_id}", deadline=deadline))

    def _wait_streaming(
        self, job: Job, deadline: float | None, timeout: float | None, on_poll: Callable[[Job, EventList], None] | None
    ) -> Job:
        """wait() over the stream: on_poll at each event and at each change of the job's figures; the
        whole job read once more at the end. A stream that fails after some events: _Resume (poll on)."""
        seen: list = []
        after = None
        try:
            for kind, item in follow(self._api, job.id, None, deadline, sleep=self._sleep):
                if kind == "event":
                    seen.append(item)
                    after = item.id
                    continue
                if kind == "heartbeat":  # nothing new: on_poll may say the job is still alive
                    if on_poll:
                        on_poll(job, EventList(data=[], last_id=after))
                    continue
                job = job.model_copy(update={k: v for k, v in item.items() if k != "id"})
                if on_poll and (seen or kind == "job"):
                    on_poll(job, EventList(data=seen, last_id=after))
                seen = []
                if kind == "end":
                    break
        except TimeoutError:
            raise WaitTimeout(f"timed out after {timeout:g} s; job {job.id} is {job.status}", job) from None
        except StreamUnavailable as e:
            if after is None:
                raise
            self._api.warn_once(f"nbl: event stream unusable ({e}); polling instead")
            raise _Resume(after) from None
        if seen and on_poll:
            on_poll(job, EventList(data=seen, last_id=after))
        return Job.model_validate(self._api.request("GET", f"/v1/jobs/{job.id}", deadline=deadline))

    def follow(
        self, job_id: str, *, after: int | None = None, timeout: float | None = None, interval: float = 1.0
    ) -> Iterator[Event]:
        """The job's events as they are written (after event id `after`), until the job ends: over
        the event stream, else by polling /events every `interval` s (backing off to 5 s).
        TimeoutError after `timeout` seconds."""
        deadline = _deadline(timeout)
        try:
            for kind, item in follow(self._api, job_id, after, deadline, sleep=self._sleep):
                if kind == "event":
                    after = item.id
                    yield item
            return
        except StreamUnavailable as e:
            self._api.warn_once(f"nbl: event stream unusable ({e}); polling instead")
        interval = max(interval, 0.05)
        while True:
            page = self._events(job_id, after, 1000, deadline)
            yield from page.data
            after = page.last_id if page.last_id is not None else after
            if page.has_more:
                continue
            if self.job(job_id).done:
                yield from self._events(job_id, after, 1000, deadline).data  # written just before it ended
                return
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(job_id)
            self._sleep(interval)
            interval = min(interval * 1.5, 5.0)

    def files(self, job_id: str, k: int, *, timeout: float | None = None) -> OutputFileList:
        """The files of the job's local output k: path, size, sha256 and URL of each."""
        return OutputFileList.model_validate(
            self._api.request("GET", f"/v1/jobs/{job_id}/outputs/{k}/files", deadline=_deadline(timeout))
        )

    def models(self, *, limit: int = 50, after: str | None = None, timeout: float | None = None) -> ModelList:
        """One page of the models the team can run: the server's `local:` models, then the Hub ids of its
        recent jobs, with their shapes; pass the page's `next_cursor` as `after` for the next one."""
        params: list[tuple[str, str | int]] = [("limit", limit)] + ([("after", after)] if after else [])
        return ModelList.model_validate(
            self._api.request("GET", "/v1/models", params=params, deadline=_deadline(timeout))
        )

    def usage(self, *, limit: int = 12, after: str | None = None, timeout: float | None = None) -> Usage:
        """The team's usage by month, newest first (jobs, worker-hours, GPU-hours), and its disk now."""
        params: list[tuple[str, str | int]] = [("limit", limit)] + ([("after", after)] if after else [])
        return Usage.model_validate(self._api.request("GET", "/v1/usage", params=params, deadline=_deadline(timeout)))

    def output_k(self, job_id: str, k: int | None = None, *, timeout: float | None = None) -> int:
        """`k`, or when None the k of the job's only published output: ValueError if it has several
        (choose one), NoOutput (a ValueError) if none."""
        if k is not None:
            return k
        job = self.job(job_id, timeout=timeout)
        ks = sorted({a.k for a in job.artifacts if a.k is not None})
        if not ks:
            raise NoOutput(f"job {job_id} has no published output (it is {job.status})")
        if len(ks) > 1:
            raise ValueError(f"job {job_id} has outputs k={','.join(map(str, ks))}: choose one")
        return ks[0]

    def download(
        self,
        job_id: str,
        k: int | None,
        dest: str | os.PathLike,
        *,
        timeout: float | None = None,
        on_file: Callable[[Fetched], None] | None = None,
    ) -> list[Fetched]:
        """Every file of the job's output k into `dest` (created), each checked against its listed
        sha256 and renamed into place whole; a partial file from an earlier run is resumed. k=None:
        the job's only output (ValueError if it has several, NoOutput if none). Raises ChecksumMismatch,
        ApiError (e.g. 409 output-on-hub: the problem's `hub_url` says where it is), Unavailable, or
        UnsafePath (a listed path that would leave `dest`, or a symlink or file where a folder goes)."""
        listing = self.files(job_id, self.output_k(job_id, k, timeout=timeout), timeout=timeout)
        return fetch_all(self._api, listing.data, Path(dest), _deadline(timeout), on_file)
