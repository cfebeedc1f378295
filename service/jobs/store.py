"""What the worker writes besides state changes, as plain functions on a Session: progress and
events, per-layer scores, metrics, artifacts; and what it reads back (the spec, the Hub token).
Claim and heartbeat are service.jobs.lease; finish and cancel, service.jobs.states.

Every write is fenced by the lease token the claim handed out (states.owned), so a worker that
lost its lease (paused too long, and the job was taken over) cannot overwrite the new owner's
work. Every function here commits (or rolls back) before it returns: transactions stay short,
which matters on SQLite where a transaction holds the write lock. Don't keep a session open
across a long stage; call these between batches.

Typical task body (worker side):

    token = lease.claim_job(s, job_id, settings.lease_seconds)
    if token is None: return                      # not ours (done, cancelled, or running elsewhere)
    store.set_progress(s, job_id, "calibrate", 0.1, eta=300, stage_progress=0.4, lease_token=token)
    if states.cancel_requested(s, job_id): states.finish(s, job_id, token, "cancelled"); return
    ...
    states.finish(s, job_id, token, "succeeded")
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from nbl.request import JobCreate
from nbl.selection.score_fields import SCORE_FIELDS
from service.core.cas import cas
from service.core.models import Artifact, EventKind, Job, LayerScore, Metric, Team, utcnow
from service.core.wakeup import touch
from service.jobs.states import event, finite, owned

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
    row = session.execute(
        select(Job.hub_token_encrypted, Team.hub_token_encrypted)
        .join(Team, Team.id == Job.team_id)
        .where(Job.id == job_id)
    ).first()
    session.commit()
    return None if row is None else row[0] or row[1]


# --- progress and events -------------------------------------------------------------------------


def add_event(
    session: Session,
    job_id: str,
    kind: str,
    message: str | None = None,
    *,
    stage: str | None = None,
    progress: float | None = None,
    data: Mapping | None = None,
) -> int:
    """Append to the job's event log (kind: stage | progress | warning | log). Returns the id. A status
    event is written only with its transition (service.jobs.states), so the log never says a status
    the row does not have."""
    if kind == EventKind.status.value:
        raise ValueError("status events are written by service.jobs.states, with the change of status")
    ev = event(session, job_id, kind, message=message, stage=stage, progress=progress, data=data)
    session.commit()
    return ev.id


def set_progress(
    session: Session,
    job_id: str,
    stage: str,
    progress: float,
    eta: float | None = None,
    message: str | None = None,
    *,
    stage_progress: float | None = None,
    data: Mapping | None = None,
    lease_token: str | None = None,
) -> bool:
    """Record the current stage, the job's progress in [0, 1], the stage's (`stage_progress`, default
    `progress`) and the ETA in seconds; extends the lease.

    Events, each with the three figures and `data` (the worker's measured rate): a `stage` event when
    the stage changes, a `progress` event each time the job's or the stage's progress crosses a tenth,
    and a `log` event for a message. False when the job is not (or no longer) ours.
    """
    progress = min(max(float(progress), 0.0), 1.0)
    stage_progress = progress if stage_progress is None else min(max(float(stage_progress), 0.0), 1.0)
    now = utcnow()
    row = session.execute(
        select(Job.stage, Job.progress, Job.stage_progress, Job.lease_expires_at, Job.heartbeat_at).where(
            owned(job_id, lease_token)
        )
    ).first()
    if row is None:
        session.rollback()
        return False
    values: dict[str, Any] = {
        "stage": stage,
        "progress": progress,
        "stage_progress": stage_progress,
        "eta_seconds": finite(eta),
        "updated_at": now,
    }
    if lease_token is not None and row.lease_expires_at is not None and row.heartbeat_at is not None:
        values.update(
            heartbeat_at=now, lease_expires_at=now + max(row.lease_expires_at - row.heartbeat_at, timedelta(seconds=5))
        )
    if not cas(session, update(Job).where(owned(job_id, lease_token)).values(**values)):
        return False
    touch(session, job_id)  # open streams send the new figures now (service/core/wakeup.py)
    figures = dict(stage=stage, progress=progress, stage_progress=stage_progress, eta=eta, now=now)
    extra = dict(data or {})
    if stage != row.stage:
        event(
            session,
            job_id,
            EventKind.stage.value,
            message=message or stage,
            data={"previous": row.stage, **extra},
            **figures,
        )
    else:
        tenth = lambda x: math.floor((x or 0.0) * 10)  # noqa: E731
        if tenth(progress) != tenth(row.progress) or tenth(stage_progress) != tenth(row.stage_progress):
            event(session, job_id, EventKind.progress.value, data=extra or None, **figures)
        if message:
            event(session, job_id, EventKind.log.value, message=message, data=extra or None, **figures)
    session.commit()
    return True


def set_selected_layers(
    session: Session, job_id: str, selected: Iterable[Mapping], *, lease_token: str | None = None
) -> bool:
    """The layers replaced per output: [{"k": 4, "mode": "attn", "layers": [..]}, ...]."""
    return cas(
        session,
        update(Job)
        .where(owned(job_id, lease_token))
        .values(selected_layers=[dict(s) for s in selected], updated_at=utcnow()),
        commit=True,
    )


# --- results -------------------------------------------------------------------------------------


def _fenced(session: Session, job_id: str, lease_token: str | None) -> bool:
    if lease_token is None:
        return True
    return session.scalar(select(Job.id).where(owned(job_id, lease_token))) is not None


def save_layer_scores(
    session: Session, job_id: str, scores: Iterable[Mapping], *, lease_token: str | None = None
) -> bool:
    """Replace the job's per-layer scores with `scores` in the engine's format:
    [{"layer": i, "attn": {SCORE_FIELDS (loss_rise optional)}, "block": {...}}, ...]. Idempotent (a retried stage writes the same rows)."""
    if not _fenced(session, job_id, lease_token):
        session.rollback()
        return False
    rows = []
    for s in scores:
        for mode in ("attn", "block"):
            if s.get(mode) is None:
                continue
            rows.append(
                LayerScore(
                    job_id=job_id, layer=int(s["layer"]), mode=mode, **{f: finite(s[mode].get(f)) for f in SCORE_FIELDS}
                )
            )
    session.execute(delete(LayerScore).where(LayerScore.job_id == job_id))
    session.add_all(rows)
    session.commit()
    return True


def save_metrics(
    session: Session, job_id: str, variant: str, metrics: Mapping[str, float | None], *, lease_token: str | None = None
) -> bool:
    """Replace the metrics of one variant ("base", "k4", ...), e.g. {"perplexity/wikitext2": 21.3}.
    Also mirrored on jobs.metrics as {variant: {name: value}} for cheap reads."""
    if not _fenced(session, job_id, lease_token):
        session.rollback()
        return False
    clean = {str(name): finite(value) for name, value in metrics.items()}
    session.execute(delete(Metric).where(Metric.job_id == job_id, Metric.variant == variant))
    session.add_all(Metric(job_id=job_id, variant=variant, name=n, value=v) for n, v in clean.items())
    session.flush()
    summary: dict[str, dict[str, float | None]] = {}
    for m in session.scalars(select(Metric).where(Metric.job_id == job_id).order_by(Metric.variant, Metric.name)):
        summary.setdefault(m.variant, {})[m.name] = m.value
    session.execute(
        update(Job)
        .where(Job.id == job_id)
        .values(metrics=summary, updated_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    session.commit()
    return True


def save_artifact(
    session: Session,
    job_id: str,
    k: int | None,
    kind: str,
    uri: str,
    revision: str | None = None,
    commit_sha: str | None = None,
    *,
    lease_token: str | None = None,
) -> bool:
    """Record an output (kind "model" for a local checkpoint, "hub" or "local" once published).
    One row per (k, kind): publishing twice updates it."""
    if not _fenced(session, job_id, lease_token):
        session.rollback()
        return False
    row = session.scalar(
        select(Artifact).where(
            Artifact.job_id == job_id, Artifact.kind == kind, Artifact.k.is_(None) if k is None else Artifact.k == k
        )
    )
    if row is None:
        session.add(Artifact(job_id=job_id, k=k, kind=kind, uri=uri, revision=revision, commit_sha=commit_sha))
    else:
        row.uri, row.revision, row.commit_sha, row.created_at = uri, revision, commit_sha, utcnow()
    session.commit()
    return True


def save_selection(session: Session, job_id: str, selection: Mapping, *, lease_token: str | None = None) -> bool:
    """What a measured selection (greedy, auto, k auto) tried and chose (auto_k.Chooser.record), shown on the job."""
    return cas(
        session,
        update(Job).where(owned(job_id, lease_token)).values(selection=dict(selection), updated_at=utcnow()),
        commit=True,
    )


def save_gates(session: Session, job_id: str, gates: Mapping, *, lease_token: str | None = None) -> bool:
    """The job's quality-gate checks, {"passed": bool, "checks": [...]} (worker/gates.py), shown on the job."""
    return cas(
        session,
        update(Job).where(owned(job_id, lease_token)).values(gates=dict(gates), updated_at=utcnow()),
        commit=True,
    )
