"""A team may create NBL_MAX_JOBS_PER_TEAM_PER_HOUR jobs in any hour, cancelled ones included: a
job cancelled at once frees its place under the active cap but leaves a message in the shared
queue, so submit+cancel in a loop flooded the queue ahead of every team (issue 24, red-team pass).
Real databases (SQLite and Postgres), the real app."""

from __future__ import annotations

from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from testkit.service_lib import assert_problem, body

from service.api import create_app
from service.core.db import make_engine, make_sessionmaker
from service.core.errors import TooManyJobsCreated
from service.core.models import utcnow
from service.core.settings import Settings
from service.jobs.team_caps import WINDOW, check_creation_rate
from service.keys.auth import Principal, get_team


def test_submit_and_cancel_in_a_loop_meets_the_hourly_cap(db_url, settings_for, team_key_for):
    settings = settings_for(db_url, max_jobs_per_team_per_hour=4, max_active_jobs_per_team=100)
    alpha, beta = team_key_for(settings, "alpha"), team_key_for(settings, "beta")
    key = {"Idempotency-Key": "first"}
    with TestClient(create_app(settings)) as c:
        first = c.post("/v1/jobs", json=body(k=3), headers=alpha | key)
        assert first.status_code == 201, first.text
        for i in range(4):
            job = first.json() if i == 0 else c.post("/v1/jobs", json=body(), headers=alpha).json()
            assert c.post(f"/v1/jobs/{job['id']}/cancel", headers=alpha).json()["status"] == "cancelled"

        # Nothing is active, yet the fifth job within the hour is refused, with when to come back.
        resp = c.post("/v1/jobs", json=body(), headers=alpha)
        p = assert_problem(resp, 429, "too-many-jobs-created")
        assert "4 jobs in the last hour" in p["detail"] and "cancelled ones included" in p["detail"], p
        assert 3500 < int(resp.headers["retry-after"]) <= 3600, resp.headers["retry-after"]
        assert len(c.get("/v1/jobs", headers=alpha).json()["data"]) == 4  # nothing was created

        # A replay creates nothing: it is answered, not refused, and not counted.
        again = c.post("/v1/jobs", json=body(k=3), headers=alpha | key)
        assert again.status_code == 201 and again.json()["id"] == first.json()["id"], again.text
        assert again.headers.get("idempotent-replayed") == "true"
        # Another team has its own hour.
        assert c.post("/v1/jobs", json=body(), headers=beta).status_code == 201


def test_the_window_slides_and_an_empty_setting_lifts_the_cap(db_url, settings_for, team_key_for, monkeypatch):
    settings = settings_for(db_url, max_jobs_per_team_per_hour=2)
    alpha = team_key_for(settings, "alpha")
    with TestClient(create_app(settings)) as c:
        for _ in range(2):
            assert c.post("/v1/jobs", json=body(), headers=alpha).status_code == 201
    engine = make_engine(settings)
    try:
        with make_sessionmaker(engine)() as s:
            team = get_team(s, "alpha")
            who = Principal(team_id=team.id, team_name="alpha", max_active_jobs=None)
            with pytest.raises(TooManyJobsCreated) as refused:
                check_creation_rate(s, who, 2)
            check_creation_rate(s, who, 3)  # one more place
            check_creation_rate(s, who, 2, now=utcnow() + WINDOW + timedelta(seconds=1))  # both have aged out
            check_creation_rate(s, who, None)
    finally:
        engine.dispose()
    assert 0 < int(refused.value.headers["Retry-After"]) <= 3600
    monkeypatch.setenv("NBL_MAX_JOBS_PER_TEAM_PER_HOUR", "")
    assert Settings(home=settings.home).max_jobs_per_team_per_hour is None
    monkeypatch.setenv("NBL_MAX_JOBS_PER_TEAM_PER_HOUR", "50")
    assert Settings(home=settings.home).max_jobs_per_team_per_hour == 50
