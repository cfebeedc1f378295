"""Prometheus metrics read from the database at scrape time, so every API replica reports the same
numbers and nothing is lost on restart. One registry per app (no process-global state)."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from service.core.models import EventKind, Job, JobEvent, JobStatus, utcnow


class JobsCollector(Collector):
    def __init__(self, sessions: sessionmaker[Session], window_jobs: int):
        self.sessions = sessions
        self.window_jobs = window_jobs

    def collect(self):
        with self.sessions() as s:
            counts = dict(s.execute(select(Job.status, func.count()).group_by(Job.status)).all())
            oldest = s.scalar(select(func.min(Job.created_at)).where(Job.status == JobStatus.queued.value))
            durations = stage_durations(s, self.window_jobs)
            s.rollback()

        jobs = GaugeMetricFamily("nbl_jobs", "Jobs by status", labels=["status"])
        for status in JobStatus:
            jobs.add_metric([status.value], counts.get(status.value, 0))
        yield jobs

        age = GaugeMetricFamily("nbl_oldest_queued_job_age_seconds", "Age of the oldest queued job (0 when none)")
        age.add_metric([], _age(oldest))
        yield age

        mean = GaugeMetricFamily(
            "nbl_stage_duration_mean_seconds",
            f"Mean stage duration over the last {self.window_jobs} finished jobs",
            labels=["stage"],
        )
        peak = GaugeMetricFamily(
            "nbl_stage_duration_max_seconds",
            f"Longest stage duration over the last {self.window_jobs} finished jobs",
            labels=["stage"],
        )
        runs = GaugeMetricFamily(
            "nbl_stage_runs", f"Stage runs over the last {self.window_jobs} finished jobs", labels=["stage"]
        )
        for stage, values in sorted(durations.items()):
            mean.add_metric([stage], sum(values) / len(values))
            peak.add_metric([stage], max(values))
            runs.add_metric([stage], len(values))
        yield mean
        yield peak
        yield runs


def _age(created: datetime | None) -> float:
    return 0.0 if created is None else max((utcnow() - created).total_seconds(), 0.0)


def stage_durations(session: Session, window_jobs: int) -> dict[str, list[float]]:
    """Seconds per stage run: a stage lasts from its `stage` event to the next one, the last stage
    to the job's finish."""
    finished = dict(
        session.execute(
            select(Job.id, Job.finished_at)
            .where(Job.finished_at.is_not(None))
            .order_by(Job.finished_at.desc())
            .limit(window_jobs)
        ).all()
    )
    if not finished:
        return {}
    by_job: dict[str, list[tuple[str, datetime]]] = defaultdict(list)
    for job_id, stage, at in session.execute(
        select(JobEvent.job_id, JobEvent.stage, JobEvent.created_at)
        .where(JobEvent.job_id.in_(list(finished)), JobEvent.kind == EventKind.stage.value)
        .order_by(JobEvent.job_id, JobEvent.id)
    ):
        by_job[job_id].append((stage, at))
    out: dict[str, list[float]] = defaultdict(list)
    for job_id, stages in by_job.items():
        ends = [at for _, at in stages[1:]] + [finished[job_id]]
        for (stage, start), end in zip(stages, ends, strict=True):
            if stage:
                out[stage].append(max((end - start).total_seconds(), 0.0))
    return dict(out)


def make_registry(sessions: sessionmaker[Session], window_jobs: int) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(JobsCollector(sessions, window_jobs))
    return registry
