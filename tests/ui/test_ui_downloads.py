"""The dashboard's "Outputs" and "This job as JSON" links, followed as a browser follows them: with
the login cookie only (Path=/ui), no Authorization header (issue 24, finding 18: they pointed at /v1
and answered 401). On a real published job (tests/testkit/job_output.py) and a live server."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
from testkit.ui_forms import ui_login


def _key(headers: dict) -> str:
    return headers["Authorization"].split()[1]


@contextmanager
def _browser(s, headers: dict) -> Iterator[httpx.Client]:
    """A cookie jar logged in through the form as the key's team."""
    with httpx.Client(base_url=s.url, timeout=30) as client:
        assert ui_login(client, _key(headers)).status_code == 303
        yield client


def _hrefs(page: str, pattern: str) -> list:
    return [
        tuple(html.unescape(g) for g in m) if isinstance(m, tuple) else html.unescape(m)
        for m in re.findall(pattern, page)
    ]


def test_outputs_and_json_links_work_with_the_cookie_alone(job_output):
    s, job_id = job_output, job_output.job["id"]
    with _browser(s, s.auth) as browser:
        page = browser.get(f"/ui/jobs/{job_id}").text
        (json_href,) = _hrefs(page, r'<a href="([^"]+)">This job as JSON</a>')
        r = browser.get(json_href)
        assert r.status_code == 200 and r.headers["content-type"] == "application/json"
        assert r.json() == httpx.get(f"{s.url}/v1/jobs/{job_id}", headers=s.auth).json()  # what the API says
        outputs = dict(_hrefs(page, r"k=(\d+): <a href=\"([^\"]+)\""))
        assert sorted(outputs) == ["1", "2"], page
        seen = []
        for k, href in outputs.items():
            listing = browser.get(href)
            assert listing.status_code == 200 and listing.headers["content-type"].startswith("text/html")
            files = _hrefs(listing.text, r'<a href="([^"]+)" download>([^<]+)</a>')
            assert {"model.safetensors", "config.json"} <= {name for _, name in files}
            for file_href, name in files:
                r = browser.get(file_href)  # a download, with the cookie alone
                assert r.status_code == 200 and r.content == (s.folder(int(k)) / name).read_bytes(), name
                assert r.headers["content-disposition"].startswith("attachment;")
                assert r.headers["x-content-type-options"] == "nosniff"
                seen.append(file_href)
            r = browser.get(file_href, headers={"Range": "bytes=1-4"})  # a resumed download
            assert r.status_code == 206 and r.content == (s.folder(int(k)) / name).read_bytes()[1:5]
        # The API itself stays header-only: the cookie opens nothing under /v1, and writes nothing.
        cookie = {"Cookie": f"nbl_ui_key={_key(s.auth)}"}
        assert httpx.get(f"{s.url}/v1/jobs/{job_id}", headers=cookie).status_code == 401
        assert httpx.post(f"{s.url}/v1/jobs/{job_id}/cancel", headers=cookie).status_code == 401
        assert browser.post(json_href).status_code == 405

    with _browser(s, s.other) as other:  # another team's cookie: the same 404 page as a missing job
        for href in [json_href, *outputs.values(), *seen]:
            r = other.get(href)
            assert r.status_code == 404 and r.headers["content-type"].startswith("text/html"), href
            assert r.text == other.get(href.replace(job_id, "job_" + "0" * 32)).text  # as a missing job's
    with httpx.Client(base_url=s.url) as anonymous:  # no cookie: to the login form
        r = anonymous.get(seen[0], follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"].startswith("/ui/login?next=")
