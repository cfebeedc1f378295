"""Every route refuses a query parameter it does not declare (issue 35, finding 8; service/http/query.py):
a 422 problem+json naming it on the API, the 422 error page on the dashboard. Those it declares still work."""

from __future__ import annotations

import re

from fastapi.routing import APIRoute
from testkit.service_lib import assert_problem, body
from testkit.ui_seed import seed_job

# The routes of the finding, which answered 200 and ignored the parameter.
NAMED = {
    "/v1/models",
    "/v1/usage",
    "/v1/jobs/{job_id}",
    "/v1/jobs/{job_id}/events",
    "/v1/jobs/{job_id}/layers",
    "/v1/jobs/{job_id}/events/stream",
}


def _routes(routes):
    """Every route of the app, through FastAPI's included routers (their original APIRoute objects)."""
    for route in routes:
        if hasattr(route, "effective_candidates"):
            yield from _routes(route.effective_candidates())
        else:
            yield getattr(route, "original_route", route)


def test_every_route_refuses_an_undeclared_query_parameter(client, auth, sessions, settings):
    job = seed_job(sessions, settings, auth["Authorization"].split()[1])
    values = {"job_id": job, "k": "2", "path": "config.json"}
    checked = set()
    for route in _routes(client.app.routes):
        if not isinstance(route, APIRoute):
            continue
        path = re.sub(r"{(\w+)(:\w+)?}", lambda m: values[m.group(1)], route.path)
        for method in route.methods - {"HEAD"}:
            r = client.request(method, path + "?bogus=1", headers=auth)
            if path.startswith("/ui"):
                assert r.status_code == 422 and r.headers["content-type"].startswith("text/html"), (method, path)
                assert "bogus" in r.text
            else:
                p = assert_problem(r, 422, "validation-error")
                assert p["errors"][0]["loc"] == ["query", "bogus"], (method, path, p)
            checked.add(route.path)
    assert NAMED <= checked and "/ui/jobs/{job_id}/events/stream" in checked


def test_declared_parameters_are_still_taken(client, auth, sessions, settings):
    job = seed_job(sessions, settings, auth["Authorization"].split()[1], metadata={"ci": "1"})
    for path in (
        "/v1/models?limit=1",
        "/v1/usage?limit=1",
        f"/v1/jobs/{job}/events?after=0&limit=5",
        "/v1/jobs?metadata.ci=1&limit=5&status=succeeded",
        "/ui/jobs?metadata.ci=1&status=succeeded",
        "/ui/login?next=/ui/jobs",
        f"/v1/jobs/{job}/events/stream?after=0",
    ):
        r = client.get(path, headers=auth)
        assert r.status_code == 200, (path, r.text[:300])
    assert job in client.get("/ui/jobs?metadata.ci=1", headers=auth).text
    assert job not in client.get("/ui/jobs?metadata.ci=2", headers=auth).text
    p = assert_problem(client.get("/v1/models?limt=5", headers=auth), 422, "validation-error")
    assert "'limt'" in p["detail"] and "after, limit" in p["detail"]


def test_a_bad_key_is_still_a_401_before_the_422(client):
    for path in ("/v1/jobs?stauts=failed", "/v1/models?limt=5", "/v1/jobs/job_x/events/stream?bogus=1"):
        for headers in ({"Authorization": "Bearer nbl_not-a-key"}, {}):
            assert_problem(client.get(path, headers=headers), 401, "unauthorized")


def test_a_post_with_an_undeclared_parameter_creates_nothing(client, auth):
    assert_problem(client.post("/v1/jobs?dry_run=1", json=body(), headers=auth), 422, "validation-error")
    assert client.get("/v1/jobs", headers=auth).json()["data"] == []
