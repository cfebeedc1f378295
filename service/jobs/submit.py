"""Submitting a job, POST /v1/jobs as one call: the Idempotency-Key, the deployment's limits, the model, the
placement and the webhook URL checked before any transaction, then the job created under the team's lock
and committed, and only then queued. Idempotent: the same key and body return the job made first. Raises
domain exceptions (service.core.errors) that the one handler renders; reading, listing and cancelling are
service/jobs/service.py's.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re

from celery import Celery
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from nbl.recipe import from_request
from nbl.request import JobCreate
from service.core import secrets
from service.core.errors import IdempotencyKeyReused, InvalidRequest
from service.core.models import EventKind, Job, new_job_id, utcnow
from service.core.settings import Settings
from service.estimates import local_model
from service.estimates.limits import check_limits
from service.estimates.placement import placement_for, refuse_unplaced
from service.estimates.rates import with_rates
from service.jobs import states
from service.jobs.disk_quota import check_disk_quota
from service.jobs.queue import enqueue_job
from service.jobs.service import get_job
from service.jobs.submit_warnings import submit_warnings
from service.jobs.team_caps import check_team_caps, lock_team
from service.keys.auth import Principal
from service.webhooks.signing import has_secret

log = logging.getLogger(__name__)

_IDEMPOTENCY_KEY = re.compile(r"[\x21-\x7e]{1,255}")  # visible ASCII, as Stripe/IETF keys are


def request_hash(spec: JobCreate) -> str:
    """Hash of the validated request (defaults filled in), so `{"k": 4}` and the same request with
    the defaults spelled out count as the same body."""
    canonical = json.dumps(spec.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def check_idempotency_key(key: str | None) -> str | None:
    if key is None:
        return None
    if not _IDEMPOTENCY_KEY.fullmatch(key):
        raise InvalidRequest(
            "Idempotency-Key must be 1 to 255 visible ASCII characters",
            errors=[{"loc": ["header", "Idempotency-Key"], "msg": "invalid idempotency key", "type": "value_error"}],
        )
    return key


def submit(
    session: Session,
    celery: Celery,
    principal: Principal,
    spec: JobCreate,
    idempotency_key: str | None,
    settings: Settings,
) -> tuple[Job, bool]:
    """POST /v1/jobs as one call. Returns (job, created).

    Checks first, before any transaction: the Idempotency-Key, the deployment's limits, the model,
    the webhook URL (which resolves its host). Then create_job inserts and commits, and only after
    the commit is the job queued: a task queued inside an open transaction could run before the row
    exists, and a broker failure leaves the job queued for the reconciler to send again."""
    key = check_idempotency_key(idempotency_key)
    errors = check_limits(spec, settings) or local_model.submit_problems(spec, settings)
    if errors:
        raise InvalidRequest(errors[0]["msg"], errors=errors)
    placement, estimate = placement_for(spec, settings, required=False)  # config.json: memory, time, class
    refuse_unplaced(placement, estimate)  # no worker class holds it: a 422 with the numbers
    check_webhook_url(spec, settings)
    estimate = with_rates(session, estimate, from_request(spec), settings)  # the class's measured stages
    job, created = create_job(session, principal, spec, key, settings, estimate)  # commits
    if created:
        enqueue_job(session, celery, job.id)
    return get_job(session, principal.team_id, job.id), created


def create_job(
    session: Session,
    principal: Principal,
    spec: JobCreate,
    idempotency_key: str | None,
    settings: Settings,
    estimate: dict | None = None,
) -> tuple[Job, bool]:
    """Insert a queued job and commit. Returns (job, created).

    With an Idempotency-Key (scoped to the team): the same key and the same body return the job
    created first (created=False); the same key with another body is IdempotencyKeyReused. Two
    concurrent requests with one key race on the (team_id, idempotency_key) unique constraint; the
    loser reads the winner's row. The key is looked up again under the team's lock, before the caps:
    a request that waited there while the first one with its key committed replays that job (a 201),
    not a 429 because that very job now fills the team's cap.
    """
    digest = request_hash(spec)
    replayed = _replayed(session, principal.team_id, idempotency_key, digest)  # the common case, no lock
    if replayed is None:
        lock_team(session, principal.team_id)
        replayed = _replayed(session, principal.team_id, idempotency_key, digest)  # committed while we waited
    if replayed is not None:
        return replayed, False
    check_team_caps(session, principal, settings)
    if spec.webhook_url and not has_secret(session, principal.team_id):
        raise InvalidRequest(
            "this team has no webhook secret to sign with; ask an admin to run "
            f"`nbl admin webhook-secret --team {principal.team_name}`",
            errors=[
                {
                    "loc": ["body", "webhook_url"],
                    "msg": "no webhook secret for this team",
                    "type": "webhook_secret_missing",
                }
            ],
        )
    check_disk_quota(session, principal, spec, estimate, settings)  # from the estimate, under the team's lock

    now = utcnow()
    try:
        job = states.insert_queued(
            session,
            now,
            id=new_job_id(now),
            team_id=principal.team_id,
            spec=spec.model_dump(mode="json"),
            idempotency_key=idempotency_key,
            request_hash=digest,
            hub_token_encrypted=_encrypted_hub_token(spec, settings),
            **({"estimate": estimate} if estimate is not None else {}),
        )  # else SQL NULL
        for message in submit_warnings(spec, estimate, settings.stats_cache_max_bytes):  # said now (JobOut.warnings)
            states.event(session, job.id, EventKind.warning.value, message=message, stage="submit", now=now)
        session.commit()
    except IntegrityError:
        session.rollback()
        if idempotency_key is None:
            raise
        log.info(
            "idempotency race on key %r for team %s: returning the winner's job", idempotency_key, principal.team_id
        )
        existing = _by_key(session, principal.team_id, idempotency_key)
        if existing is None:
            raise
        return _replay(existing, digest), False
    return job, True


def check_webhook_url(spec: JobCreate, settings: Settings) -> None:
    """A webhook URL must resolve to public addresses (or allowlisted ones), within the webhook
    timeout (a name server that never answers must not hold an API thread): 422 otherwise.
    Checked again at each delivery, since DNS answers change."""
    if spec.webhook_url is None:
        return
    from nbl.webhook_urls import WebhookUrlError
    from service.webhooks.lookup import resolve_within

    try:
        resolve_within(spec.webhook_url, settings.webhook_networks, settings.webhook_timeout_s)
    except WebhookUrlError as e:
        raise InvalidRequest(
            str(e), errors=[{"loc": ["body", "webhook_url"], "msg": str(e), "type": "webhook_url_refused"}]
        ) from None


def _encrypted_hub_token(spec: JobCreate, settings: Settings) -> str | None:
    """publish.token, encrypted for the jobs row (the spec itself never holds it). Not part of the
    request hash: a replay with the same key and body but another token returns the first job as is."""
    token = getattr(spec.publish, "token", None)
    return secrets.encrypt(settings, token.get_secret_value()) if token is not None else None


def _by_key(session: Session, team_id: int, key: str) -> Job | None:
    return session.scalar(select(Job).where(Job.team_id == team_id, Job.idempotency_key == key))


def _replayed(session: Session, team_id: int, key: str | None, digest: str) -> Job | None:
    """The job this key already made (or IdempotencyKeyReused), None if none; nothing stays locked."""
    existing = _by_key(session, team_id, key) if key is not None else None
    if existing is None:
        return None
    try:
        return _replay(existing, digest)
    finally:
        session.rollback()  # nothing was written: the team's lock, if taken, goes


def _replay(job: Job, digest: str) -> Job:
    if job.request_hash != digest:
        raise IdempotencyKeyReused(
            f"this Idempotency-Key was used for job {job.id} with a different request body; use a new key for a new job"
        )
    return job
