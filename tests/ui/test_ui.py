"""The /ui dashboard through the real app and database (both SQLite and Postgres): login and its
cookie, team scoping (another team's job is the same 404 page as a missing one), filters,
the job page's chart and tables, compare, and HTML escaping."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient
from testkit.ui_forms import CSRF_COOKIE, csrf_field, ui_login
from testkit.ui_seed import lowest, seed_job

from service.api import create_app

XSS = "<script>alert(1)</script>"


def _key(headers: dict) -> str:
    return headers["Authorization"].split()[1]


@pytest.fixture
def alpha(team_key):
    return team_key("alpha")


def test_login_sets_a_strict_httponly_cookie_and_logout_clears_it(client, alpha, sessions, settings):
    job = seed_job(sessions, settings, _key(alpha))
    r = client.get("/ui/jobs", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/ui/login?next=%2Fui%2Fjobs"
    r = client.get("/ui/login")  # the form sets its pre-session CSRF cookie, as strict as the key's
    for attr in ("HttpOnly", "SameSite=strict", "Path=/ui"):
        assert attr.lower() in r.headers["set-cookie"].lower(), r.headers["set-cookie"]
    assert csrf_field(r.text) == client.cookies[CSRF_COOKIE]
    r = ui_login(client, "nbl_wrong", "/ui/jobs")
    assert r.status_code == 401 and "not valid" in r.text and "set-cookie" not in r.headers
    r = ui_login(client, _key(alpha), f"/ui/jobs/{job}")
    assert r.status_code == 303 and r.headers["location"] == f"/ui/jobs/{job}"
    cookie = r.headers["set-cookie"]
    assert cookie.startswith("nbl_ui_key=nbl_")
    for attr in ("HttpOnly", "SameSite=strict", "Path=/ui"):
        assert attr.lower() in cookie.lower(), cookie
    assert "secure" not in cookie.lower()  # plain http
    r = client.get("/ui/jobs")  # the TestClient keeps the cookie
    assert r.status_code == 200 and job in r.text and "team alpha" in r.text
    r = client.post("/ui/logout", data={"csrf": csrf_field(r.text)}, follow_redirects=False)
    assert r.status_code == 303 and 'nbl_ui_key=""' in r.headers["set-cookie"]
    assert "max-age=0" in r.headers["set-cookie"].lower()
    client.cookies.clear()
    assert client.get("/ui/jobs", follow_redirects=False).status_code == 303


def test_login_only_redirects_inside_the_dashboard(client, alpha):
    token = csrf_field(client.get("/ui/login").text)
    r = client.post(
        "/ui/login",
        content=f"a=1&b=2&c=3&csrf={token}&e=5&key=" + _key(alpha),
        headers={"content-type": "application/x-www-form-urlencoded"},
        follow_redirects=False,
    )
    assert r.status_code == 401  # not our form (too many fields): refused, not a 500
    for target in ("https://evil.example/", "//evil.example/ui/", "/v1/jobs", "/ui\\..\\x"):
        r = ui_login(client, _key(alpha), target)
        assert r.headers["location"] == "/ui/jobs", target


@pytest.mark.parametrize(
    "trust, https_header, secure",
    [(False, False, False), (False, True, False), (True, True, True), (True, False, False)],
)
def test_cookie_secure_over_https_or_a_trusted_forwarded_proto(
    db_url, settings_for, team_key_for, trust, https_header, secure
):
    s = settings_for(db_url, trust_forwarded_proto=trust)
    key = _key(team_key_for(s))
    with TestClient(create_app(s)) as c:
        headers = {"X-Forwarded-Proto": "https"} if https_header else {}
        r = ui_login(c, key, **headers)
        assert r.status_code == 303
        assert ("secure" in r.headers["set-cookie"].lower()) is secure
    with TestClient(create_app(s), base_url="https://testserver") as c:  # the request's own scheme
        r = ui_login(c, key)
        assert "secure" in r.headers["set-cookie"].lower()


def test_a_stale_cookie_goes_back_to_login_and_a_bad_bearer_is_401(client):
    client.cookies.set("nbl_ui_key", "nbl_revoked", path="/ui")
    r = client.get("/ui/compare?ids=a,b", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/ui/login?next=%2Fui%2Fcompare%3Fids%3Da%2Cb"
    assert "max-age=0" in r.headers["set-cookie"].lower()
    client.cookies.clear()
    r = client.get("/ui/jobs", headers={"Authorization": "Bearer nbl_wrong"})
    assert r.status_code == 401 and r.headers["content-type"].startswith("text/html")


def test_job_page_draws_the_chart_results_timeline_events_and_outputs(client, alpha, sessions, settings):
    job = seed_job(sessions, settings, _key(alpha), ks=(2, 4))
    r = client.get(f"/ui/jobs/{job}", headers=alpha)
    assert r.status_code == 200, r.text
    csp = r.headers["content-security-policy"]  # our own script only (live.js): nothing inline, nothing elsewhere
    assert "script-src 'self';" in csp and "unsafe-inline" not in csp and "http" not in csp
    html = r.text
    # One chart per criterion with scores: attn (cca, nmse, cosine, loss) and block (no loss_rise).
    charts = re.findall(r'<svg class="chart".*?</svg>', html, re.S)
    assert len(charts) == 7
    cca = next(c for c in charts if 'data-field="cca_bound"' in c and "attn ·" in c)
    assert sorted(int(i) for i in re.findall(r'class="bar selected" data-layer="(\d+)"', cca)) == lowest(4)
    assert len(re.findall(r'class="bar"', cca)) == 8 - 4
    assert sorted(re.findall(r'class="cut" data-k="(\d+)"', cca)) == ["2", "4"]
    assert 'figure class="chart chosen"' in html
    for stage in ("load", "calibrate", "score", "evaluate"):
        assert f"{stage}</td>" in html or f"{stage} (now)" in html
    # The result table: outputs with their delta and relative change from the base.
    results = re.search(r'<table class="results">.*?</table>', html, re.S).group(0)
    assert ">WikiText-2 perplexity<" in results and "+1.4 (+6.8%)" in results and "+2.8 (+13.6%)" in results
    assert '<span class="delta worse">+1.4' in results and "ARC-Easy accuracy %" in results and "-2.0 pts" in results
    assert "287,644" not in results and "calibration" not in results  # how much was measured is no column
    assert [r for r in re.findall(r'<tr class="variant"><th>(\w+)</th>', results)] == ["base", "k2", "k4"]
    assert '<ul class="warnings"><li>submit: evaluation not given' in html  # said at submit (JobOut.warnings)
    assert "<li>evaluate: evaluation.limit unset" in html  # the worker's warning event
    assert f'href="/ui/jobs/{job}/outputs/4/files"' in html  # the dashboard's own page of it (cookie)


def test_job_page_shows_each_outputs_form_and_where_it_runs(client, alpha, sessions, settings):
    fold = seed_job(
        sessions, settings, _key(alpha), ks=(2,), compression={"mode": "block", "form": "fold", "criterion": "cosine"}
    )
    html = client.get(f"/ui/jobs/{fold}", headers=alpha).text
    row = re.search(r"<tr><td>block k=2</td>.*?</tr>", html, re.S).group(0)
    assert "<td>fold</td>" in row and "<td>transformers, vllm, sglang, tensorrt-llm, llama.cpp</td>" in row
    plain = seed_job(sessions, settings, _key(alpha), ks=(2,))  # no form asked: nbl, our code
    row = re.search(r"<tr><td>attn k=2</td>.*?</tr>", client.get(f"/ui/jobs/{plain}", headers=alpha).text, re.S).group(
        0
    )
    assert "<td>nbl</td>" in row and "<td>transformers+file, vllm+plugin</td>" in row


def test_another_teams_job_is_the_same_404_page_as_a_missing_one(client, alpha, team_key, sessions, settings):
    theirs = seed_job(sessions, settings, _key(team_key("beta")))
    mine = seed_job(sessions, settings, _key(alpha))
    missing = "job_" + "0" * 32
    a = client.get(f"/ui/jobs/{theirs}", headers=alpha)
    b = client.get(f"/ui/jobs/{missing}", headers=alpha)
    assert a.status_code == b.status_code == 404 and a.headers["content-type"].startswith("text/html")
    assert a.text == b.text and theirs not in a.text
    assert theirs not in client.get("/ui/jobs", headers=alpha).text
    c = client.get(f"/ui/compare?ids={mine},{theirs}", headers=alpha)
    assert c.status_code == 404 and c.text == b.text


def test_everything_is_escaped(client, alpha, sessions, settings):
    job = seed_job(sessions, settings, _key(alpha), metadata={"ci": XSS}, finish="failed", error_message=XSS)
    for path in ("/ui/jobs", f"/ui/jobs/{job}"):
        html = client.get(path, headers=alpha).text
        assert XSS not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html, path
    r = client.get(f"/ui/jobs?metadata.ci={XSS}", headers=alpha)
    assert job in r.text and XSS not in r.text


def test_jobs_list_filters_and_pages(client, alpha, sessions, settings):
    ci = seed_job(sessions, settings, _key(alpha), metadata={"ci": "1"})
    running = seed_job(sessions, settings, _key(alpha), ks=(4,), finish=None)
    html = client.get("/ui/jobs?status=running", headers=alpha).text
    assert running in html and ci not in html
    assert "42s" in html and "50%" in html  # ETA and progress of the running job
    html = client.get("/ui/jobs?metadata.ci=1", headers=alpha).text
    assert ci in html and running not in html
    r = client.get("/ui/jobs?status=succeeded&meta=ci%3D1", headers=alpha, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/ui/jobs?status=succeeded&metadata.ci=1"
    r = client.get("/ui/jobs?stauts=failed", headers=alpha)  # a misspelt filter is refused, not ignored
    assert r.status_code == 422 and "stauts" in r.text
    assert client.get("/ui/jobs?status=nope", headers=alpha).status_code == 422
    first = client.get("/ui/jobs?limit=1", headers=alpha).text
    assert running in first and ci not in first  # newest first
    nxt = re.search(r'class="next" href="([^"]+)"', first).group(1).replace("&amp;", "&")
    second = client.get(nxt, headers=alpha).text
    assert ci in second and running not in second and 'class="next"' not in second


def test_compare_shows_recipe_differences_selected_layers_and_metric_deltas(client, alpha, sessions, settings):
    a = seed_job(sessions, settings, _key(alpha), ks=(2,))
    b = seed_job(sessions, settings, _key(alpha), ks=(2, 4), ppl_shift=1.0)
    r = client.get(f"/ui/compare?ids={a}&ids={b}", headers=alpha)
    assert r.status_code == 200, r.text
    html = r.text
    diff = re.search(r'<table class="diff">.*?</table>', html, re.S).group(0)
    assert "compression.ks" in diff and "[2]" in diff and "[2, 4]" in diff and "model" not in diff
    layers = re.search(r'<table class="layers-compare">.*?</table>', html, re.S).group(0)
    assert "attn k=2" in layers and "attn k=4" in layers and "—" in layers  # a has no k=4 output
    chart = re.search(
        r'<svg class="compare-chart".*?data-metric="perplexity/wikitext2/ppl".*?</svg>', html, re.S
    ).group(0)
    assert f'data-job="{b}" data-variant="k2"' in chart and "+2.4 (+11.7%)" in chart  # b's k2 against b's base
    html = client.get(f"/ui/compare?ids={a},{b}&baseline={a}", headers=alpha).text
    assert "+1 (+4.6%)" in html  # k2 perplexity: b is 1.0 above a's k2
    assert 'data-metric="perplexity/wikitext2/tokens"' not in html  # how much was measured: no chart
    assert client.get(f"/ui/compare?ids={a}", headers=alpha).status_code == 422


def test_job_page_shows_the_gate_checks(client, alpha, sessions, settings):
    """+10% WikiText-2 perplexity: k=2 (+6.8%) passes, k=4 (+13.6%) fails; each check is a row."""
    job = seed_job(sessions, settings, _key(alpha), ks=(2, 4), gate=0.10)
    html = client.get(f"/ui/jobs/{job}", headers=alpha).text
    assert "<h2>Gates: passed</h2>" in html
    rows = html.split('<table class="gates">')[1].split("</table>")[0].split("<tr>")[2:]
    assert [("k2" in r, "k4" in r, "pass" in r, "FAIL" in r) for r in rows] == [
        (True, False, True, False),
        (False, True, False, True),
    ], rows
    assert "22.57" in rows[0] and "23.32" in rows[1]  # the limit 20.52 x 1.1, and k=4's perplexity
