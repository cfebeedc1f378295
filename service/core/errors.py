"""Domain exceptions carry their HTTP status and a stable problem type; one handler renders them
all as RFC 9457 application/problem+json (see service.http.problems).

The type URIs are tag URIs (RFC 4151, as RFC 9457 section 3.1.1 allows): stable identifiers that
clients compare as strings, never fetch.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

PROBLEM_BASE = "tag:nbl-service,2025:problems/"


def problem_type(slug: str) -> str:
    return PROBLEM_BASE + slug


# The body every ServiceError leaves as, for the endpoints' documented error answers (its docstring is
# the OpenAPI schema's description).
class Problem(BaseModel):
    """RFC 9457 problem details."""

    type: str
    title: str
    status: int
    detail: str | None = None
    instance: str | None = None
    errors: list[dict[str, Any]] | None = None


class ServiceError(Exception):
    status: int = 500
    slug: str = "internal-error"
    title: str = "Internal server error"

    def __init__(
        self,
        detail: str | None = None,
        *,
        errors: list[dict[str, Any]] | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(detail or self.title)
        self.detail = detail
        self.errors = errors
        self.headers = headers or {}

    @property
    def type(self) -> str:
        return problem_type(self.slug)


class NotFound(ServiceError):
    status, slug, title = 404, "not-found", "Not found"


class JobNotFound(NotFound):
    """Also what another team's job looks like: existence is not disclosed."""

    def __init__(self, job_id: str):
        super().__init__(f"no job {job_id!r}")


class Unauthorized(ServiceError):
    status, slug, title = 401, "unauthorized", "Missing or invalid API key"

    def __init__(self, detail: str = "send `Authorization: Bearer <key>` with a valid API key"):
        super().__init__(detail, headers={"WWW-Authenticate": 'Bearer realm="nbl"'})


class InvalidRequest(ServiceError):
    status, slug, title = 422, "validation-error", "The request is not valid"


class IdempotencyKeyReused(ServiceError):
    status, slug, title = 422, "idempotency-key-reused", "Idempotency-Key reused with a different request"


class InvalidJobState(ServiceError):
    status, slug, title = 409, "invalid-job-state", "The job is not in a state that allows this"


class CancelNotPossible(InvalidJobState):
    """The job began publishing (a local folder, a Hub commit): it ends succeeded or failed, never cancelled."""

    slug, title = "job-publishing", "The job is publishing; cancel not possible"


class TooManyActiveJobs(ServiceError):
    status, slug, title = 429, "too-many-active-jobs", "Too many active jobs for this team"

    def __init__(self, detail: str, *, retry_after_s: int):
        super().__init__(detail, headers={"Retry-After": str(int(retry_after_s))})


class TooManyJobsCreated(ServiceError):
    """Jobs created in the last hour, cancelled ones included (NBL_MAX_JOBS_PER_TEAM_PER_HOUR)."""

    status, slug, title = 429, "too-many-jobs-created", "Too many jobs created by this team in the last hour"

    def __init__(self, detail: str, *, retry_after_s: int):
        super().__init__(detail, headers={"Retry-After": str(int(retry_after_s))})


class TooManyRequests(ServiceError):
    """The team's requests in flight in this API process (service/http/admission.py): refused, not queued."""

    status, slug, title = 429, "too-many-requests", "Too many requests in flight for this team"

    def __init__(self, detail: str, *, retry_after_s: int):
        super().__init__(detail, headers={"Retry-After": str(int(retry_after_s))})


class TooManyStreams(TooManyRequests):
    """The team's open event streams in this API process (NBL_MAX_STREAMS_PER_TEAM)."""

    slug, title = "too-many-streams", "Too many open event streams for this team"


class PayloadTooLarge(ServiceError):
    status, slug, title = 413, "payload-too-large", "Request body too large"


class NotReady(ServiceError):
    status, slug, title = 503, "not-ready", "A dependency is unavailable"


class DatabaseUnavailable(ServiceError):
    """An outage, not a bug (service.core.dbretry.is_transient): the same request works once it is back."""

    status, slug, title = 503, "database-unavailable", "The database is unavailable"
    retry_after_s = 5

    def __init__(self, detail: str = "the database is unavailable; retry after the Retry-After delay"):
        super().__init__(detail, headers={"Retry-After": str(self.retry_after_s)})


# Starlette's own HTTP errors (unknown route, wrong method, ...) by status.
HTTP_SLUGS = {
    400: ("bad-request", "Bad request"),
    401: ("unauthorized", "Missing or invalid API key"),
    404: ("not-found", "Not found"),
    405: ("method-not-allowed", "Method not allowed"),
    413: ("payload-too-large", "Request body too large"),
    415: ("unsupported-media-type", "Unsupported media type"),
}
