"""Cross-site request forgery on the dashboard's POSTs (issue 24, finding 11): a cross-site form that
posts the attacker's key to /ui/login signed the victim into the attacker's team, and one to
/ui/logout signed the victim out. Every POST now needs the form's token (pre-session cookie before
login, tied to the session's key after) and, where the browser says where it comes from, this origin."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from testkit.ui_forms import CSRF_COOKIE, csrf_field, ui_login

from service.api import create_app

SAME_ORIGIN = {"Origin": "http://testserver", "Sec-Fetch-Site": "same-origin"}


def _key(headers: dict) -> str:
    return headers["Authorization"].split()[1]


@pytest.fixture
def browsers(settings):
    """Two browsers (cookie jars) on one server: the victim's and the attacker's."""
    app = create_app(settings)
    with TestClient(app) as victim, TestClient(app) as attacker:
        yield victim, attacker


def _team(client) -> str | None:
    r = client.get("/ui/jobs", follow_redirects=False)
    return r.text.split("team ", 1)[1].split("<", 1)[0] if r.status_code == 200 else None


def _refused(r) -> None:
    assert r.status_code == 403 and r.headers["content-type"].startswith("text/html"), (r.status_code, r.text[:300])
    assert "nbl_ui_key=nbl_" not in r.headers.get("set-cookie", "")


def test_a_cross_site_login_is_refused(browsers, team_key):
    victim, attacker = browsers
    theirs = _key(team_key("beta"))
    _refused(victim.post("/ui/login", data={"key": theirs}, follow_redirects=False))  # no token at all
    attackers_token = csrf_field(attacker.get("/ui/login").text)  # valid in the attacker's browser only
    _refused(victim.post("/ui/login", data={"key": theirs, "csrf": attackers_token}, follow_redirects=False))
    victim.get("/ui/login")  # the victim has a pre-session cookie of their own now
    _refused(victim.post("/ui/login", data={"key": theirs, "csrf": attackers_token}, follow_redirects=False))
    _refused(victim.post("/ui/login", data={"key": theirs, "csrf": ""}, follow_redirects=False))
    # Even with the right token, a browser that says the form is from elsewhere is refused.
    token = victim.cookies[CSRF_COOKIE]
    for headers in (
        {"Origin": "https://evil.example"},
        {"Origin": "null"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
        {"Origin": "http://testserver.evil.example"},
        {"Sec-Fetch-Site": "cross-site", "Origin": "http://testserver"},
    ):
        r = victim.post("/ui/login", data={"key": theirs, "csrf": token}, headers=headers, follow_redirects=False)
        _refused(r)
        assert "another site" in r.text and csrf_field(r.text) == token  # a form to log in from, here
    assert _team(victim) is None
    # The same form from this origin logs in.
    r = victim.post("/ui/login", data={"key": theirs, "csrf": token}, headers=SAME_ORIGIN, follow_redirects=False)
    assert r.status_code == 303 and _team(victim) == "beta"


def test_logout_and_a_second_login_need_the_sessions_token(browsers, team_key):
    victim, attacker = browsers
    mine, theirs = _key(team_key("alpha")), _key(team_key("beta"))
    presession = csrf_field(victim.get("/ui/login").text)
    assert ui_login(victim, mine).status_code == 303 and _team(victim) == "alpha"
    page_token = csrf_field(victim.get("/ui/jobs").text)  # the logout form's: tied to the session's key
    assert page_token != presession
    assert ui_login(attacker, theirs).status_code == 303
    attackers_token = csrf_field(attacker.get("/ui/jobs").text)
    for token in (None, presession, attackers_token):
        data = {} if token is None else {"csrf": token}
        _refused(victim.post("/ui/logout", data=data, follow_redirects=False))
        _refused(victim.post("/ui/login", data={"key": theirs, **data}, follow_redirects=False))
        assert _team(victim) == "alpha"
    r = victim.post("/ui/logout", data={"csrf": page_token}, headers=SAME_ORIGIN, follow_redirects=False)
    assert r.status_code == 303 and "max-age=0" in r.headers["set-cookie"].lower()
    victim.cookies.delete("nbl_ui_key", path="/ui")  # as the browser does on max-age=0
    assert _team(victim) is None
