"""NUL (U+0000) anywhere in a request is a 422, in one place (service/http/nul.py), on both databases:
Postgres stores no NUL in text or JSONB, and `GET /v1/jobs?metadata.x=%00` was a 500 there (issue 24,
finding 7) while SQLite matched nothing. Under /ui the 422 is an HTML page, as every page's error is."""

from __future__ import annotations

import json

import pytest
from testkit.service_lib import assert_problem, body

QUERIES = [
    "/v1/jobs?metadata.x=%00",
    "/v1/jobs?metadata.x=a%00b&metadata.y=1",
    "/v1/jobs?metadata.%00=1",
    "/v1/jobs?after=%00",
    "/v1/jobs?status=%00",
    "/v1/jobs?limit=1%00",
]


@pytest.mark.parametrize("url", QUERIES)
def test_nul_in_the_query_is_a_422(client, auth, url):
    client.post("/v1/jobs", json=body(metadata={"x": "a"}), headers=auth)  # something a filter could match
    p = assert_problem(client.get(url, headers=auth), 422, "validation-error")
    assert p["errors"][0]["loc"][0] == "query" and "NUL" in p["detail"], p


def test_nul_in_the_path_headers_and_body_is_a_422(client, auth):
    job = client.post("/v1/jobs", json=body(), headers=auth).json()["id"]
    for method, path in (
        ("GET", "/v1/jobs/job_%00"),
        ("GET", f"/v1/jobs/{job}%00/events"),
        ("POST", f"/v1/jobs/{job}%00/cancel"),
        ("GET", f"/v1/jobs/{job}/outputs/1/files/a%00b"),
    ):
        p = assert_problem(client.request(method, path, headers=auth), 422, "validation-error")
        assert p["errors"][0]["loc"] == ["path"], p
    r = client.post("/v1/jobs", json=body(), headers=auth | {"Idempotency-Key": "key\x00"})
    assert assert_problem(r, 422, "validation-error")["errors"][0]["loc"] == ["header", "idempotency-key"]
    for hostile, loc in (
        (body(metadata={"a": "x\x00"}), ["body", "metadata", "a"]),
        (body(metadata={"a\x00": "x"}), ["body", "metadata", "a\\x00"]),
        (body(webhook_url="http://a\x00.example/"), ["body", "webhook_url"]),
        (body(model="acme/a\x00b"), ["body", "model", "id"]),
        (
            body(evaluation={"task_files": [{"name": "t", "jsonl": "{}\n\x00"}]}),
            ["body", "evaluation", "task_files", 0, "jsonl"],
        ),
    ):
        r = client.post("/v1/jobs", content=json.dumps(hostile), headers=auth | {"content-type": "application/json"})
        assert assert_problem(r, 422, "validation-error")["errors"][0]["loc"] == loc
    assert [j["id"] for j in client.get("/v1/jobs", headers=auth).json()["data"]] == [job]  # nothing stored
    # An escaped backslash then the text `u0000` is no NUL: six characters, stored and read back.
    r = client.post(
        "/v1/jobs",
        content=json.dumps(body(metadata={"a": "\\u0000"})),
        headers=auth | {"content-type": "application/json"},
    )
    assert r.status_code == 201 and r.json()["metadata"] == {"a": "\\u0000"}, r.text


def test_a_dashboard_page_answers_the_422_as_html(client, auth):
    r = client.get("/ui/jobs?metadata.x=%00", headers=auth)
    assert r.status_code == 422 and r.headers["content-type"].startswith("text/html")
    assert "NUL" in r.text and "content-security-policy" in r.headers
