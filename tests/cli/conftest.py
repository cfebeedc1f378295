"""Fixtures of the CLI tests: the API on a live server with `nbl`'s client commands pointed at it."""

from __future__ import annotations

import pytest


@pytest.fixture
def serve_api(settings_for, live_server, team_key_for, monkeypatch):
    """serve_api(database_url) -> Settings: the API on a live uvicorn server over that database, and
    NBL_API_URL and NBL_API_KEY (a key of team `ci`) set for the `nbl` client commands."""
    from service.api import create_app

    def start(url: str):
        settings = settings_for(url)
        monkeypatch.setenv("NBL_API_URL", live_server(create_app(settings)))
        monkeypatch.setenv("NBL_API_KEY", team_key_for(settings, "ci")["Authorization"].split()[1])
        return settings

    return start


@pytest.fixture
def served(sqlite_clean_url, serve_api):
    """The API on SQLite, live, `nbl` pointed at it; its Settings (a module may override this fixture to serve
    another database, as test_wait_result.py does both)."""
    return serve_api(sqlite_clean_url)
