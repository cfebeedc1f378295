"""GET /v1/jobs/{id}/events/stream on both databases: every event once, in order, then `end`;
resumed after Last-Event-ID (over ?after=); team scoping and auth as the other job routes; and,
on a live server, a running job's new events while the stream is open (nbl_client's parser)."""

from __future__ import annotations

import json
import socket
import threading

import httpx
from testkit.ui_seed import seed_job

from nbl_client.stream import parse
from service.api import create_app
from service.core.db import make_engine, make_sessionmaker
from service.core.models import Job
from service.jobs import states, store


def _items(text: str) -> list[tuple[str, dict, str | None]]:
    return [(kind, json.loads(data), ident) for kind, data, ident in parse(text.splitlines()) if kind != "comment"]


def _key(headers: dict) -> str:
    return headers["Authorization"].split()[1]


def test_stream_of_an_ended_job_resumes_and_is_team_scoped(client, auth, team_key, sessions, settings):
    job = seed_job(sessions, settings, _key(auth))
    r = client.get(f"/v1/jobs/{job}/events/stream", headers=auth)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    items = _items(r.text)
    events = [(d["id"], i) for k, d, i in items if k == "message"]
    listed = client.get(f"/v1/jobs/{job}/events", params={"limit": 1000}, headers=auth).json()["data"]
    assert [e for e, _ in events] == [e["id"] for e in listed] and all(str(e) == i for e, i in events)
    assert items[-1][0] == "end" and items[-1][1]["status"] == "succeeded"
    middle = events[len(events) // 2][0]
    resumed = _items(
        client.get(
            f"/v1/jobs/{job}/events/stream", params={"after": 0}, headers=auth | {"Last-Event-ID": str(middle)}
        ).text
    )
    assert [d["id"] for k, d, _ in resumed if k == "message"] == [e for e, _ in events if e > middle]
    assert client.get(f"/v1/jobs/{job}/events/stream", headers=auth | {"Last-Event-ID": "x"}).status_code == 422
    other = client.get(f"/v1/jobs/{job}/events/stream", headers=team_key("beta"))
    assert other.status_code == 404 and other.headers["content-type"] == "application/problem+json"
    assert client.get(f"/v1/jobs/{job}/events/stream").status_code == 401
    # The dashboard's route takes the login cookie only for the team's own jobs.
    assert client.get(f"/ui/jobs/{job}/events/stream", headers=team_key("beta")).status_code == 404


def test_a_running_job_streams_its_new_events_then_ends(sqlite_clean_url, settings_for, live_server, team_key_for):
    settings = settings_for(sqlite_clean_url, stream_poll_s=0.05)
    url, auth = live_server(create_app(settings)), team_key_for(settings, "alpha")
    from service.core.db import make_engine, make_sessionmaker

    engine = make_engine(settings)
    sessions = make_sessionmaker(engine)
    job = seed_job(sessions, settings, _key(auth), finish=None)
    seen: list = []
    with httpx.stream("GET", f"{url}/v1/jobs/{job}/events/stream", headers=auth, timeout=30) as r:
        lines = r.iter_lines()
        for kind, data, _ in parse(lines):
            seen.append((kind, data))
            if kind == "job" and len([k for k, _ in seen if k == "job"]) == 1:

                def worker():  # written while the stream is open
                    with sessions() as s:
                        token = s.get(Job, job).lease_token
                        store.add_event(s, job, "log", "late news", stage="evaluate")
                        states.finish(s, job, token, "succeeded")

                threading.Thread(target=worker).start()
            if kind == "end":
                break
    engine.dispose()
    messages = [json.loads(d)["message"] for k, d in seen if k == "message"]
    assert "late news" in messages and messages[-1] == "succeeded"
    assert json.loads(seen[-1][1])["status"] == "succeeded"


def test_a_last_event_id_past_an_ids_digits_is_a_422_not_a_500(client, auth, sessions, settings):
    """int() refuses more than 4,300 digits, and `isdigit` passes "²" that int() refuses: both were a 500 on the
    API and on the dashboard's stream (issue 35, finding 5); now the 422 of any other bad id."""
    job = seed_job(sessions, settings, _key(auth))
    for bad in ("9" * 5000, "9" * 20):
        r = client.get(f"/v1/jobs/{job}/events/stream", headers=auth | {"Last-Event-ID": bad})
        assert r.status_code == 422 and r.headers["content-type"] == "application/problem+json", (bad[:8], r.text)
        assert r.json()["errors"][0]["loc"] == ["header", "Last-Event-ID"]
        page = client.get(f"/ui/jobs/{job}/events/stream", headers=auth | {"Last-Event-ID": bad})
        assert page.status_code == 422 and page.headers["content-type"].startswith("text/html"), (bad[:8], page.text)
    last = str(2**63 - 1)  # the largest id: no more events after it, then `end`
    assert client.get(f"/v1/jobs/{job}/events/stream", headers=auth | {"Last-Event-ID": last}).status_code == 200


def test_a_last_event_id_of_other_digits_is_a_422(sqlite_clean_url, settings_for, live_server, team_key_for):
    """The byte 0xB2 is "²" to the server (headers are latin-1): `isdigit` took it and int() raised (a 500)."""
    settings = settings_for(sqlite_clean_url)
    base, auth = live_server(create_app(settings)), team_key_for(settings, "alpha")
    engine = make_engine(settings)
    job = seed_job(make_sessionmaker(engine), settings, _key(auth))
    engine.dispose()
    host, port = base.removeprefix("http://").split(":")
    for path in (f"/v1/jobs/{job}/events/stream", f"/ui/jobs/{job}/events/stream"):
        with socket.create_connection((host, int(port))) as conn:  # raw: an HTTP client would encode the header
            conn.sendall(
                f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: {auth['Authorization']}\r\n"
                f"Connection: close\r\nLast-Event-ID: ".encode()
                + b"\xb2\r\n\r\n"
            )
            status = conn.makefile("rb").readline()
        assert status.split()[1] == b"422", (path, status)
