"""The dashboard's jobs list sorted by a metric of the result (issue 28), on the real app and database
(SQLite and Postgres): a job's value is its best output, jobs without the metric come last, another
team's jobs never show, the header links sort and toggle, and the next-page links walk the same order
without a job lost or repeated."""

from __future__ import annotations

import html
import re

import pytest
from fastapi.testclient import TestClient
from testkit.service_lib import body
from testkit.ui_forms import ui_login
from testkit.ui_seed import seed_job

from service.api import create_app

PPL = "metric:perplexity/wikitext2/ppl"


def _key(headers: dict) -> str:
    return headers["Authorization"].split()[1]


def _ids(page: str) -> list[str]:
    return re.findall(r'<tr class="job"[^>]*>\s*<td><input[^>]*value="([^"]+)"', page)


def _walk(browser, url: str) -> list[str]:
    """Every job id, following the next-page links from `url`."""
    seen = []
    while url:
        r = browser.get(url)
        assert r.status_code == 200, r.text[:500]
        seen += _ids(r.text)
        link = re.search(r'<a class="next" href="([^"]+)"', r.text)
        url = html.unescape(link.group(1)) if link else None
    return seen


@pytest.fixture
def seeded(settings, sessions, team_key):
    """Team alpha: jobs with best WikiText-2 perplexity (their k=2 output) 21.42, 22.22, 22.92, one
    k=4 job at 23.32, a queued job without metrics; team beta: a job better than all of them."""
    alpha, beta = team_key("alpha"), team_key("beta")
    a = seed_job(sessions, settings, _key(alpha), ppl_shift=0.3)
    b = seed_job(sessions, settings, _key(alpha), ppl_shift=-0.5)
    c = seed_job(sessions, settings, _key(alpha), ppl_shift=1.0)
    only4 = seed_job(sessions, settings, _key(alpha), ks=(4,))
    theirs = seed_job(sessions, settings, _key(beta), ppl_shift=-5.0)
    with TestClient(create_app(settings)) as browser:
        queued = browser.post("/v1/jobs", json=body(), headers=alpha).json()["id"]
        assert ui_login(browser, _key(alpha)).status_code == 303
        yield browser, dict(a=a, b=b, c=c, only4=only4, queued=queued, theirs=theirs)


def test_sorted_by_a_metric_with_jobs_lacking_it_last(seeded):
    browser, j = seeded
    asc = [j["b"], j["a"], j["c"], j["only4"], j["queued"]]
    desc = [j["only4"], j["c"], j["a"], j["b"], j["queued"]]  # missing stays last either way
    assert _ids(browser.get("/ui/jobs", params={"sort": PPL, "order": "asc"}).text) == asc
    assert _ids(browser.get("/ui/jobs", params={"sort": PPL, "order": "desc"}).text) == desc
    assert _ids(browser.get("/ui/jobs", params={"sort": "metric:perplexity/wikitext2"}).text) == asc  # lower better
    # Accuracy: higher first by default; equal values (0.59, the k=2 outputs) newest first.
    acc = _ids(browser.get("/ui/jobs", params={"sort": "metric:tasks/arc_easy"}).text)
    assert acc == [j["c"], j["b"], j["a"], j["only4"], j["queued"]]
    assert _ids(browser.get("/ui/jobs").text) == [j["queued"], j["only4"], j["c"], j["b"], j["a"]]  # newest first
    assert j["theirs"] not in browser.get("/ui/jobs", params={"sort": PPL}).text
    filtered = browser.get("/ui/jobs", params={"sort": PPL, "status": "succeeded"}).text
    assert _ids(filtered) == asc[:-1]


@pytest.mark.parametrize("order", ["asc", "desc"])
@pytest.mark.parametrize("limit", [1, 2])
def test_next_pages_keep_the_sort(seeded, order, limit):
    browser, _ = seeded
    whole = _ids(browser.get("/ui/jobs", params={"sort": PPL, "order": order}).text)
    assert _walk(browser, f"/ui/jobs?sort={PPL}&order={order}&limit={limit}") == whole


def test_headers_are_links_that_sort_and_toggle(seeded):
    browser, j = seeded
    page = browser.get("/ui/jobs").text
    link = re.search(r'<th class="metric"><a href="([^"]+)"[^>]*>WikiText-2 perplexity</a>', page)
    assert link, page
    sorted_page = browser.get(html.unescape(link.group(1))).text
    assert _ids(sorted_page)[0] == j["b"] and "21.42" in sorted_page and 'aria-label="sorted">↑' in sorted_page
    again = re.search(r'<th class="metric"><a href="([^"]+)"', sorted_page).group(1)
    assert "order=desc" in html.unescape(again)
    assert _ids(browser.get(html.unescape(again)).text)[0] == j["only4"]


def test_a_bad_sort_or_a_cursor_of_another_list_is_a_422_page(seeded):
    browser, _ = seeded
    for params in ({"sort": "name"}, {"sort": "metric:"}, {"sort": PPL, "order": "up"}):
        r = browser.get("/ui/jobs", params=params)
        assert r.status_code == 422 and r.headers["content-type"].startswith("text/html"), params
    plain = browser.get("/ui/jobs", params={"limit": 1}).text
    cursor = html.unescape(re.search(r'<a class="next" href="[^"]*after=([^"&]+)', plain).group(1))
    assert browser.get("/ui/jobs", params={"sort": PPL, "after": cursor}).status_code == 422
    sorted_page = browser.get("/ui/jobs", params={"sort": PPL, "limit": 1}).text
    cursor = html.unescape(re.search(r'<a class="next" href="[^"]*after=([^"&]+)', sorted_page).group(1))
    assert browser.get("/ui/jobs", params={"sort": PPL, "order": "desc", "after": cursor}).status_code == 422
    assert browser.get("/ui/jobs", params={"after": cursor}).status_code == 422


def test_a_cursor_nested_deeper_than_the_parser_goes_is_a_422_page(seeded):
    """A sort cursor is base64 JSON from the client: 3,000 nested brackets were a RecursionError, a 500."""
    import base64

    browser, _ = seeded
    deep = base64.urlsafe_b64encode(b"[" * 3000 + b"]" * 3000).decode().rstrip("=")
    r = browser.get("/ui/jobs", params={"sort": PPL, "after": deep})
    assert r.status_code == 422 and r.headers["content-type"].startswith("text/html")
