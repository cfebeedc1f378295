"""Why a job failed, by cause: the one table that classes a failure `user`, `system` or `timeout`, says
whether it is worth another try, and words what the job row says.

    the job ran out of time (SoftTimeLimitExceeded)            timeout
    no output passed its quality gates (QualityFailure)        quality  (the message names the failed checks)
    publishing: the Hub refused the token (HubRefused)         user     (its own message names the token)
    publishing: the Hub failed (HubUnavailable)                system   retried
    publishing: the local disk is full (NoSpace)               system   (its own message: one line, no path)
    the input model: no Hub to talk to (HubUnreachable)        system   retried  (their own messages:
    the input model: gated or missing (HubModelError)          user     engine/loading/hub_access.py)
    anywhere in the cause chain, the first HTTP answer or transport failure decides:
        401, 403, a gated repo                                 user     "gated or private: set a token with access"
        404, repo / revision / file not found                  user
        429, 5xx                                               system   retried
        timeouts, refused or dropped connections               system   retried
    a programming error (KeyError, TypeError, AttributeError)  system   its traceback is logged
    the input cannot work (ValueError: ModelError, DataError)  user
    anything else                                              system

Libraries wrap the Hub's answer: `datasets` turns a Hub 500 into a FileNotFoundError (raised `from
None`, so only __context__ keeps it) and our loaders turn it into a ModelError or DataError. So the chain
(__cause__, else __context__) is walked for the answer that decides, instead of trusting the outer
exception's type: a Hub 500 while fetching a dataset is `system`, a gated model is not "not found".

`retrying` runs a Hub-facing step again, with exponential backoff, while its failure is retryable.

Publishing's own failures are defined here, below worker/publish, which raises them and retries with
RetryPolicy: the table names them without importing publish.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable, TypeVar

from .engine.loading.http_causes import GATED, GATED_ERRORS, NOT_FOUND, TRANSPORT, chain, status_of

log = logging.getLogger(__name__)
T = TypeVar("T")

PROGRAMMING_ERRORS = (
    KeyError,
    TypeError,
    AttributeError,
    NameError,
    IndexError,
    AssertionError,
    ZeroDivisionError,
    NotImplementedError,
    RecursionError,
    UnboundLocalError,
)


class HubRefused(ValueError):
    """The Hub refused: a bad or read-only token, or a repo the token cannot write (a user error;
    worker/publish/hub.py)."""


class HubUnavailable(RuntimeError):
    """The Hub failed or could not be reached (a system error; worker/publish/hub.py)."""


class NoSpace(RuntimeError):
    """The publish directory's disk (or its quota) is full: a `system` failure, not retried
    (worker/publish/no_space.py)."""


@dataclass(frozen=True)
class Failure:
    type: str  # user | system | timeout | quality
    message: str
    retry: bool = False
    traceback: bool = False  # a bug: log where it happened


def _http(exc: BaseException, outer: str) -> Failure | None:
    """What an HTTP answer or transport failure says, or None when `exc` is neither."""
    status = status_of(exc)
    if isinstance(exc, GATED_ERRORS) or status in (401, 403):
        repo = getattr(exc, "repo_id", None)
        return Failure("user", GATED + (f" ({repo})" if repo else ""))
    if isinstance(exc, NOT_FOUND) or status == 404:
        return Failure("user", outer)
    if status is not None and (status == 429 or status >= 500):
        return Failure("system", outer, retry=True)
    if isinstance(exc, TRANSPORT):
        return Failure("system", outer, retry=True)
    return None


def classify(exc: BaseException) -> Failure:
    """The row of the table above that `exc` falls in."""
    from celery.exceptions import SoftTimeLimitExceeded

    from .engine.loading.hub_access import HubModelError, HubUnreachable
    from .gates import QualityFailure

    message = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, SoftTimeLimitExceeded):
        return Failure("timeout", message)
    if isinstance(exc, QualityFailure):
        return Failure("quality", str(exc))
    if isinstance(exc, HubRefused):
        return Failure("user", message)
    if isinstance(exc, HubUnavailable):
        return Failure("system", message, retry=True)
    if isinstance(exc, NoSpace):
        return Failure("system", str(exc))
    hub = next((c for c in chain(exc) if isinstance(c, (HubUnreachable, HubModelError))), None)
    if hub is not None:  # already worded for the job row
        return Failure("user", str(hub)) if isinstance(hub, HubModelError) else Failure("system", str(hub), retry=True)
    for cause in chain(exc):
        found = _http(cause, message)
        if found is not None:
            return found
    if isinstance(exc, PROGRAMMING_ERRORS):
        return Failure("system", message, traceback=True)
    if isinstance(exc, ValueError):
        return Failure("user", message)
    return Failure("system", message, traceback=True)


def retrying(
    fn: Callable[[], T],
    what: str,
    *,
    attempts: int = 3,
    backoff_s: float = 5.0,
    sleep: Callable[[float], None] = time.sleep,
    on_retry: Callable[[str], None] | None = None,
) -> T:
    """fn(), tried up to `attempts` times while it fails retryably (Hub 5xx, timeouts, lost connections),
    waiting backoff_s, 2 backoff_s, ... between tries; the last failure is raised as it came. `on_retry`
    hears why, before each wait (the job's event log: a wait is never silent)."""
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except Exception as e:
            failure = classify(e)
            if attempt == attempts or not failure.retry:
                raise
            wait = backoff_s * 2 ** (attempt - 1)
            log.warning(
                "%s failed (%s, attempt %d of %d); retrying in %.3g s", what, type(e).__name__, attempt, attempts, wait
            )
            if on_retry is not None:
                on_retry(
                    f"{what} failed: {failure.message}; trying again in {wait:.3g} s "
                    f"(attempt {attempt + 1} of {attempts})"
                )
            sleep(wait)
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class RetryPolicy:
    """How the pipeline retries its Hub-facing steps (the worker's: NBL_HUB_ATTEMPTS, NBL_HUB_BACKOFF)."""

    attempts: int = 4
    backoff_s: float = 5.0

    def run(self, fn: Callable[[], T], what: str, on_retry: Callable[[str], None] | None = None) -> T:
        return retrying(fn, what, attempts=self.attempts, backoff_s=self.backoff_s, on_retry=on_retry)
