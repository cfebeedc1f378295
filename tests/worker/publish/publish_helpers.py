"""Plain helpers for the publishing tests: a tiny compressed output on disk (real engine, no mocks), and
a Celery worker process like the one tests/integration starts, with extra environment."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from service.core.celery_app import default_queue

REPO = Path(__file__).resolve().parents[3]

JOB = {
    "model": {"id": "local:tiny"},
    "calibration": {"dataset": "c4", "num_samples": 10, "seq_len": 32},
    "compression": {"mode": "attn", "criterion": "cca", "k": 1},
    "evaluation": {"perplexity": ["wikitext2"], "max_tokens": 512},
}


def compress_tiny(tmp: Path, text_file: Path, ks=(2,), family: str = "llama"):
    """`nbl compress` (the engine's stages) on a tiny random checkpoint: the outputs as the CLI writes them.
    Returns (CompressResult, the live LoadedModel)."""
    from testkit.models import save_tiny_checkpoint

    from worker.engine.calibration.data import DatasetSpec
    from worker.engine.compress import run
    from worker.engine.config import CompressConfig
    from worker.engine.loading.load import load_model

    src = save_tiny_checkpoint(tmp / f"tiny-{family}", family=family)
    cfg = CompressConfig(
        model=str(src),
        dataset=DatasetSpec(str(text_file)),
        ks=list(ks),
        out=tmp / "out",
        num_samples=8,
        seq_len=32,
        stats_dir=tmp / "stats",
    )
    lm = load_model(str(src))
    refs = {}
    from worker.publish import loadcheck

    result = run(cfg, progress=False, lm=lm, on_saved=lambda o, m: refs.__setitem__(o["k"], loadcheck.reference(m)))
    return result, refs


def start_worker(
    settings, log_path: Path, extra_env: dict | None = None, script: Path | None = None, loglevel: str = "INFO"
) -> subprocess.Popen:
    """A real `celery worker` (or a wrapper script taking the same worker arguments)."""
    from testkit.models import DATA_DIR

    env = {
        **os.environ,
        "NBL_HOME": str(settings.home),
        "DATABASE_URL": settings.database_url,
        "BROKER_URL": settings.broker_url,
        "NBL_QUEUE": settings.queue_name,
        "NBL_DATA_DIR": str(DATA_DIR),
        "NBL_LEASE_SECONDS": str(settings.lease_seconds),
        "PYTHONPATH": str(REPO),
        **(extra_env or {}),
    }
    args = [
        "worker",
        "--pool",
        "solo",
        "--loglevel",
        loglevel,
        "--without-heartbeat",
        "--without-gossip",
        "--without-mingle",
        "-Q",
        default_queue(settings),
    ]
    cmd = (
        [sys.executable, str(script), *args]
        if script
        else [sys.executable, "-m", "celery", "-A", "worker.tasks", *args]
    )
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=open(log_path, "a"), stderr=subprocess.STDOUT)


def stop(worker: subprocess.Popen) -> None:
    if worker.poll() is None:
        worker.terminate()
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


def run_jobs(c, auth, bodies: list[dict], worker, log: Path, timeout: float = 300) -> list[dict]:
    """Submit each body through the API client `c`, then wait until every job has ended: the jobs as the API
    reads them. The worker must stay up meanwhile (its log's tail says why it did not)."""
    ids = []
    for b in bodies:
        r = c.post("/v1/jobs", json=b, headers=auth)
        assert r.status_code == 201, r.text
        ids.append(r.json()["id"])
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        jobs = [c.get(f"/v1/jobs/{i}", headers=auth).json() for i in ids]
        if all(j["status"] in ("succeeded", "failed", "cancelled") for j in jobs):
            return jobs
        assert worker.poll() is None, log.read_text()[-4000:]
        time.sleep(0.5)
    raise AssertionError(f"jobs not done: {[j['status'] for j in jobs]}\n{log.read_text()[-4000:]}")


TOKEN = "hf_test_write_token_0123456789"


def write_text_file(path: Path, n: int = 40) -> Path:
    """A .jsonl calibration file of real text (C4 documents), like conftest's text_file fixture."""
    import json

    from testkit.models import DATA_DIR

    docs = json.loads((DATA_DIR / "c4" / "c4_demo.json").read_text())[:n]
    path.write_text("".join(json.dumps({"text": d["text"]}) + "\n" for d in docs))
    return path


def tree(path: Path) -> dict[str, bytes]:
    """Every file under `path`, by relative POSIX path."""
    return {f.relative_to(path).as_posix(): f.read_bytes() for f in sorted(path.rglob("*")) if f.is_file()}


def pop_manifest(files: dict[str, bytes]) -> list[dict]:
    """Take the manifest out of a published tree(), checking that it lists exactly the other files
    (bookkeeping aside) with their sizes and sha256s."""
    import hashlib
    import json

    listed = json.loads(files.pop(".nbl-files.json"))["files"]
    assert listed == [
        {"path": p, "size": len(d), "sha256": hashlib.sha256(d).hexdigest()}
        for p, d in sorted(files.items())
        if not p.startswith(".nbl-")
    ]
    return listed


def run_smollm2_job(request, settings_for, team_key_for, tmp_path: Path, job: dict, timeout_s: float = 900):
    """The real SmolLM2 as `local:smollm2` behind Postgres, Redis and a `celery worker`: submit `job`, wait until
    it ends. Returns (settings, the job, its events, the worker's log path)."""
    from fastapi.testclient import TestClient
    from testkit.models import smollm2_gguf

    from service.api import create_app
    from worker.engine.loading.gguf import convert_gguf

    redis_url, queue, _ = request.getfixturevalue("redis_queue")
    settings = settings_for(request.getfixturevalue("pg_url"), broker_url=redis_url, queue_name=queue)
    settings.ensure_dirs()
    convert_gguf(smollm2_gguf(), settings.models_dir / "smollm2")
    auth = team_key_for(settings)
    log = tmp_path / "worker.log"
    worker = start_worker(settings, log)
    try:
        with TestClient(create_app(settings)) as c:
            r = c.post("/v1/jobs", json=job, headers=auth)
            assert r.status_code == 201, r.text
            job_id = r.json()["id"]
            deadline = time.monotonic() + timeout_s
            while (done := c.get(f"/v1/jobs/{job_id}", headers=auth).json())["status"] not in ("succeeded", "failed"):
                assert time.monotonic() < deadline and worker.poll() is None, log.read_text()[-4000:]
                time.sleep(1)
            events = c.get(f"/v1/jobs/{job_id}/events", headers=auth).json()["data"]
    finally:
        stop(worker)
    return settings, done, events, log
