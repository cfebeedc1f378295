"""The job as the API shows it (JobOut), built from the rows. Read by the endpoints and by the
webhook outbox (service.webhooks.delivery), which sends the same view as GET /v1/jobs/{id}. A local
output's artifact reads as the URL of its file list (service/outputs serves it)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from nbl.result import finite, job_result
from service.core.models import Artifact, EventKind, Job, JobEvent
from service.jobs.responses import ArtifactOut, JobError, JobOut


def files_url(job_id: str, k: int) -> str:
    return f"/v1/jobs/{job_id}/outputs/{k}/files"


def public_uri(art) -> str:
    """What an Artifact row's `uri` reads as in the API: the Hub URL for a Hub output, else the API URL of its file list
    (relative to the API's base URL), never the row's `local:<team>/<name>` nor an older row's server
    path: the mapping is done at read time, so rows of every age read the same."""
    if art.kind == "hub":
        return art.uri
    return files_url(art.job_id, art.k) if art.k is not None else f"/v1/jobs/{art.job_id}"


def job_views(session: Session, jobs: Sequence[Job]) -> list[JobOut]:
    """JobOut for each job, with its artifacts and warnings (one query each for all)."""
    arts: dict[str, list[ArtifactOut]] = defaultdict(list)
    warnings: dict[str, list[str]] = defaultdict(list)
    if jobs:
        ids = [j.id for j in jobs]
        for a in session.scalars(
            select(Artifact).where(Artifact.job_id.in_(ids)).order_by(Artifact.job_id, Artifact.k, Artifact.kind)
        ):
            arts[a.job_id].append(ArtifactOut.model_validate(a).model_copy(update={"uri": public_uri(a)}))
        for job_id, message in session.execute(
            select(JobEvent.job_id, JobEvent.message)
            .where(JobEvent.job_id.in_(ids), JobEvent.kind == EventKind.warning.value)
            .order_by(JobEvent.id)
        ):
            warnings[job_id].append(message or "")
    return [
        JobOut(
            id=j.id,
            status=j.status,
            stage=j.stage,
            progress=j.progress,
            stage_progress=j.stage_progress,
            eta_seconds=j.eta_seconds,
            attempt=j.attempt,
            cancel_requested=j.cancel_requested,
            spec=j.spec,
            metadata=j.spec.get("metadata") or {},
            selected_layers=j.selected_layers,
            metrics=j.metrics,
            result=job_result(j.spec, j.selected_layers, j.metrics),
            artifacts=arts[j.id],
            error=JobError(type=j.error_type, message=j.error_message) if j.error_type else None,
            estimate=finite(j.estimate),
            warnings=warnings[j.id],
            gates=j.gates,
            selection=j.selection,
            created_at=j.created_at,
            started_at=j.started_at,
            finished_at=j.finished_at,
            updated_at=j.updated_at,
        )
        for j in jobs
    ]


def job_view(session: Session, job: Job) -> JobOut:
    return job_views(session, [job])[0]
