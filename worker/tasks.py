"""The Celery app of the worker and its one task, `nbl.run_job`: thin by design.

The task takes a job id, claims the row (the DB, not the broker, says who owns a job), runs the
pipeline with a sink that writes progress to the DB, and ends the job in exactly one terminal
state with a classified error. Start a worker with

    nbl worker      (celery -A worker.tasks worker --pool prefork --concurrency 1 --max-tasks-per-child 1,
                     or --pool solo on SQLite: worker/host/pool.py; plus the reconcile loop)

A short database outage is ridden out: writes are retried (`db`), the heartbeat keeps trying, and an
attempt that still cannot reach the database is abandoned without a verdict; its lease expires and
the reconciler (service/jobs/reconciler.py) queues the job again. A job never stays `running`.
"""

from __future__ import annotations

import logging
import time
from functools import partial

from celery.exceptions import Reject
from sqlalchemy import select

from nbl.recipe import Publishing, Recipe, from_request
from nbl.result import BASE_EVALUATION, CALIBRATION
from nbl.selection.stored_rows import selection_rows, with_quantized
from nbl.sizing.kinds import stage_kinds
from nbl.sizing.reuse import MODEL, STATISTICS
from service.core.celery_app import RUN_JOB, make_celery
from service.core.db import make_engine, make_sessionmaker
from service.core.dbretry import is_transient, retrying
from service.core.models import Job, Team
from service.core.paths import model_source, publish_dir, scratch_dir
from service.core.secrets import decrypt
from service.core.settings import Settings
from service.core.wakeup import attach, publisher_for
from service.estimates.store import keep_estimate
from service.jobs import lease, states, store
from service.jobs.reconciler import drop_reason

from . import rates
from .errors import classify
from .host import caches, ownership, retention
from .host.heartbeat import Heartbeat
from .pipeline import run
from .pipeline_io import Cancelled
from .progress import StageCost, Tracker, plan
from .publish.destination import Published
from .publish.hub import HubRepo
from .publish.local import LocalDir
from .redact import Redactor
from .run_settings import run_options, run_paths

log = logging.getLogger(__name__)
settings = Settings()
celery = make_celery(settings)
_sessions = None


def sessions():
    """The worker's session factory, built on first use (not at import, so `--help` needs no DB)."""
    global _sessions
    if _sessions is None:
        _sessions = attach(make_sessionmaker(make_engine(settings)), publisher_for(settings))  # events wake streams
    return _sessions


def db(fn, *args, **kwargs):
    """fn(session, *args, **kwargs) in a fresh session, retried through a database outage of up to
    settings.db_retry_s. The store's writes are safe to repeat (progress, scores, metrics, artifacts,
    finish are fenced or idempotent)."""

    def once():
        with sessions()() as s:
            return fn(s, *args, **kwargs)

    return retrying(once, for_s=settings.db_retry_s, what=fn.__name__)


class DbSink:
    """Writes the pipeline's progress to the job row, as the job's fraction, the stage's and the ETA
    (worker/progress.py); raises Cancelled when a cancel was requested. The stages report at least
    every few seconds of work, so a cancel is seen within about a second of the next report."""

    def __init__(
        self,
        job_id: str,
        token: str,
        costs: dict[str, StageCost] | None = None,
        prior: dict[str, float] | None = None,
        keys: dict[str, str] | None = None,
    ):
        """`keys`: what the job fills for its class (worker/host/caches.py), noted as it does."""
        self.job_id, self.token, self.keys = job_id, token, dict(keys or {})
        self.fetched = None  # the load's fetch of the weights (worker/fetch.py)
        self.stats_cached = False  # the calibration read the statistics cache: its rates are kind `cached`
        self.redact = Redactor.for_settings(settings)  # events never carry a server path (worker/redact.py)
        self.tracker = Tracker(costs or {}, prior=prior)  # prior: the class's stage times, the ETA from the start
        self._last = 0.0
        self._stage: str | None = None

    def replan(self, costs: dict[str, StageCost]) -> None:
        self.tracker.replan(costs)

    def loaded(self, fetched) -> None:
        self.fetched = fetched
        if MODEL in self.keys:  # the model is on the class's disk now
            db(caches.note, self.job_id, MODEL, self.keys[MODEL])

    def progress(self, stage: str, fraction: float, message: str) -> None:
        fig = self.tracker.update(stage, fraction)
        now = time.monotonic()
        if stage == self._stage and fraction < 1.0 and now - self._last < 1.0:
            return  # at most one write a second, but every stage start and end
        self._last, self._stage = now, stage
        if not db(
            store.set_progress,
            self.job_id,
            stage,
            fig.progress,
            fig.eta_seconds,
            message=self.redact(message),
            stage_progress=fig.stage_progress,
            data=fig.data(),
            lease_token=self.token,
        ):
            raise Cancelled("lease lost: another worker owns this job now")
        if db(states.cancel_requested, self.job_id):
            raise Cancelled("cancelled by request")

    def should_stop(self) -> bool:
        """Polled while a subprocess runs (worker/subproc.py: the export, the load check), which reports no
        progress: raises Cancelled when a cancel was requested, so the child is killed within seconds."""
        if db(states.cancel_requested, self.job_id):
            raise Cancelled("cancelled by request")
        return False

    def begin_publish(self) -> None:
        """Before anything is published: a cancel that came first ends the job here (states.begin_publish);
        from here on the API refuses one, so a cancelled job never has a published output."""
        if not db(states.begin_publish, self.job_id, self.token):
            raise Cancelled("cancelled before publishing")

    def metrics(self, variant: str, values: dict[str, float]) -> None:
        db(store.save_metrics, self.job_id, variant, values, lease_token=self.token)
        if variant == CALIBRATION:  # the statistics are in the class's cache now, from this job or before
            self.stats_cached = bool(values.get("cached"))
            if STATISTICS in self.keys:
                db(caches.note, self.job_id, STATISTICS, self.keys[STATISTICS])
        if variant == BASE_EVALUATION and BASE_EVALUATION in self.keys:  # in the class's evaluation cache now
            db(caches.note, self.job_id, BASE_EVALUATION, self.keys[BASE_EVALUATION])

    def warning(self, message: str) -> None:
        db(store.add_event, self.job_id, "warning", self.redact(message))

    def layer_scores(self, scores: list[dict]) -> None:
        db(store.save_layer_scores, self.job_id, scores, lease_token=self.token)

    def selection(self, mode: str, selected: dict, measured: dict | None = None, family=None, dtypes=None) -> None:
        self.rows = rows = selection_rows(mode, selected, measured, family, dtypes)  # nbl/selection/stored_rows.py
        db(store.set_selected_layers, self.job_id, rows, lease_token=self.token)
        if measured is not None:
            db(store.save_selection, self.job_id, measured, lease_token=self.token)

    def quantized(self, facts: dict[int, dict[str, dict]]) -> None:
        """What llm-compressor did for each copy (publish.quantize), on the outputs' rows: the result's quantized[]."""
        rows = with_quantized(getattr(self, "rows", []), facts)
        db(store.set_selected_layers, self.job_id, rows, lease_token=self.token)

    def output(self, k: int, layers: list[int], published: Published) -> None:
        # Retried through a database blip: losing this write after a push would repeat the push.
        db(
            store.save_artifact,
            self.job_id,
            k,
            published.kind,
            published.uri,
            published.revision,
            published.commit_sha,
            lease_token=self.token,
        )

    def estimate(self, figures: dict) -> None:
        db(keep_estimate, self.job_id, figures)

    def gates(self, result: dict) -> None:
        db(store.save_gates, self.job_id, result, lease_token=self.token)


def renew_lease(job_id: str, token: str) -> bool:
    """One beat of the job's Heartbeat (worker/host/heartbeat.py), not retried here: the next beat is the retry."""
    with sessions()() as s:
        return lease.heartbeat(s, job_id, token)


def destination(recipe: Recipe, job_id: str):
    """Where this job publishes: publish.repo_id -> the Hub, with the job's or its team's token, read
    from the DB and decrypted here (never a task argument); else NBL_PUBLISH_DIR/<team>/<local_dir or job
    id>, which only this job, or the team's jobs with publish.overwrite, may replace (publish/local.py)."""
    pub = recipe.publishing or Publishing()
    if pub.repo_id:
        with sessions()() as s:
            ciphertext = store.hub_token_ciphertext(s, job_id)
        if ciphertext is None:
            raise ValueError(
                f"publishing to {pub.repo_id} needs a Hub write token: give publish.token, or set the "
                "team's with `nbl admin set-hub-token --team NAME`"
            )
        return HubRepo(
            pub.repo_id,
            decrypt(settings, ciphertext),
            job_id,
            private=pub.private,
            revision=pub.revision,
            create_pr=pub.create_pr,
            endpoint=settings.hf_endpoint,
            title=f"NBL {recipe.compression.mode} compression of {recipe.model}",
        )
    name = pub.local_dir or job_id
    with sessions()() as s:
        team = s.scalar(select(Team.name).join(Job, Job.team_id == Team.id).where(Job.id == job_id))
    publish_dir(settings, team, name)  # re-checks both names' grammar: the spec is input, even from the DB
    return LocalDir(
        settings.publish_dir, team, name, job_id, overwrite=pub.overwrite, quota=settings.team_disk_quota_bytes
    )


def claim(job_id: str) -> str | None:
    """The job's lease, or None. A job still leased to a dead process of this host (our previous
    pool child, killed; Celery re-queued its message) is taken over at once, not after the lease
    expires (worker/host/ownership.py)."""
    kw = dict(max_attempts=settings.max_attempts, owner=ownership.me())
    token = db(lease.claim_job, job_id, settings.lease_seconds, **kw)
    if token is None and (dead := db(ownership.dead_local_owner, job_id)) is not None:
        token = db(lease.claim_job, job_id, settings.lease_seconds, dead_owner=dead, **kw)
        if token is not None:
            log.warning("job %s: taken over from %s, which died on this host", job_id, dead)
    return token


# JobRequest: a delivery of a job that has ended is dropped in the main process, never reaching the pool
@celery.task(name=RUN_JOB, Request="worker.delivery_gate:JobRequest")
def run_job(job_id: str) -> str:
    try:
        token = claim(job_id)
    except Exception as e:
        if is_transient(e):  # the database is still away: keep the message for later
            raise Reject(f"database unavailable: {type(e).__name__}", requeue=True) from e
        raise
    if token is None:  # a duplicate or late delivery (an ended job's never gets here: delivery_gate.py)
        log.info("job %s: delivery dropped: %s", job_id, db(drop_reason, job_id))
        return "not claimed"
    beat = Heartbeat(job_id, partial(renew_lease, job_id, token), max(1.0, settings.lease_seconds / 3))
    beat.start()
    status, err_type, err_msg = "succeeded", None, None
    try:
        # Read inside the try: a request stored before a rule tightened (e.g. a dataset name refused
        # since) fails the job as `user` rather than leaving it `running` until its lease expires.
        recipe = from_request(db(store.job_spec, job_id))  # stored JSON -> JobCreate -> Recipe, once
        paths = run_paths(settings, scratch_dir(settings, job_id), publish_dir=settings.publish_dir)
        keys = caches.keys(recipe, statistics=settings.stats_cache_max_bytes > 0)
        sink = DbSink(job_id, token, plan(recipe), db(rates.prior, job_id), keys)
        run(
            recipe,
            sink,
            paths,
            destination(recipe, job_id),
            run_options(settings),
            source=model_source(settings, recipe.model),
        )  # local:NAME -> its directory
        kinds = stage_kinds(recipe, sink.stats_cached)  # what each stage did: a cache hit is no fresh calibration
        db(rates.record, job_id, sink.tracker.close(), sink.fetched, kinds)  # for the class's next estimate
    except Cancelled as e:
        status, err_msg = "cancelled", str(e)
    except Exception as e:  # every failure ends the job: none stays in `running`
        if is_transient(e):  # no verdict on the job: the reconciler queues it again once the lease expires
            log.warning(
                "job %s: database unavailable for over %g s; abandoning this attempt", job_id, settings.db_retry_s
            )
            return "abandoned"
        failure = classify(e)  # worker/errors.py: the one table of causes
        status, err_type, err_msg = "failed", failure.type, failure.message
        if failure.traceback:
            log.exception("job %s failed (%s)", job_id, failure.type)
        else:
            log.warning("job %s failed (%s): %s", job_id, failure.type, failure.message)
    finally:
        beat.stop.set()
    err_msg = Redactor.for_settings(settings)(err_msg) if status == "failed" else None  # no server path
    ended = db(states.finish, job_id, token, status, error_type=err_type, error_message=err_msg)
    retention.after_job(settings, job_id, ended)
    return status
