"""Clone-and-edit on the dashboard (issue 28) through the real app and database: the form shows the
job's request as JSON; an edited valid request makes one new job of the same team (a double click
too); an invalid edit comes back in the form with the API's own messages and makes nothing; a form
without this session's CSRF token is refused; another team's job is the 404 page."""

from __future__ import annotations

import html
import json
import re

import pytest
from fastapi.testclient import TestClient
from testkit.service_lib import body
from testkit.ui_forms import csrf_field, ui_login

from service.api import create_app


def _key(headers: dict) -> str:
    return headers["Authorization"].split()[1]


def _textarea(page: str) -> str:
    return html.unescape(re.search(r'<textarea name="spec"[^>]*>(.*?)</textarea>', page, re.S).group(1))


def _field(page: str, name: str) -> str:
    return re.search(rf'name="{name}" value="([^"]*)"', page).group(1)


def _job_ids(client, headers) -> list[str]:
    return [j["id"] for j in client.get("/v1/jobs", params={"limit": 100}, headers=headers).json()["data"]]


@pytest.fixture
def teams(settings, team_key):
    """A logged-in browser of team alpha (the cookie jar), and API headers of alpha and beta."""
    alpha, beta = team_key("alpha"), team_key("beta")
    with TestClient(create_app(settings)) as browser:
        assert ui_login(browser, _key(alpha)).status_code == 303
        yield browser, alpha, beta


def test_clone_shows_the_request_and_an_edit_makes_a_job_of_the_team(teams):
    browser, alpha, beta = teams
    source = browser.post("/v1/jobs", json=body(metadata={"ci": "7"}), headers=alpha).json()
    form = browser.get(f"/ui/jobs/{source['id']}/clone")
    assert form.status_code == 200
    spec = json.loads(_textarea(form.text))
    assert spec == source["spec"] and _field(form.text, "source") == source["id"]
    spec["compression"]["k"] = 2
    data = {
        "spec": json.dumps(spec),
        "source": source["id"],
        "nonce": _field(form.text, "nonce"),
        "csrf": csrf_field(form.text),
    }
    r = browser.post("/ui/jobs/new", data=data, follow_redirects=False)
    assert r.status_code == 303, r.text
    new_id = r.headers["location"].rsplit("/", 1)[1]
    again = browser.post("/ui/jobs/new", data=data, follow_redirects=False)  # a double click: the same job
    assert again.status_code == 303 and again.headers["location"] == r.headers["location"]
    new = browser.get(f"/v1/jobs/{new_id}", headers=alpha).json()
    assert new["status"] == "queued" and new["spec"]["compression"]["k"] == 2
    assert new["metadata"] == {"ci": "7"}
    assert sorted(_job_ids(browser, alpha)) == sorted([source["id"], new_id])
    assert browser.get(f"/v1/jobs/{new_id}", headers=beta).status_code == 404  # alpha's, not beta's


@pytest.mark.parametrize(
    "edit",
    [
        lambda s: s["compression"].update(k="four"),
        lambda s: s.update(colour="blue"),
        lambda s: s["model"].pop("id"),
    ],
)
def test_an_invalid_edit_comes_back_with_the_apis_messages(teams, edit):
    browser, alpha, _ = teams
    source = browser.post("/v1/jobs", json=body(), headers=alpha).json()
    form = browser.get(f"/ui/jobs/{source['id']}/clone")
    spec = json.loads(_textarea(form.text))
    edit(spec)
    text = json.dumps(spec, indent=1)
    api = browser.post("/v1/jobs", json=spec, headers=alpha)
    assert api.status_code == 422
    r = browser.post(
        "/ui/jobs/new",
        data={"spec": text, "source": source["id"], "nonce": _field(form.text, "nonce"), "csrf": csrf_field(form.text)},
        follow_redirects=False,
    )
    assert r.status_code == 422 and 'role="alert"' in r.text
    shown = html.unescape(re.search(r'<ul class="error".*?</ul>', r.text, re.S).group(0))
    for err in api.json()["errors"]:  # each of the API's messages, at the same place in the request
        assert f"{'.'.join(str(x) for x in err['loc'][1:])}: {err['msg']}" in shown, (err, shown)
    assert _textarea(r.text) == text  # the edit is kept, to fix
    assert csrf_field(r.text) and _field(r.text, "nonce") != _field(form.text, "nonce")
    not_json = browser.post(
        "/ui/jobs/new", data={"spec": "{k: 4", "csrf": csrf_field(form.text)}, follow_redirects=False
    )
    assert not_json.status_code == 422 and "not a JSON object" in not_json.text
    assert _job_ids(browser, alpha) == [source["id"]]


def test_a_form_without_this_sessions_token_is_refused(teams, settings, team_key):
    browser, alpha, beta = teams
    source = browser.post("/v1/jobs", json=body(), headers=alpha).json()
    form = browser.get(f"/ui/jobs/{source['id']}/clone")
    spec = _textarea(form.text)
    with TestClient(create_app(settings)) as other:  # a logged-in browser of another team: its token is not ours
        assert ui_login(other, _key(beta)).status_code == 303
        forged = csrf_field(other.get("/ui/jobs").text)
    for token in (None, "", forged, csrf_field(form.text)[:-2] + "xx"):
        data = {"spec": spec, "nonce": "n1"} | ({} if token is None else {"csrf": token})
        r = browser.post("/ui/jobs/new", data=data, follow_redirects=False)
        assert r.status_code == 403, (token, r.status_code)
        r = browser.post(f"/ui/jobs/{source['id']}/rerun", data=data, follow_redirects=False)
        assert r.status_code == 403
    assert _job_ids(browser, alpha) == [source["id"]]


def test_another_teams_job_is_the_404_page(teams):
    browser, alpha, beta = teams
    theirs = browser.post("/v1/jobs", json=body(), headers=beta).json()["id"]
    missing = "job_" + "0" * 32
    token = csrf_field(browser.get("/ui/jobs").text)
    for job_id in (theirs, missing):
        r = browser.get(f"/ui/jobs/{job_id}/clone")
        assert r.status_code == 404 and r.headers["content-type"].startswith("text/html")
        assert theirs not in r.text or job_id == missing
        r = browser.post(f"/ui/jobs/{job_id}/rerun", data={"csrf": token, "nonce": "n2"}, follow_redirects=False)
        assert r.status_code == 404
    assert _job_ids(browser, alpha) == [] and _job_ids(browser, beta) == [theirs]


def test_a_request_nested_deeper_than_the_parser_goes_is_the_form_again(teams):
    """3,000 nested brackets (6 KB, within the body limit) were a RecursionError: a 500 and a logged traceback."""
    browser, alpha, _ = teams
    token = csrf_field(browser.get("/ui/jobs").text)
    for text in ("[" * 3000 + "]" * 3000, '{"a":' * 3000 + "1" + "}" * 3000):
        r = browser.post("/ui/jobs/new", data={"spec": text, "csrf": token}, follow_redirects=False)
        assert r.status_code == 422 and "nested too deeply" in r.text, r.text[:300]
    assert _job_ids(browser, alpha) == []
