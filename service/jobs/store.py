"""What the worker writes, as plain functions on a Session. The job row is the truth.

Ownership is a lease: `claim_job` turns a queued job (or one whose previous worker's lease
expired) into running and hands back a token; every write that matters is fenced by that token,
so a worker that lost its lease (paused too long, and the job was taken over) cannot overwrite
the new owner's work. Terminal states (succeeded, failed, cancelled) never change.

Every function here commits (or rolls back) before it returns: transactions stay short, which
matters on SQLite where a transaction holds the write lock. Don't keep a session open across a
long stage; call these between batches.

Typical task body (worker side):

    token = store.claim_job(s, job_id, settings.lease_seconds)
    if token is None: return                      # not ours (done, cancelled, or running elsewhere)
    store.set_progress(s, job_id, "calibrate", 0.1, eta=300, lease_token=token)
    if store.cancel_requested(s, job_id): store.finish(s, job_id, token, "cancelled"); return
    ...
    store.finish(s, job_id, token, "succeeded")
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any

from sqlalchemy import and_, bindparam, case, delete, or_, select, update
from sqlalchemy.orm import Session

from service.core.models import (
    OWNED,
    TERMINAL,
    Artifact,
    ErrorType,
    EventKind,
    Job,
    JobEvent,
    JobStatus,
    LayerScore,
    Metric,
    Team,
    UTCDateTime,
    utcnow,
)
from service.webhooks import delivery as webhooks
from service.jobs.schemas import JobCreate

SCORE_FIELDS = ("cca_bound", "nmse", "cosine", "cond", "heldout_nmse", "loss_rise")
_EVENT_KINDS = {k.value for k in EventKind}
_ERROR_TYPES = {e.value for e in ErrorType}


def _finite(x: Any) -> float | None:
    """JSON has no NaN/inf: store them as NULL."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def _owned(job_id: str, lease_token: str | None):
    """WHERE clause: this job, still held by `lease_token` (no fence when the token is None)."""
    clause = and_(Job.id == job_id, Job.status.in_(OWNED))
    return clause if lease_token is None else and_(clause, Job.lease_token == lease_token)


def _event(session: Session, job_id: str, kind: str, *, message: str | None = None, stage: str | None = None,
           progress: float | None = None, data: Mapping | None = None, now=None) -> JobEvent:
    if kind not in _EVENT_KINDS:
        raise ValueError(f"event kind must be one of {sorted(_EVENT_KINDS)}, got {kind!r}")
    ev = JobEvent(job_id=job_id, kind=kind, message=message, stage=stage, progress=_finite(progress),
                  data=dict(data) if data is not None else None, created_at=now or utcnow())
    session.add(ev)
    return ev


# --- reading -------------------------------------------------------------------------------------


def job_spec(session: Session, job_id: str) -> JobCreate | None:
    """The job's validated request (defaults filled in), or None for an unknown job. The worker reads
    it after claiming: `spec.compression.ks`, `spec.calibration.num_samples`, `spec.publish`, ...
    Resolve `spec.model.id` with service.core.paths.model_source and a local publish target with
    service.core.paths.publish_dir."""
    raw = session.scalar(select(Job.spec).where(Job.id == job_id))
    session.commit()
    return None if raw is None else JobCreate.model_validate(raw)


def hub_token_ciphertext(session: Session, job_id: str) -> str | None:
    """The Hub token a job publishes with, still encrypted (service.core.secrets.decrypt): the job's own
    (publish.token), else its team's (`nbl admin set-hub-token`), else None. Read by the worker after
    claiming: the token never travels through the broker."""
    row = session.execute(select(Job.hub_token_encrypted, Team.hub_token_encrypted)
                          .join(Team, Team.id == Job.team_id).where(Job.id == job_id)).first()
    session.commit()
    return None if row is None else row[0] or row[1]


# --- ownership -----------------------------------------------------------------------------------


def claim_job(session: Session, job_id: str, lease_seconds: int, *, max_attempts: int | None = None,
              owner: str | None = None, dead_owner: str | None = None) -> str | None:
    """Compare-and-set queued -> running (or take over a running job whose lease expired).

    Returns the new lease token, or None when the job is not claimable: unknown, terminal, or
    running under a live lease. A cancelling job whose worker died is finished as cancelled here.
    attempt += 1; started_at is set on the first claim. `owner` (worker.ownership) is recorded;
    `dead_owner` also takes over a live lease that this owner holds (the caller knows it died).
    With `max_attempts`, a job that already had that many is not taken over: the reconciler fails
    it, so a poison job cannot loop.
    """
    now = utcnow()
    token = secrets.token_hex(16)
    now_param = bindparam("claim_now", now, type_=UTCDateTime())
    expired = Job.lease_expires_at < now
    if dead_owner is not None:
        expired = or_(expired, Job.lease_owner == dead_owner)
    takeover = and_(Job.status == JobStatus.running.value, expired)
    if max_attempts is not None:
        takeover = and_(takeover, Job.attempt < max_attempts)
    res = session.execute(
        update(Job)
        .where(Job.id == job_id, or_(Job.status == JobStatus.queued.value, takeover))
        .values(status=JobStatus.running.value, attempt=Job.attempt + 1, lease_token=token, lease_owner=owner,
                lease_expires_at=now + timedelta(seconds=lease_seconds), heartbeat_at=now, updated_at=now,
                started_at=case((Job.started_at.is_(None), now_param), else_=Job.started_at))
        .execution_options(synchronize_session=False)
    )
    if res.rowcount == 1:
        attempt = session.scalar(select(Job.attempt).where(Job.id == job_id))
        _event(session, job_id, EventKind.status.value, message=f"running (attempt {attempt})",
               data={"status": "running", "attempt": attempt}, now=now)
        webhooks.enqueue(session, job_id, JobStatus.running.value, now)  # same transaction as the change
        session.commit()
        return token
    # A cancel arrived for a job whose worker died: nobody will reach the next checkpoint.
    res = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.status == JobStatus.cancelling.value, Job.lease_expires_at < now)
        .values(status=JobStatus.cancelled.value, finished_at=now, updated_at=now, lease_expires_at=None,
                hub_token_encrypted=None)
        .execution_options(synchronize_session=False)
    )
    if res.rowcount == 1:
        _event(session, job_id, EventKind.status.value, message="cancelled", data={"status": "cancelled"}, now=now)
        webhooks.enqueue(session, job_id, JobStatus.cancelled.value, now)
    session.commit()
    return None


def heartbeat(session: Session, job_id: str, lease_token: str, lease_seconds: int | None = None) -> bool:
    """Extend the lease. False when it is no longer ours (taken over, or the job ended)."""
    now = utcnow()
    values: dict[str, Any] = {"heartbeat_at": now}
    if lease_seconds is not None:
        values["lease_expires_at"] = now + timedelta(seconds=lease_seconds)
    else:  # keep the same lease length as the claim gave
        values["lease_expires_at"] = now + _lease_length(session, job_id, lease_token)
    res = session.execute(update(Job).where(_owned(job_id, lease_token)).values(**values)
                          .execution_options(synchronize_session=False))
    session.commit()
    return res.rowcount == 1


def _lease_length(session: Session, job_id: str, lease_token: str) -> timedelta:
    row = session.execute(select(Job.lease_expires_at, Job.heartbeat_at)
                          .where(Job.id == job_id, Job.lease_token == lease_token)).first()
    if row is None or row.lease_expires_at is None or row.heartbeat_at is None:
        return timedelta(seconds=120)
    return max(row.lease_expires_at - row.heartbeat_at, timedelta(seconds=5))


def cancel_requested(session: Session, job_id: str) -> bool:
    """True when the job should stop at this checkpoint: a cancel was asked, or the row is gone."""
    row = session.execute(select(Job.status, Job.cancel_requested).where(Job.id == job_id)).first()
    session.commit()
    return row is None or row.cancel_requested or row.status in (JobStatus.cancelling.value, JobStatus.cancelled.value)


def finish(session: Session, job_id: str, lease_token: str, status: str, error_type: str | None = None,
           error_message: str | None = None) -> bool:
    """Move an owned job to its terminal state. False (nothing written) when the lease is not ours
    or the job is already terminal. A failure needs an error_type: user | system | timeout."""
    if status not in TERMINAL:
        raise ValueError(f"finish() takes a terminal status {sorted(TERMINAL)}, got {status!r}")
    if status == JobStatus.failed.value and error_type not in _ERROR_TYPES:
        raise ValueError(f"a failed job needs error_type in {sorted(_ERROR_TYPES)}, got {error_type!r}")
    if status != JobStatus.failed.value and error_type is not None:
        raise ValueError("error_type is only for failed jobs")
    now = utcnow()
    values: dict[str, Any] = {"status": status, "finished_at": now, "updated_at": now, "lease_expires_at": None,
                              "error_type": error_type, "error_message": (error_message or None) and error_message[:4000],
                              "eta_seconds": None, "hub_token_encrypted": None}  # a job's own token dies with it
    if status == JobStatus.succeeded.value:
        values["progress"] = 1.0
    res = session.execute(update(Job).where(_owned(job_id, lease_token)).values(**values)
                          .execution_options(synchronize_session=False))
    if res.rowcount != 1:
        session.rollback()
        return False
    data: dict[str, Any] = {"status": status}
    if error_type:
        data["error_type"] = error_type
    _event(session, job_id, EventKind.status.value, message=status if not error_message else f"{status}: {error_message[:500]}",
           data=data, now=now)
    webhooks.enqueue(session, job_id, status, now)  # the outbox row commits with the terminal state
    session.commit()
    return True


# --- progress and events -------------------------------------------------------------------------


def add_event(session: Session, job_id: str, kind: str, message: str | None = None, *, stage: str | None = None,
              progress: float | None = None, data: Mapping | None = None) -> int:
    """Append to the job's event log (kind: stage | progress | warning | status | log). Returns the id."""
    ev = _event(session, job_id, kind, message=message, stage=stage, progress=progress, data=data)
    session.commit()
    return ev.id


def set_progress(session: Session, job_id: str, stage: str, progress: float, eta: float | None = None,
                 message: str | None = None, *, lease_token: str | None = None) -> bool:
    """Record the current stage, progress in [0, 1] and ETA in seconds; extends the lease.

    Events: a `stage` event when the stage changes, a `progress` event each time progress crosses a
    tenth, and a `log` event for a message. False when the job is not (or no longer) ours.
    """
    progress = min(max(float(progress), 0.0), 1.0)
    now = utcnow()
    row = session.execute(select(Job.stage, Job.progress, Job.lease_expires_at, Job.heartbeat_at)
                          .where(_owned(job_id, lease_token))).first()
    if row is None:
        session.rollback()
        return False
    values: dict[str, Any] = {"stage": stage, "progress": progress, "eta_seconds": _finite(eta), "updated_at": now}
    if lease_token is not None and row.lease_expires_at is not None and row.heartbeat_at is not None:
        values.update(heartbeat_at=now, lease_expires_at=now + max(row.lease_expires_at - row.heartbeat_at,
                                                                   timedelta(seconds=5)))
    res = session.execute(update(Job).where(_owned(job_id, lease_token)).values(**values)
                          .execution_options(synchronize_session=False))
    if res.rowcount != 1:
        session.rollback()
        return False
    if stage != row.stage:
        _event(session, job_id, EventKind.stage.value, stage=stage, progress=progress, message=message or stage,
               data={"previous": row.stage}, now=now)
    else:
        if math.floor(progress * 10) != math.floor(row.progress * 10):
            _event(session, job_id, EventKind.progress.value, stage=stage, progress=progress, now=now)
        if message:
            _event(session, job_id, EventKind.log.value, stage=stage, progress=progress, message=message, now=now)
    session.commit()
    return True


def set_selected_layers(session: Session, job_id: str, selected: Iterable[Mapping], *,
                        lease_token: str | None = None) -> bool:
    """The layers replaced per output: [{"k": 4, "mode": "attn", "layers": [..]}, ...]."""
    res = session.execute(update(Job).where(_owned(job_id, lease_token))
                          .values(selected_layers=[dict(s) for s in selected], updated_at=utcnow())
                          .execution_options(synchronize_session=False))
    session.commit()
    return res.rowcount == 1


# --- results -------------------------------------------------------------------------------------


def _fenced(session: Session, job_id: str, lease_token: str | None) -> bool:
    if lease_token is None:
        return True
    return session.scalar(select(Job.id).where(_owned(job_id, lease_token))) is not None


def save_layer_scores(session: Session, job_id: str, scores: Iterable[Mapping], *,
                      lease_token: str | None = None) -> bool:
    """Replace the job's per-layer scores with `scores` in the engine's format:
    [{"layer": i, "attn": {"cca_bound", "nmse", "cosine", "cond", "heldout_nmse", "loss_rise"?},
      "block": {...}}, ...]. Idempotent (a retried stage writes the same rows)."""
    if not _fenced(session, job_id, lease_token):
        session.rollback()
        return False
    rows = []
    for s in scores:
        for mode in ("attn", "block"):
            if s.get(mode) is None:
                continue
            rows.append(LayerScore(job_id=job_id, layer=int(s["layer"]), mode=mode,
                                   **{f: _finite(s[mode].get(f)) for f in SCORE_FIELDS}))
    session.execute(delete(LayerScore).where(LayerScore.job_id == job_id))
    session.add_all(rows)
    session.commit()
    return True


def save_metrics(session: Session, job_id: str, variant: str, metrics: Mapping[str, float | None], *,
                 lease_token: str | None = None) -> bool:
    """Replace the metrics of one variant ("base", "k4", ...), e.g. {"perplexity/wikitext2": 21.3}.
    Also mirrored on jobs.metrics as {variant: {name: value}} for cheap reads."""
    if not _fenced(session, job_id, lease_token):
        session.rollback()
        return False
    clean = {str(name): _finite(value) for name, value in metrics.items()}
    session.execute(delete(Metric).where(Metric.job_id == job_id, Metric.variant == variant))
    session.add_all(Metric(job_id=job_id, variant=variant, name=n, value=v) for n, v in clean.items())
    session.flush()
    summary: dict[str, dict[str, float | None]] = {}
    for m in session.scalars(select(Metric).where(Metric.job_id == job_id).order_by(Metric.variant, Metric.name)):
        summary.setdefault(m.variant, {})[m.name] = m.value
    session.execute(update(Job).where(Job.id == job_id).values(metrics=summary, updated_at=utcnow())
                    .execution_options(synchronize_session=False))
    session.commit()
    return True


def save_artifact(session: Session, job_id: str, k: int | None, kind: str, uri: str, revision: str | None = None,
                  commit_sha: str | None = None, *, lease_token: str | None = None) -> bool:
    """Record an output (kind "model" for a local checkpoint, "hub" or "local" once published).
    One row per (k, kind): publishing twice updates it."""
    if not _fenced(session, job_id, lease_token):
        session.rollback()
        return False
    row = session.scalar(select(Artifact).where(Artifact.job_id == job_id, Artifact.kind == kind,
                                                Artifact.k.is_(None) if k is None else Artifact.k == k))
    if row is None:
        session.add(Artifact(job_id=job_id, k=k, kind=kind, uri=uri, revision=revision, commit_sha=commit_sha))
    else:
        row.uri, row.revision, row.commit_sha, row.created_at = uri, revision, commit_sha, utcnow()
    session.commit()
    return True
