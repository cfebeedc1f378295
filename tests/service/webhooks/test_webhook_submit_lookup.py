"""POST /v1/jobs resolves a webhook URL's host within the webhook timeout: a name server that never
answers gets the request a 422, not an API thread held for as long as getaddrinfo likes (issue 24,
red-team pass). DNS is the edge of the world here: socket.getaddrinfo is replaced, for that one
host, by one that blocks until the test ends. Real databases, the real app."""

from __future__ import annotations

import socket
import threading
import time

from fastapi.testclient import TestClient
from testkit.service_lib import assert_problem, body

from service.api import create_app

STUCK_HOST = "hooks.stuck-dns.example"
GENEROUS_S = 10.0


def test_a_name_server_that_never_answers_gets_a_422_within_the_timeout(
    db_url, settings_for, team_key_for, monkeypatch
):
    settings = settings_for(db_url, webhook_timeout_s=1.0)
    auth = team_key_for(settings, "alpha")
    release, real = threading.Event(), socket.getaddrinfo

    def stuck(host, *args, **kwargs):
        if host == STUCK_HOST:
            release.wait(120)
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", stuck)
    answers = []
    with TestClient(create_app(settings)) as c:

        def submit():
            answers.append(c.post("/v1/jobs", json=body(webhook_url=f"https://{STUCK_HOST}/in"), headers=auth))

        t0 = time.monotonic()
        caller = threading.Thread(target=submit, daemon=True)
        caller.start()
        try:
            caller.join(1.0 + GENEROUS_S)
            elapsed = time.monotonic() - t0
            assert answers, "POST /v1/jobs still waits on the name server"
        finally:
            release.set()  # frees the lookup (and, before the fix, the request) so that the app can stop
            caller.join(30)
        p = assert_problem(answers[0], 422, "validation-error")
        assert f"{STUCK_HOST!r} did not resolve within 1 s" in p["detail"], p
        assert p["errors"][0]["loc"] == ["body", "webhook_url"]
        assert elapsed >= 0.9, elapsed  # it did wait for the answer, up to the timeout
        assert c.get("/v1/jobs", headers=auth).json()["data"] == []  # nothing was created
