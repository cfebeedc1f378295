"""One team's flood is refused, not queued for everyone (issue 35, findings 2 and 3; service/http/admission.py).

The API process is held to one thread, kept busy, so that every request that got in is still in flight:
the team's requests past its limit are answered at once (429, Retry-After), without a thread or a
connection, while another team's read, and the flooding team's own submit (writes count apart), wait
their turn and are answered once the thread is free. Streams have their own cap, the dashboard's included."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import anyio.to_thread
import httpx
from fastapi.testclient import TestClient
from sqlalchemy import event, select
from testkit.service_lib import assert_problem, body
from testkit.ui_seed import seed_job

from service.api import create_app
from service.core.db import make_engine, make_sessionmaker
from service.core.models import ApiKey
from service.keys.auth import create_key, get_or_create_team, hash_key, revoke_key

FLOOD = 20
LIMIT = 2


async def _one_thread() -> None:
    anyio.to_thread.current_default_thread_limiter().total_tokens = 1


async def _threads_busy() -> int:
    return anyio.to_thread.current_default_thread_limiter().borrowed_tokens


def _until(done, what: str, timeout_s: float = 30.0) -> None:
    """Waits for `done()`; fails saying `what` was not seen (a bound on the wait, not a timing assertion)."""
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_a_teams_flood_gets_429s_while_another_team_is_answered(db_url, settings_for, team_key_for):
    settings = settings_for(db_url, max_reads_per_team=LIMIT)
    alpha, beta = team_key_for(settings, "alpha"), team_key_for(settings, "beta")
    app = create_app(settings)
    with TestClient(app) as client:
        job = client.post("/v1/jobs", json=body(), headers=beta).json()["id"]
        for headers in (alpha, beta):  # both keys known to this process
            assert client.get("/v1/models", headers=headers).status_code == 200
        client.portal.call(_one_thread)
        free = threading.Event()
        client.portal.start_task_soon(anyio.to_thread.run_sync, free.wait)  # the thread, busy until `free`
        _until(lambda: client.portal.call(_threads_busy) == 1, "the one thread taken")
        with ThreadPoolExecutor(FLOOD + 2) as pool:
            try:
                flood = [pool.submit(client.get, "/v1/models", headers=alpha) for _ in range(FLOOD)]
                _until(
                    lambda: sum(f.done() for f in flood) >= FLOOD - LIMIT,
                    f"{FLOOD - LIMIT} of alpha's {FLOOD} reads answered while the thread is busy",
                )
                read = pool.submit(client.get, f"/v1/jobs/{job}", headers=beta)
                submit = pool.submit(client.post, "/v1/jobs", json=body(), headers=alpha)
            finally:
                free.set()
            answers = [f.result() for f in flood]
            assert read.result().status_code == 200, read.result().text
            assert submit.result().status_code == 201, submit.result().text
        refused = [r for r in answers if r.status_code == 429]
        assert sorted(r.status_code for r in answers) == [200] * LIMIT + [429] * (FLOOD - LIMIT)
        for r in refused:
            assert_problem(r, 429, "too-many-requests")
            assert r.headers["retry-after"] == "1"
        assert client.get("/v1/models", headers=alpha).status_code == 200  # its slots were given back
        assert app.state.engine.pool.checkedout() == 0


def test_a_revoked_key_is_refused_at_once_though_its_team_is_cached(client, auth, sessions):
    assert client.get("/v1/models", headers=auth).status_code == 200  # its team now cached
    with sessions() as s:
        revoke_key(s, s.scalar(select(ApiKey.id).where(ApiKey.key_hash == hash_key(auth["Authorization"].split()[1]))))
    assert_problem(client.get("/v1/models", headers=auth), 401, "unauthorized")
    assert_problem(client.get("/v1/jobs", headers=auth), 401, "unauthorized")


def test_a_flood_from_a_key_not_seen_yet_looks_it_up_once(sqlite_clean_url, settings_for):
    from service.http.key_teams import KeyTeams

    settings = settings_for(sqlite_clean_url)
    engine = make_engine(settings)
    with make_sessionmaker(engine)() as s:
        key, _ = create_key(s, get_or_create_team(s, "alpha")[0])
    lookups = []
    event.listen(engine, "before_cursor_execute", lambda *a: lookups.append(a[2]) if "api_keys" in a[2] else None)
    teams = KeyTeams(engine)

    async def flood():
        return await asyncio.gather(*(teams.team_of(key) for _ in range(50)), teams.team_of("nbl_not-a-key"))

    found = asyncio.run(flood())
    assert len(set(found[:50])) == 1 and found[0] is not None and found[50] is None
    assert len(lookups) == 2  # one per key
    engine.dispose()


def _open_stream(c: httpx.Client, path: str, headers: dict):
    r = c.send(c.build_request("GET", path, headers=headers), stream=True)
    if r.status_code == 200:
        r.lines = r.iter_lines()  # kept: a dropped iterator closes the stream
        next(r.lines)  # the stream's first line: it is open on the server
    return r


def test_event_streams_are_capped_per_team(sqlite_clean_url, settings_for, live_server, team_key_for):
    settings = settings_for(sqlite_clean_url, max_streams_per_team=2, stream_poll_s=0.05)
    base = live_server(create_app(settings))
    alpha, beta = team_key_for(settings, "alpha"), team_key_for(settings, "beta")
    engine = make_engine(settings)
    sessions = make_sessionmaker(engine)
    job = seed_job(sessions, settings, alpha["Authorization"].split()[1], finish=None)  # running: streams stay open
    other = seed_job(sessions, settings, beta["Authorization"].split()[1], finish=None)
    engine.dispose()
    with httpx.Client(base_url=base, timeout=30) as c:
        open_ = [_open_stream(c, f"/v1/jobs/{job}/events/stream", alpha) for _ in range(2)]
        assert [r.status_code for r in open_] == [200, 200]
        for path in (f"/v1/jobs/{job}/events/stream", f"/ui/jobs/{job}/events/stream"):
            third = _open_stream(c, path, alpha)
            assert third.status_code == 429 and third.headers["retry-after"] == "5", path
            third.read()
            if path.startswith("/v1"):
                assert_problem(third, 429, "too-many-streams")
        theirs = _open_stream(c, f"/v1/jobs/{other}/events/stream", beta)
        assert theirs.status_code == 200
        assert c.get(f"/v1/jobs/{job}", headers=alpha).status_code == 200  # streams are not reads
        open_.pop().close()
        again = None
        deadline = time.monotonic() + 20
        while again is None or again.status_code == 429:  # the server sees the closed stream's disconnect
            assert time.monotonic() < deadline, "a closed stream's slot was given back"
            again = _open_stream(c, f"/v1/jobs/{job}/events/stream", alpha)
            if again.status_code == 429:
                again.close()
                time.sleep(0.05)
        assert again.status_code == 200
        for r in (*open_, theirs, again):
            r.close()


def test_every_event_stream_route_counts_as_a_stream(client):
    """admission.STREAMS names the stream routes (a stream holds its slot for minutes: it must not be a read)."""
    from fastapi.sse import EventSourceResponse

    from service.http.admission import STREAMS

    def routes(items):
        for route in items:
            if hasattr(route, "effective_candidates"):
                yield from routes(route.effective_candidates())
            else:
                yield getattr(route, "original_route", route)

    streams = [r.path for r in routes(client.app.routes) if getattr(r, "response_class", None) is EventSourceResponse]
    assert sorted(streams) == ["/ui/jobs/{job_id}/events/stream", "/v1/jobs/{job_id}/events/stream"]
    assert all(STREAMS.fullmatch(p.replace("{job_id}", "job_0a1b")) for p in streams)
    assert not STREAMS.fullmatch("/v1/jobs/job_0a1b/events")


def test_made_up_keys_holding_slow_bodies_do_not_lock_a_stale_session_out_of_logging_in(
    sqlite_clean_url, settings_for, live_server, team_key_for
):
    """Keys that are not live share one set of limits. Without any key of its own, a client held them all with
    request bodies it never finished (POST /v1/jobs with a made-up `nbl_...` key: the body is read before the key
    is checked), and then a browser whose login cookie held a revoked key was a 429 at the login form, and could
    not log in again. The dashboard's login and logout take no key from the request's credentials: not counted."""
    import secrets
    import select
    import socket

    from testkit.ui_forms import csrf_field

    settings = settings_for(sqlite_clean_url, max_writes_per_team=LIMIT)
    base = live_server(create_app(settings))
    alpha = team_key_for(settings, "alpha")["Authorization"].split()[1]
    port = int(base.rsplit(":", 1)[1])
    held = []
    try:
        for _ in range(LIMIT + 1):  # every slot of the keys that are not live, and one more
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(
                f"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer nbl_{secrets.token_urlsafe(32)}\r\n"
                "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{".encode()
            )
            held.append(s)
        # The server takes the connections in its own order: whichever came last is refused, not always held[-1].
        readable, _, _ = select.select(held, [], [], 30)
        assert len(readable) == 1, f"{len(readable)} of {LIMIT + 1} answered: one is refused, the rest are held"
        assert readable[0].recv(100).startswith(b"HTTP/1.1 429"), "the made-up keys' slots are all held"
        with httpx.Client(base_url=base, timeout=30) as browser:
            browser.cookies.set("nbl_ui_key", "nbl_" + "r" * 43, path="/ui")  # a revoked key's cookie, say
            form = browser.get("/ui/login")
            assert form.status_code == 200
            logged_in = browser.post(
                "/ui/login", data={"key": alpha, "csrf": csrf_field(form.text)}, follow_redirects=False
            )
            assert logged_in.status_code == 303, logged_in.status_code
            assert (
                browser.post(
                    "/ui/logout", data={"csrf": csrf_field(browser.get("/ui/jobs").text)}, follow_redirects=False
                ).status_code
                == 303
            )
    finally:
        for s in held:
            s.close()
