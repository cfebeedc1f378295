"""Reaching the Hugging Face Hub for an input model: a bounded first question, and each way of failing
turned into an error that says what happened and what to do.

Why ask first: huggingface_hub retries a file it finds neither on the Hub nor in its cache five more
times (1, 2, 4, 8 and 8 s apart, each try allowed 60 s), and the load stage's own retries
(NBL_HUB_ATTEMPTS) run all that again: with no network a job sat at "load 0 %" for two minutes (a route
that drops packets: far longer), then failed with huggingface_hub's LocalEntryNotFoundError. `reach`
sends one request to the endpoint, no retries, within HF_HUB_ETAG_TIMEOUT (10 s by default): no answer
is HubUnreachable at once, and the job's retry policy alone says how often to ask again. Any HTTP answer
will do: what the Hub says about the model is the download's to find out.

`translated` reads a failure of the Hub calls inside it (the first HTTP answer or transport failure in
the cause chain decides, as worker/errors.py reads it):

    no answer: refused, DNS, timeout, dropped   HubUnreachable  system, retried
    408, 429, 5xx                               HubUnreachable  system, retried
    gated, 401, 403                             HubModelError   user  (starts with GATED)
    404: no such repo, revision or file         HubModelError   user
    any other 4xx                               HubModelError   user
    HF_HUB_OFFLINE and not in the cache         HubModelError   user  (nothing will be downloaded)
"""

from __future__ import annotations

from contextlib import contextmanager
from urllib.parse import urlsplit

from worker.engine.loading.http_causes import GATED, GATED_ERRORS, TRANSPORT, chain, status_of
from worker.engine.loading.model_rules import ModelError


class HubUnreachable(ConnectionError):
    """The Hub did not answer, or answered that it is unwell (408, 429, 5xx): a system error, worth a retry."""


class HubModelError(ModelError):
    """The Hub answered about this model: gated, private or missing (a user error)."""


def endpoint() -> str:
    from huggingface_hub import constants

    return constants.ENDPOINT.rstrip("/")


def offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def contacting(repo_id: str, revision: str | None) -> str:
    """What the load stage says before its first request to the Hub."""
    if offline():
        return f"reading {repo_id}@{revision or 'main'} from the Hugging Face cache (HF_HUB_OFFLINE is set)"
    return f"contacting the Hugging Face Hub at {endpoint()} for {repo_id}@{revision or 'main'}"


def reach(repo_id: str, revision: str | None) -> None:
    """Raise HubUnreachable unless the endpoint answers one request within HF_HUB_ETAG_TIMEOUT; offline
    mode asks nothing. A name the Hub cannot have (a path that is not there) is a ModelError first."""
    from huggingface_hub import constants
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import get_session, validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError:
        raise ModelError(f"{repo_id}: not a model directory, a .gguf file or a Hub repo id") from None
    if offline():
        return
    try:
        get_session().head(endpoint() + "/", timeout=constants.HF_HUB_ETAG_TIMEOUT, follow_redirects=False)
    except TRANSPORT as e:
        raise unreachable(repo_id, revision, e) from e


def unreachable(repo_id: str, revision: str | None, cause: BaseException) -> HubUnreachable:
    innermost = chain(cause)[-1]
    return HubUnreachable(
        f"cannot reach the Hugging Face Hub at {endpoint()} to download {repo_id}@{revision or 'main'} "
        f"({str(innermost) or type(innermost).__name__}); to work without the Hub, set HF_HUB_OFFLINE=1 on the "
        "worker with the model in its Hugging Face cache, or use a model on this machine (local:NAME in a job, "
        "a path with nbl compress)"
    )


def meaning(exc: BaseException, repo_id: str, revision: str | None) -> Exception | None:
    """HubUnreachable or HubModelError for a failure of the Hub calls for this model; None when `exc` is
    not about the Hub (our own checks' ModelError, a bug)."""
    from huggingface_hub.errors import (
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    where, ep = f"{repo_id}@{revision or 'main'}", endpoint()
    causes = chain(exc)
    if offline() and any(isinstance(c, (LocalEntryNotFoundError, OfflineModeIsEnabled)) for c in causes):
        return HubModelError(
            f"{where} is not in this machine's Hugging Face cache, and HF_HUB_OFFLINE is set: "
            "nothing is downloaded; use a cached model, or a model on this machine"
        )
    for cause in causes:
        status = status_of(cause)
        if isinstance(cause, GATED_ERRORS) or status in (401, 403):
            also = "; a model that does not exist answers 401 too" if status == 401 else ""
            return HubModelError(
                f"{GATED} ({repo_id}): the Hugging Face Hub at {ep} answered {status} for {where}{also}"
            )
        if isinstance(cause, RevisionNotFoundError):
            return HubModelError(f"{repo_id}: no revision {revision or 'main'!r} on the Hugging Face Hub at {ep}")
        if isinstance(cause, RepositoryNotFoundError):
            return HubModelError(f"{repo_id}: no such model on the Hugging Face Hub at {ep}")
        if status == 404:
            url = getattr(getattr(cause, "response", None), "url", None)
            what = urlsplit(str(url)).path if url is not None else "a file of the model"
            return HubModelError(f"{where}: the Hugging Face Hub at {ep} has no {what} (404)")
        if status in (408, 429) or (status or 0) >= 500:
            return HubUnreachable(
                f"the Hugging Face Hub at {ep} answered {status} while downloading {where}; try again later"
            )
        if status is not None and 400 <= status < 500:
            return HubModelError(f"{where}: the Hugging Face Hub at {ep} refused the download ({status})")
        if isinstance(cause, TRANSPORT):
            return unreachable(repo_id, revision, cause)
    return None


@contextmanager
def translated(repo_id: str, revision: str | None):
    """Around the Hub calls for one model: a failure they raise comes out as `meaning` words it."""
    try:
        yield
    except (HubUnreachable, HubModelError):
        raise
    except Exception as e:
        clear = meaning(e, repo_id, revision)
        if clear is None:
            raise
        raise clear from e
