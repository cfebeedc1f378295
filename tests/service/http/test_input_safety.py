"""Issue 6, test 12 and the limits: hostile identifiers and oversized requests are 4xx with nothing
queued (no row in the jobs table, no message in the real Redis broker); per-team caps are 429 with
Retry-After. Real databases, real Redis."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from testkit.service_lib import assert_problem, body, job_count

from nbl.names import hub_id, model_id, revision
from nbl.request_fields import dataset_name
from service.api import create_app

# Every one of these must be refused by the grammar, wherever an identifier goes.
HOSTILE_IDS = [
    "../x",
    "owner/../x",
    "owner/..",
    "..",
    ".",
    "a/./b",
    "/etc/passwd",
    "./model",
    "~/model",
    "~root/x",
    "%2e%2e/x",
    "owner/%2e%2e",
    "..%2f..%2fetc",
    "owner%2Fname",
    "https://evil.example/x",
    "http:/x",
    "file:///etc/passwd",
    "hf://owner/name",
    "s3://bucket/key",
    "C:\\Windows",
    "C:/Windows",
    "owner\\name",
    "\\\\server\\share",
    "-rf",
    "owner/-name",
    "-owner/name",
    "owner/name-",
    "_owner/name",
    ".owner/name",
    "owner/name.git",
    "own--er/name",
    "owner/na..me",
    "owner/name\x00",
    "own\x00er/name",
    "owner/name\n",
    "owner/name ",
    " owner/name",
    "owner /name",
    "owner/na\tme",
    "ｏwner/name",
    "owner/nаme",  # fullwidth o; Cyrillic a
    "owner/name\u200b",
    "owner\u2215name",
    "owner\u2044name",
    "owner\uff0fname",
    "o\u0301wner/name",
    "a/b/c",
    "owner/",
    "/name",
    "",
    "a" * 97 + "/x",
    "x/" + "a" * 97,
    "a" * 10_000,
    "owner/name;rm -rf",
    "owner/name|x",
    "$(id)/x",
    "`id`/x",
    "owner/name?x=1",
    "owner/name#x",
    "owner/name@main",
]

# Not repo ids, but legal git branch names (the Hub URL-quotes a revision whole): harmless there.
LEGAL_BRANCH_NAMES = {
    "owner/-name",
    "owner/name-",
    "owner/name.git",
    "own--er/name",
    "a/b/c",
    "a" * 97 + "/x",
    "x/" + "a" * 97,
}


# The same hostile strings in every place a request names something, plus oversize values.
def hostile_bodies() -> dict[str, object]:
    bodies: dict[str, object] = {}
    for i, s in enumerate(HOSTILE_IDS):
        bodies[f"model {i} {s[:20]!r}"] = body(model=s)
        bodies[f"local model {i}"] = body(model="local:" + s)
        if s not in ("c4", "wikitext2"):
            bodies[f"dataset {i}"] = body(calibration={"dataset": s})
        bodies[f"publish repo {i}"] = body(publish={"repo_id": s})
        bodies[f"publish dir {i}"] = body(publish={"local_dir": s})
    for s in ("../main", "main/../../x", "refs//heads", "main/", "x.lock", "-main", "ma\x00in", "mаin", "a" * 300):
        bodies[f"revision {s[:20]!r}"] = {"model": {"id": "a/b", "revision": s}, "compression": {"k": 4}}
    for name in ("owner/calib.jsonl", "data.json", "owner/x.parquet", "notes.TXT"):  # read as local files
        bodies[f"dataset file {name}"] = body(calibration={"dataset": name})
    for field, value in (
        ("config", "../x"),
        ("split", "train;drop"),
        ("split", "train/../x"),
        ("text_field", "../text"),
        ("text_field", "x" * 100),
    ):
        bodies[f"calibration {field} {value[:20]!r}"] = body(calibration={field: value})
    bodies.update(
        {
            "trust_remote_code on the model": {
                "model": {"id": "a/b", "trust_remote_code": True},
                "compression": {"k": 4},
            },
            "trust_remote_code at the top": body(trust_remote_code=True),
            "num_samples huge": body(calibration={"num_samples": 10**12}),
            "seq_len huge": body(calibration={"seq_len": 2**63}),
            "k huge": body(k=2**40),
            "k list too long": body(k=list(range(1, 40))),
            "eval limit huge": body(evaluation={"limit": 10**9}),
            "metadata too many keys": body(metadata={f"k{i}": "v" for i in range(17)}),
            "metadata value too long": body(metadata={"k": "v" * 513}),
            "metadata key with NUL": body(metadata={"k\x00": "v"}),
            "metadata key not ASCII": body(metadata={"ключ": "v"}),
            "metadata value with NUL": body(metadata={"k": "a\x00b"}),  # was a 500 on Postgres (JSONB)
            "metadata value with a lone surrogate":  # raw JSON: the escape decodes to a str UTF-8 cannot hold
            b'{"model": {"id": "a/b"}, "compression": {"k": 4}, "metadata": {"k": "a\\ud800b"}}',
            "webhook file url": body(webhook_url="file:///etc/passwd"),
            "webhook credentials": body(webhook_url="https://user:pass@hooks.example.com/x"),
            "webhook too long": body(webhook_url="https://hooks.example.com/" + "a" * 3000),
            "webhook unicode host": body(webhook_url="https://hооks.example.com/"),
            "webhook loopback": body(webhook_url="http://127.0.0.1:9/x"),
            "webhook metadata service": body(webhook_url="http://169.254.169.254/latest/meta-data/"),
        }
    )
    return bodies


@pytest.mark.parametrize("value", HOSTILE_IDS)
def test_grammars_refuse_hostile_identifiers(value):
    for check in (model_id, dataset_name, hub_id, lambda v: hub_id(v, need_owner=True), revision):
        if check is revision and value in LEGAL_BRANCH_NAMES:
            continue
        with pytest.raises(ValueError):
            check(value)
    with pytest.raises(ValueError):
        model_id("local:" + value)


def test_the_grammar_still_takes_real_ids():
    for good in (
        "HuggingFaceTB/SmolLM2-135M-Instruct",
        "meta-llama/Llama-3.1-8B",
        "gpt2",
        "Qwen/Qwen3-0.6B",
        "deepseek-ai/DeepSeek-R1-Distill-Llama-8B",
        "local:smollm2",
        "local:my_model.v2",
    ):
        assert model_id(good) == good
    assert revision("refs/pr/1") == "refs/pr/1" and revision("a" * 40) == "a" * 40


def test_hostile_and_oversized_requests_are_4xx_with_nothing_queued(pg_url, settings_for, team_key_for, redis_queue):
    broker, queue, r = redis_queue
    settings = settings_for(pg_url, broker_url=broker, queue_name=queue, max_request_bytes=16 * 1024)
    auth = team_key_for(settings)
    bodies = hostile_bodies()
    with TestClient(create_app(settings)) as c:
        for name, bad in bodies.items():
            if isinstance(bad, bytes):
                resp = c.post("/v1/jobs", content=bad, headers=auth | {"Content-Type": "application/json"})
            else:
                resp = c.post("/v1/jobs", json=bad, headers=auth)
            assert 400 <= resp.status_code < 500, (name, resp.status_code, resp.text[:300])
            assert_problem(resp, resp.status_code, "validation-error")
        # Oversized: declared, chunked, and a lying Content-Length.
        huge = json.dumps(body(metadata={"k": "x" * 20_000})).encode()
        assert_problem(
            c.post("/v1/jobs", content=huge, headers=auth | {"Content-Type": "application/json"}),
            413,
            "payload-too-large",
        )
        chunks = (huge[i : i + 1024] for i in range(0, len(huge), 1024))
        assert_problem(
            c.post("/v1/jobs", content=chunks, headers=auth | {"Content-Type": "application/json"}),
            413,
            "payload-too-large",
        )
        assert_problem(
            c.post(
                "/v1/jobs",
                content=b"{}",
                headers=auth | {"Content-Type": "application/json", "Content-Length": "99999999999"},
            ),
            413,
            "payload-too-large",
        )
        # Deeply nested JSON: refused, not a recursion crash.
        nested = b'{"model":' * 5000 + b"{}" + b"}" * 5000
        resp = c.post("/v1/jobs", content=nested[:15000], headers=auth | {"Content-Type": "application/json"})
        assert 400 <= resp.status_code < 500
        # Hostile headers.
        for headers in ({"Idempotency-Key": "a" * 300}, {"Idempotency-Key": "ключ".encode()}, {"Idempotency-Key": " "}):
            resp = c.post("/v1/jobs", json=body(), headers=auth | headers)
            assert 400 <= resp.status_code < 500, headers
        # Hostile path parameters read as a plain 404 (a NUL anywhere is a 422: service/http/nul.py).
        for job_id in ("../../etc/passwd", "job_%2e%2e", "job_" + "0" * 31 + "%00", "' OR 1=1 --", "job_%0a"):
            resp = c.get(f"/v1/jobs/{job_id}", headers=auth)
            assert resp.status_code == (422 if "%00" in job_id else 404), (job_id, resp.status_code, resp.text[:200])
    assert job_count(settings) == 0
    assert r.llen(queue) == 0 and not list(r.scan_iter(f"*{queue}*"))
    print(f"{len(bodies)} hostile bodies refused")


def test_team_caps_answer_429_with_retry_after(db_url, settings_for, team_key_for):
    settings = settings_for(db_url, max_active_jobs_per_team=3, max_queued_jobs_per_team=2, cap_retry_after_s=17)
    alpha, beta = team_key_for(settings, "alpha"), team_key_for(settings, "beta")
    with TestClient(create_app(settings)) as c:
        ids = [c.post("/v1/jobs", json=body(), headers=alpha).json()["id"] for _ in range(2)]
        # queued cap (2): the third is refused with Retry-After, and nothing is created.
        resp = c.post("/v1/jobs", json=body(), headers=alpha)
        p = assert_problem(resp, 429, "too-many-active-jobs")
        assert resp.headers["retry-after"] == "17" and "queued" in p["detail"]
        # Another team is not affected.
        assert c.post("/v1/jobs", json=body(), headers=beta).status_code == 201
        # One starts running: a queued slot frees, the active cap (3) still has room for one.
        from service.core.db import make_engine, make_sessionmaker
        from service.jobs import lease

        engine = make_engine(settings)
        with make_sessionmaker(engine)() as s:
            assert lease.claim_job(s, ids[0], 60)
        engine.dispose()
        assert c.post("/v1/jobs", json=body(), headers=alpha).status_code == 201
        resp = c.post("/v1/jobs", json=body(), headers=alpha)
        p = assert_problem(resp, 429, "too-many-active-jobs")
        assert resp.headers["retry-after"] == "17" and "active" in p["detail"]
        # An idempotent replay of an existing job is not a new job: no 429.
        key = {"Idempotency-Key": "replay-1"}
        c.post(f"/v1/jobs/{ids[1]}/cancel", headers=alpha)
        first = c.post("/v1/jobs", json=body(k=7), headers=alpha | key)
        assert first.status_code == 201
        assert c.post("/v1/jobs", json=body(k=7), headers=alpha | key).json()["id"] == first.json()["id"]
    assert job_count(settings) == 5


@pytest.mark.parametrize("backend", ["postgres", "sqlite"])
def test_the_cap_holds_under_concurrent_posts(backend, request, settings_for, live_server, team_key_for):
    """12 simultaneous POSTs against a cap of 3 on a real server: exactly 3 jobs, 9 answers 429."""
    import threading

    import httpx

    url = request.getfixturevalue("pg_url" if backend == "postgres" else "sqlite_clean_url")
    settings = settings_for(url, max_active_jobs_per_team=3)
    base = live_server(create_app(settings))
    headers = team_key_for(settings, "racers")
    n, barrier, codes = 12, threading.Barrier(12), []

    def post() -> None:
        with httpx.Client(base_url=base, timeout=60) as c:
            barrier.wait()
            codes.append(c.post("/v1/jobs", json=body(), headers=headers).status_code)

    threads = [threading.Thread(target=post) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(codes) == [201] * 3 + [429] * 9
    assert job_count(settings) == 3
