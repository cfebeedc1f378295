"""Routing on the real Redis broker: each job is sent to its worker class's queue, and a CPU-only
`nbl worker` consumes the CPU class's queue alone, so it never receives a job sized for a GPU."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from fastapi.testclient import TestClient
from testkit.model_configs import LLAMA_8B, TINY, write_config
from testkit.service_lib import decode_message

from service.api import create_app
from service.core.db import make_engine, make_sessionmaker
from service.core.models import Job

REPO = Path(__file__).resolve().parents[3]
JOB = {"calibration": {"num_samples": 8, "seq_len": 32}, "compression": {"k": 1}}


def test_jobs_go_to_their_class_queue_and_a_cpu_worker_takes_only_its_own(
    pg_url, settings_for, redis_queue, team_key_for, tmp_path
):
    broker, queue, r = redis_queue
    settings = settings_for(pg_url, broker_url=broker, queue_name=queue, lease_seconds=5)
    write_config(settings.models_dir / "tiny", TINY)  # config only: the worker fails it at load, after taking it
    write_config(settings.models_dir / "eight", LLAMA_8B)
    auth = team_key_for(settings)
    with TestClient(create_app(settings)) as c:
        small = c.post("/v1/jobs", json={**JOB, "model": {"id": "local:tiny"}}, headers=auth).json()["id"]
        big = c.post("/v1/jobs", json={**JOB, "model": {"id": "local:eight"}}, headers=auth).json()["id"]
    cpu_q, gpu_q = f"{queue}-cpu", f"{queue}-gpu-24g"
    assert [decode_message(m)["args"] for m in r.lrange(cpu_q, 0, -1)] == [[small]]
    assert [decode_message(m)["args"] for m in r.lrange(gpu_q, 0, -1)] == [[big]]

    log = tmp_path / "worker.log"
    env = {
        **os.environ,
        "NBL_HOME": str(settings.home),
        "DATABASE_URL": settings.database_url,
        "BROKER_URL": settings.broker_url,
        "NBL_QUEUE": queue,
        "NBL_LEASE_SECONDS": "5",
        "CUDA_VISIBLE_DEVICES": "",
        "PYTHONPATH": str(REPO),
    }
    worker = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "worker"], cwd=REPO, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT
    )
    sessions = make_sessionmaker(make_engine(settings))
    try:
        deadline = time.monotonic() + 120
        status = "queued"
        while time.monotonic() < deadline and status in ("queued", "running"):
            time.sleep(1)
            with sessions() as s:
                status = s.get(Job, small).status
        assert status == "failed", log.read_text()[-3000:]  # taken and run (its weights are missing)
        time.sleep(3)  # another poll of every queue it consumes
        with sessions() as s:
            assert s.get(Job, big).status == "queued" and s.get(Job, big).attempt == 0
        assert r.llen(gpu_q) == 1 and r.llen(cpu_q) == 0
    finally:
        worker.terminate()
        worker.wait(timeout=60)
    text = log.read_text()
    assert cpu_q in text and gpu_q not in text  # the banner lists the queues it consumes: the CPU one alone


def test_the_reconciler_resends_to_the_jobs_own_queue(pg_url, settings_for, redis_queue, team_key_for):
    from service.core.celery_app import make_celery
    from service.jobs.queue import dispatch_queued

    broker, queue, r = redis_queue
    down = settings_for(pg_url, broker_url="redis://127.0.0.1:1/0", queue_name=queue, publish_timeout_s=0.5)
    write_config(down.models_dir / "eight", LLAMA_8B)
    with TestClient(create_app(down)) as c:
        resp = c.post("/v1/jobs", json={**JOB, "model": {"id": "local:eight"}}, headers=team_key_for(down))
    assert resp.status_code == 201  # the broker is down: the job waits for the reconciler
    up = settings_for(pg_url, broker_url=broker, queue_name=queue)
    celery = make_celery(up)
    with make_sessionmaker(make_engine(up))() as s:
        assert dispatch_queued(s, celery) == [resp.json()["id"]]
    celery.close()
    assert [decode_message(m)["args"] for m in r.lrange(f"{queue}-gpu-24g", 0, -1)] == [[resp.json()["id"]]]
    assert r.llen(f"{queue}-cpu") == 0
