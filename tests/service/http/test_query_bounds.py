"""Integer query parameters are bounded in the schema (issue 10, finding 8): a value past the database's
64-bit integers is a 422 problem+json, never a 500, on SQLite and on Postgres, and the OpenAPI says so."""

from __future__ import annotations

from testkit.service_lib import assert_problem, body

INT64_MAX = 2**63 - 1


def test_huge_event_cursor_is_a_422_not_a_500(client, auth):
    job_id = client.post("/v1/jobs", json=body(), headers=auth).json()["id"]
    for after in (2**63, 10**30):
        r = client.get(f"/v1/jobs/{job_id}/events", params={"after": after}, headers=auth)
        p = assert_problem(r, 422, "validation-error")
        assert p["errors"][0]["loc"] == ["query", "after"], p
    ok = client.get(f"/v1/jobs/{job_id}/events", params={"after": INT64_MAX}, headers=auth)
    assert ok.status_code == 200 and ok.json()["data"] == [], ok.text
    for limit in (0, 10**30):
        assert_problem(
            client.get(f"/v1/jobs/{job_id}/events", params={"limit": limit}, headers=auth), 422, "validation-error"
        )
        assert_problem(client.get("/v1/jobs", params={"limit": limit}, headers=auth), 422, "validation-error")


def test_every_integer_query_parameter_has_bounds_in_the_openapi(client):
    spec = client.get("/openapi.json").json()
    seen = []
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            for param in op.get("parameters", []):
                schema = param["schema"]
                options = schema.get("anyOf", [schema])
                for s in options:
                    if s.get("type") == "integer":
                        seen.append((path, param["name"]))
                        assert "minimum" in s and "maximum" in s, (method, path, param)
                        assert s["maximum"] <= INT64_MAX, (method, path, param)
    assert ("/v1/jobs/{job_id}/events", "after") in seen and ("/v1/jobs", "limit") in seen
