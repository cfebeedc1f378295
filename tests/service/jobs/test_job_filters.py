"""GET /v1/jobs?metadata.KEY=VALUE on SQLite and Postgres: filters ANDed, with status and paging;
any query parameter the route does not declare is a 422, never ignored."""

from __future__ import annotations

import pytest
from testkit.service_lib import assert_problem, body


def ids(client, auth, query: str) -> list[str]:
    r = client.get(f"/v1/jobs?{query}", headers=auth)
    assert r.status_code == 200, r.text
    return [j["id"] for j in r.json()["data"]]


def make(client, auth, **metadata) -> str:
    r = client.post("/v1/jobs", json=body(metadata=metadata), headers=auth)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def test_metadata_filters_are_anded(client, auth, team_key):
    main = make(client, auth, ci="1", branch="main")
    dev = make(client, auth, ci="1", branch="dev")
    other = make(client, auth, ci="2")
    odd = make(client, auth, **{"ci:run/x.y-z": "a b=c&d"})
    make(client, team_key("beta"), ci="1", branch="main")  # another team's: never listed

    assert ids(client, auth, "metadata.ci=1") == [dev, main]
    assert ids(client, auth, "metadata.ci=1&metadata.branch=main") == [main]
    assert ids(client, auth, "metadata.branch=main&metadata.ci=2") == []
    assert ids(client, auth, "metadata.ci=1&metadata.ci=2") == []  # the same key twice: both must hold
    assert ids(client, auth, "metadata.ci=2") == [other]
    assert ids(client, auth, "metadata.nope=1") == []
    assert ids(client, auth, "metadata.ci=") == []  # the empty value is a value, not "any"
    assert ids(client, auth, "metadata.ci%3Arun%2Fx.y-z=a%20b%3Dc%26d") == [odd]
    assert ids(client, auth, "metadata.ci=1&status=queued&limit=1") == [dev]
    assert ids(client, auth, "metadata.ci=1&status=failed") == []
    page = client.get("/v1/jobs?metadata.ci=1&limit=1", headers=auth).json()
    assert page["has_more"] and ids(client, auth, f"metadata.ci=1&limit=1&after={page['next_cursor']}") == [main]


@pytest.mark.parametrize(
    "query, param",
    [
        ("stauts=failed", "stauts"),  # a misspelt filter used to list every job
        ("metadata_ci=1", "metadata_ci"),
        ("metadata=ci", "metadata"),
        ("metadata.=1", "metadata."),
        ("metadata.a%20b=1", "metadata.a b"),  # not a metadata key
        ("limit=5&sort=asc", "sort"),
    ],
)
def test_unknown_query_parameter_is_a_422(client, auth, query, param):
    make(client, auth, ci="1")
    p = assert_problem(client.get(f"/v1/jobs?{query}", headers=auth), 422, "validation-error")
    assert p["errors"][0]["loc"] == ["query", param] and repr(param) in p["detail"]


def test_metadata_filter_bounds(client, auth):
    too_many = "&".join(f"metadata.k{i}=v" for i in range(17))
    assert_problem(client.get(f"/v1/jobs?{too_many}", headers=auth), 422, "validation-error")
    assert_problem(client.get(f"/v1/jobs?metadata.k={'x' * 513}", headers=auth), 422, "validation-error")
    assert client.get("/v1/jobs?metadata.k=" + "x" * 512, headers=auth).json()["data"] == []


def test_the_filter_is_in_the_openapi(client):
    op = client.get("/openapi.json").json()["paths"]["/v1/jobs"]["get"]
    assert "metadata.KEY=VALUE" in op["description"]
    assert {p["name"] for p in op["parameters"]} == {"limit", "after", "status"}
