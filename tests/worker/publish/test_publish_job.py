"""Jobs that publish to the Hub end to end, through the real parts on Postgres + Redis: the API stores the
token encrypted, a real `celery worker` process claims the job, reads and decrypts the token from the
DB, compresses a tiny Llama, load-checks, evaluates, and pushes to a fake Hub that records every commit.

- a push: the model files, the card (with model-index from the job's evaluation) and the plot;
- a 401: the job fails with a clear user error;
- canary tokens (a job's own and a team's) appear in no log line, Redis key or value, DB dump,
  response, webhook body, uploaded file or file under NBL_HOME (issue 6, test 11);
- a worker that dies after the Hub accepted the commit and before the job recorded it: the retry adopts
  that commit; the job succeeds with it, and there is no second commit (issue 6, test 5).
"""

from __future__ import annotations

import json
import logging
import subprocess
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from huggingface_hub import ModelCard
from publish_helpers import JOB, REPO, start_worker, stop
from testkit.models import save_tiny_checkpoint
from testkit.webhook_receiver import Receiver

from service.api import create_app

JOB_TOKEN = "hf_CANARYjobtoken_9d41e07b"  # valid at the fake Hub
TEAM_TOKEN = "hf_CANARYteamtoken_c0ffee42"  # rejected by the fake Hub (401)
CANARIES = (JOB_TOKEN, TEAM_TOKEN)


@pytest.fixture
def deployment(request, settings_for, team_key_for):
    """Postgres + Redis settings with a tiny `local:tiny` model and an API key for team alpha."""
    redis_url, queue, redis = request.getfixturevalue("redis_queue")
    settings = settings_for(
        request.getfixturevalue("pg_url"),
        broker_url=redis_url,
        queue_name=queue,
        lease_seconds=5,
        webhook_allowlist="127.0.0.1",
    )  # the webhook receiver of the canary test
    settings.ensure_dirs()
    save_tiny_checkpoint(settings.models_dir / "tiny")
    return settings, team_key_for(settings), redis


@pytest.fixture
def hub():
    from testkit.fakehub import FakeHub

    h = FakeHub(tokens={JOB_TOKEN}).start()
    yield h
    h.stop()


class Recorder:
    """A TestClient whose every response body is kept, to search them afterwards."""

    def __init__(self, client: TestClient, auth: dict):
        self.client, self.auth, self.bodies = client, auth, []

    def __call__(self, method: str, url: str, **kw):
        resp = self.client.request(method, url, headers={**self.auth, **kw.pop("headers", {})}, **kw)
        self.bodies.append(resp.text)
        return resp


def wait_for(api: Recorder, ids: list[str], worker: subprocess.Popen, log: Path, timeout: float = 240) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        jobs = [api("GET", f"/v1/jobs/{i}").json() for i in ids]
        if all(j["status"] in ("succeeded", "failed", "cancelled") for j in jobs):
            return jobs
        assert worker.poll() is None, log.read_text()[-4000:]
        time.sleep(0.5)
    raise AssertionError(f"jobs not done: {[j['status'] for j in jobs]}\n{log.read_text()[-4000:]}")


def redis_dump(r) -> bytes:
    """Every key and value in the test's Redis database."""
    out = []
    for key in r.scan_iter(count=1000):
        kind = r.type(key)
        value = {
            b"string": lambda: [r.get(key)],
            b"list": lambda: r.lrange(key, 0, -1),
            b"hash": lambda: [x for kv in r.hgetall(key).items() for x in kv],
            b"set": lambda: list(r.smembers(key)),
            b"zset": lambda: r.zrange(key, 0, -1),
        }.get(kind, lambda: [])()
        out += [key, *[v for v in value if v is not None]]
    return b"\n".join(out)


def db_dump(url: str) -> str:
    """pg_dump of the whole database: every table, every column."""
    from sqlalchemy.engine import make_url

    u = make_url(url)
    return subprocess.run(
        ["pg_dump", "--data-only", "-h", u.host, "-p", str(u.port or 5432), "-U", u.username, u.database],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def files_under(root: Path) -> bytes:
    return b"\n".join(p.read_bytes() for p in root.rglob("*") if p.is_file())


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


def test_jobs_publish_to_the_hub_and_the_tokens_leak_nowhere(deployment, hub, receiver, tmp_path, caplog):
    from service.core import secrets
    from service.core.db import make_engine, make_sessionmaker
    from service.keys.auth import get_or_create_team, set_team_hub_token
    from service.webhooks import delivery as webhooks
    from service.webhooks import signing

    settings, auth, redis = deployment
    caplog.set_level(logging.DEBUG)  # the API's own log records, all of them
    engine = make_engine(settings)
    with make_sessionmaker(engine)() as s:
        set_team_hub_token(s, "alpha", secrets.encrypt(settings, TEAM_TOKEN))
        signing.set_team_secret(s, settings, get_or_create_team(s, "alpha")[0].id)
    log = tmp_path / "worker.log"
    hook = {"webhook_url": receiver.url}
    with TestClient(create_app(settings)) as client:
        api = Recorder(client, auth)
        good = api(
            "POST", "/v1/jobs", json={**JOB, **hook, "publish": {"repo_id": "alpha/tiny-nbl", "token": JOB_TOKEN}}
        )
        assert good.status_code == 201, good.text
        bad = api("POST", "/v1/jobs", json={**JOB, **hook, "publish": {"repo_id": "alpha/other-nbl"}})  # team's token
        worker = start_worker(settings, log, {"NBL_HF_ENDPOINT": hub.url}, loglevel="DEBUG")
        try:
            job, failed = wait_for(api, [good.json()["id"], bad.json()["id"]], worker, log)
        finally:
            stop(worker)
        events = api("GET", f"/v1/jobs/{job['id']}/events?limit=500").json()["data"]
        api("GET", "/v1/jobs"), api("GET", f"/v1/jobs/{failed['id']}/events")

    # the push: one commit, recorded on the job, holding the model, the card and the plot
    assert job["status"] == "succeeded", (job, log.read_text()[-4000:])
    (commit,) = hub.commits_of("alpha/tiny-nbl")
    (art,) = job["artifacts"]
    assert (art["kind"], art["uri"], art["revision"], art["commit_sha"]) == (
        "hub",
        f"{hub.url}/alpha/tiny-nbl",
        "main",
        commit.id,
    )
    assert f"[nbl-job: {job['id']} k=1]" in commit.title and hub.repos["alpha/tiny-nbl"].private
    assert {"README.md", "nbl_scores.png", "model.safetensors", "modeling_nbl.py", "config.json"} <= set(commit.added)
    stages = [e["stage"] for e in events if e["kind"] == "stage"]
    assert stages == ["load", "calibrate", "score", "compress", "check", "evaluate", "publish"]
    card = ModelCard(commit.files["README.md"].decode())
    ppl = {r.metric_name: r.metric_value for r in card.data.eval_results}
    assert ppl == {
        "wikitext2 ppl (base model)": job["metrics"]["base"]["perplexity/wikitext2/ppl"],
        "wikitext2 ppl (tiny-nbl-attn-k1)": job["metrics"]["k1"]["perplexity/wikitext2/ppl"],
    }
    assert '"id": "local:tiny"' in card.text and 'from_pretrained("alpha/tiny-nbl"' in card.text
    res = job["result"]  # the typed result, from the rows the real worker wrote: the card's numbers
    (out,) = res["outputs"]
    assert res["base"]["perplexity"]["wikitext2"]["ppl"] == ppl["wikitext2 ppl (base model)"]
    assert out["metrics"]["perplexity"]["wikitext2"]["ppl"] == ppl["wikitext2 ppl (tiny-nbl-attn-k1)"]
    assert out["delta"]["perplexity"]["wikitext2"]["ppl"] == pytest.approx(
        ppl["wikitext2 ppl (tiny-nbl-attn-k1)"] - ppl["wikitext2 ppl (base model)"]
    )
    assert (out["k"], out["layers"]) == (1, job["selected_layers"][0]["layers"]) and res["calibration"]["tokens"] > 0
    print(f"\nrecorded commit: {commit.id} on {commit.ref}: {commit.title!r}, files {commit.added}")
    print("card excerpt:\n" + commit.files["README.md"].decode()[:2500])

    # the 401: a clear user error, nothing committed
    assert failed["status"] == "failed" and failed["error"]["type"] == "user", failed
    assert "401 Unauthorized" in failed["error"]["message"] and "set-hub-token" in failed["error"]["message"]
    assert not hub.commits_of("alpha/other-nbl")
    assert any(r["authorization"] == f"Bearer {TEAM_TOKEN}" for r in hub.requests)  # it was the team's token

    # the webhooks of both jobs, delivered as the reconciler delivers them
    with make_sessionmaker(engine)() as s:
        assert webhooks.deliver_due(s, settings) == {"delivered": 4}
    hooks = [json.loads(body) for _, body in receiver.requests]
    assert sorted((h["data"]["id"], h["type"]) for h in hooks) == sorted(
        [
            (job["id"], "job.running"),
            (job["id"], "job.succeeded"),
            (failed["id"], "job.running"),
            (failed["id"], "job.failed"),
        ]
    )
    webhook_text = "\n".join(json.dumps(headers) + body for headers, body in receiver.requests)

    # the canaries: sent to the Hub, and nowhere else
    assert any(r["authorization"] == f"Bearer {JOB_TOKEN}" for r in hub.requests)
    dump, rdump, home = db_dump(settings.database_url), redis_dump(redis), files_under(settings.home)
    uploaded = b"".join(data for c in hub.commits.values() for data in c.files.values())
    for canary in CANARIES:
        assert canary not in log.read_text(), "worker log"
        assert canary not in caplog.text, "API log"
        assert not any(canary in b for b in api.bodies), "API response"
        assert canary not in webhook_text, "webhook"
        assert canary not in dump, "database"
        assert canary.encode() not in rdump, "redis"
        assert canary.encode() not in home, "NBL_HOME"
        assert canary.encode() not in uploaded, "uploaded files"
    with make_sessionmaker(engine)() as s:
        from sqlalchemy import text

        rows = s.execute(text("SELECT id, hub_token_encrypted FROM jobs")).all()
        assert {r.id: r.hub_token_encrypted for r in rows} == {
            job["id"]: None,
            failed["id"]: None,
        }  # deleted at the end
    engine.dispose()


def test_a_crash_after_publishing_keeps_the_first_commit(deployment, hub, tmp_path):
    """The worker dies between the Hub accepting the commit and the job recording it; the job's next
    attempt finds the commit by its marker and records it: succeeded, attempt 2, one commit."""
    from service.core.celery_app import make_celery
    from service.jobs.queue import send_run_job

    settings, auth, _ = deployment
    marker, log = tmp_path / "crashed", tmp_path / "worker.log"
    with TestClient(create_app(settings)) as client:
        api = Recorder(client, auth)
        job_id = api(
            "POST",
            "/v1/jobs",
            json={
                **JOB,
                "evaluation": {"perplexity": []},
                "publish": {"repo_id": "alpha/tiny-nbl", "token": JOB_TOKEN},
            },
        ).json()["id"]
        crashing = start_worker(
            settings,
            log,
            {"NBL_HF_ENDPOINT": hub.url, "NBL_TEST_CRASH_MARKER": str(marker)},
            script=REPO / "tests" / "worker" / "publish" / "crash_after_publish.py",
        )
        try:
            assert crashing.wait(timeout=240) == 137, log.read_text()[-4000:]
        finally:
            stop(crashing)
        first_sha = marker.read_text()
        (commit,) = hub.commits_of("alpha/tiny-nbl")
        assert commit.id == first_sha
        job = api("GET", f"/v1/jobs/{job_id}").json()
        assert job["status"] == "running" and job["artifacts"] == []  # published, not recorded

        time.sleep(settings.lease_seconds + 1)  # the dead worker's lease expires
        celery = make_celery(settings)
        assert send_run_job(celery, job_id)  # what the reconciler does for a job whose worker died
        celery.close()
        worker = start_worker(settings, log, {"NBL_HF_ENDPOINT": hub.url})
        try:
            (job,) = wait_for(api, [job_id], worker, log)
        finally:
            stop(worker)
        events = api("GET", f"/v1/jobs/{job_id}/events?limit=500").json()["data"]

    assert job["status"] == "succeeded" and job["attempt"] == 2, (job, log.read_text()[-4000:])
    assert [c.id for c in hub.commits_of("alpha/tiny-nbl")] == [first_sha]  # no second commit
    (art,) = job["artifacts"]
    assert art["commit_sha"] == first_sha and art["kind"] == "hub"
    assert any("found already published" in (e["message"] or "") for e in events)
