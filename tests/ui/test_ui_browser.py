"""The dashboard in a real browser: a real `nbl serve` (uvicorn) on SQLite, keys from
`nbl admin create-key`, jobs written by the real store functions, and headless Chromium (the
Debian package, which .ci/run installs) logging in through the form. Checks that the chart is
drawn and that another team's job is a 404 page; saves the three pages as screenshots in a temporary folder,
or where NBL_UI_SHOTS says (`NBL_UI_SHOTS=bench/results/ui` refreshes the committed ones), so a test run leaves
the tracked screenshots alone."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

import pytest
from testkit.cdp import Browser, chromium_binary, env_without
from testkit.ui_seed import lowest, seed_job
from testkit.ui_server import REPO, cli_key, nbl_serve

# A published output's files (README.md as HTML: downloaded, never rendered on the dashboard's origin).
FILES = {
    "config.json": b'{"model_type": "llama"}\n',
    "weights/model.safetensors": bytes(range(256)) * 64,
    "README.md": b"<script>alert(1)</script>\n",
}
SHOTS = Path(os.environ.get("NBL_UI_SHOTS") or tempfile.mkdtemp(prefix="nbl-ui-shots-"))
if chromium_binary() is None:
    # CI must not skip it: .ci/run installs the Debian chromium before `make test`.
    if os.environ.get("CI"):
        pytest.fail("chromium is not installed (apt-get install -y chromium)", pytrace=False)
    pytest.skip("chromium is not installed (apt-get install -y chromium)", allow_module_level=True)


def test_dashboard_in_headless_chromium(tmp_path):
    from service.core.db import make_engine, make_sessionmaker
    from service.core.settings import Settings
    from service.keys.auth import create_key, get_or_create_team

    env = {
        **env_without("DATABASE_URL", "BROKER_URL"),
        "NBL_HOME": str(tmp_path / "home"),
        "PYTHONPATH": str(REPO),
        "NBL_STREAM_POLL_S": "0.2",
    }
    alpha = cli_key(env, "alpha")  # also migrates the fresh SQLite database
    settings = Settings(home=env["NBL_HOME"])
    engine = make_engine(settings)
    sessions = make_sessionmaker(engine)
    with nbl_serve(env) as ready:
        with sessions() as s:
            beta, _ = create_key(s, get_or_create_team(s, "beta")[0])
        base = seed_job(sessions, settings, alpha, ks=(2,), metadata={"ci": "nightly"})
        job = seed_job(
            sessions,
            settings,
            alpha,
            ks=(2, 4),
            metadata={"ci": "nightly", "branch": "main"},
            ppl_shift=0.3,
            pause=0.25,
            files=FILES,
            logs=300,
        )
        running = seed_job(sessions, settings, alpha, ks=(8,), model="HuggingFaceTB/SmolLM2-360M-Instruct", finish=None)
        theirs = seed_job(sessions, settings, beta)
        browser = Browser(tmp_path / "chrome")
        try:
            _check_pages(browser, ready(), alpha, beta, base, job, theirs, tmp_path / "downloads")
            _live_cancel_and_rerun(browser, ready(), sessions, running, theirs)
        finally:
            browser.close()
            engine.dispose()
    for name in ("jobs", "job", "compare"):
        assert (SHOTS / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _events_fold(browser: Browser) -> None:
    """The job's 300-odd events (seeded below) show as the latest 5; the rest fold under one line."""
    assert browser.eval("document.querySelectorAll('#events-recent tr').length") == 5
    newest = browser.eval("document.querySelector('#events-recent tr').innerText")
    assert "succeeded" in newest  # newest first
    folded = browser.eval("""(() => { const d = document.querySelector('details.events-all');
        return {open: d.open, summary: d.querySelector('summary').textContent, rows: d.querySelectorAll('tr.event').length,
                height: d.getBoundingClientRect().height}; })()""")
    assert folded["open"] is False and folded["rows"] == int(folded["summary"].split()[1]) > 300
    assert folded["height"] < 40  # one line, not the 5,000-8,000 px of issue 28
    browser.eval("document.querySelector('details.events-all summary').click()")
    assert 300 < browser.eval("document.querySelector('details.events-all').getBoundingClientRect().height") < 420
    browser.eval("document.querySelector('details.events-all summary').click()")


def _results_read(browser: Browser) -> None:
    """The results table: metric names with units (no raw keys, no counts), inside the page's width."""
    heads = browser.eval("[...document.querySelectorAll('table.results thead th')].map(th => th.textContent)")
    assert heads == ["Model", "WikiText-2 perplexity", "ARC-Easy accuracy %"], heads
    assert not any("/" in h for h in heads)
    width = browser.eval("document.querySelector('table.results').getBoundingClientRect().right")
    assert width <= browser.eval("document.documentElement.clientWidth")


def _cross_site_login(browser: Browser, url: str, key: str) -> None:
    """Another site's page (an opaque data: origin) posts a login form with `key` to the dashboard: refused."""
    form = (
        f'<form method="post" action="{url}/ui/login"><input name="key" value="{key}">'
        '<input name="csrf" value="guessed"></form>'
    )
    assert browser.goto("data:text/html," + quote(form)) == 200
    assert browser.load(lambda: browser.eval("document.forms[0].submit()")) == 403
    assert "another site" in browser.eval("document.body.innerText")


def _check_pages(
    browser: Browser, url: str, alpha: str, beta: str, base: str, job: str, theirs: str, downloads: Path
) -> None:
    _cross_site_login(browser, url, beta)
    assert browser.goto(f"{url}/ui/jobs") == 200  # not logged in: redirected to the login form
    assert browser.eval("location.pathname") == "/ui/login"
    status = browser.load(
        lambda: browser.eval(
            f"document.getElementById('key').value = {alpha!r}; document.querySelector('form.login').submit()"
        )
    )
    assert status == 200 and browser.eval("location.pathname") == "/ui/jobs"
    _cross_site_login(browser, url, beta)  # logged in: still team alpha after
    assert browser.goto(f"{url}/ui/jobs") == 200 and "team alpha" in browser.eval("document.body.innerText")
    assert browser.eval("document.cookie") == ""  # HttpOnly: no script sees the key
    assert browser.eval("document.querySelectorAll('tr.job').length") == 3
    # each metric cell names the output its value comes from (the job's best), and the list fits the page
    cells = browser.eval(
        "[...document.querySelectorAll('tr.job td.num')].map(td => td.innerText.replace(/\\s+/g, ' '))"
    )
    assert "22.22 k2" in cells and "26.12 k8" in cells, cells
    assert browser.eval("document.documentElement.scrollWidth <= document.documentElement.clientWidth")
    browser.screenshot(SHOTS / "jobs.png")

    assert browser.goto(f"{url}/ui/jobs/{job}") == 200
    drawn = browser.eval("""[...document.querySelectorAll('svg.chart')].map(svg => ({
        field: svg.dataset.field, title: svg.querySelector('.chart-title').textContent,
        width: svg.getBoundingClientRect().width,
        bars: svg.querySelectorAll('rect.bar').length,
        barHeights: [...svg.querySelectorAll('rect.bar')].map(r => r.getBBox().height),
        selected: [...svg.querySelectorAll('rect.bar.selected')].map(r => +r.dataset.layer),
        cuts: svg.querySelectorAll('line.cut').length}))""")
    assert len(drawn) == 7, drawn
    cca = next(c for c in drawn if c["field"] == "cca_bound" and c["title"].startswith("attn"))
    assert cca["width"] > 300 and cca["bars"] == 8 and min(cca["barHeights"]) > 0
    assert sorted(cca["selected"]) == lowest(4) and cca["cuts"] == 2
    # The stylesheet applied: a selected bar is filled red, a kept one blue-grey.
    fills = browser.eval("""[...document.querySelectorAll('svg.chart rect.bar')].slice(0, 8)
        .map(r => getComputedStyle(r).fill)""")
    assert "rgb(214, 39, 40)" in fills and "rgb(154, 179, 207)" in fills
    assert browser.eval("document.querySelectorAll('svg.timeline rect.span').length") == 4
    _events_fold(browser)
    _results_read(browser)
    browser.screenshot(SHOTS / "job.png")
    _follow_the_job_links(browser, url, job, downloads)

    assert browser.goto(f"{url}/ui/jobs/{theirs}/json") == 404  # another team's job, as JSON: the 404 page
    assert browser.goto(f"{url}/ui/jobs/{theirs}") == 404
    assert browser.eval("document.querySelector('h1').textContent") == "Not found"
    assert theirs not in browser.eval("document.body.innerText")

    assert browser.goto(f"{url}/ui/compare?ids={base},{job}&baseline={base}") == 200
    assert "compression.k" in browser.eval("document.querySelector('table.diff').innerText")
    # A bar per model with a baseline to change from, a mark at 0 for the baselines; the k4 the base job lacks: none.
    drawn = browser.eval("""[...document.querySelectorAll('svg.compare-chart[data-metric="perplexity/wikitext2/ppl"] [data-job]')]
        .map(r => ({job: r.dataset.job, variant: r.dataset.variant, fill: getComputedStyle(r).fill,
                    bar: r.tagName === 'rect', width: r.getBBox().width}))""")
    assert {(b["job"], b["variant"], b["bar"]) for b in drawn} == {
        (base, "base", False),
        (base, "k2", False),
        (job, "base", True),
        (job, "k2", True),
    }
    bars = [b for b in drawn if b["bar"]]
    k2 = next(b for b in bars if b["job"] == job and b["variant"] == "k2")
    assert k2["fill"] == "rgb(225, 87, 89)" and k2["width"] > 50  # above the baseline job's k2 perplexity: worse, red
    assert next(b for b in bars if b["variant"] == "base")["width"] < 1  # the same base: no change
    browser.screenshot(SHOTS / "compare.png")


def _click(text: str) -> str:
    """JavaScript that clicks the first link whose text starts with `text`."""
    return f"[...document.links].find(a => a.textContent.startsWith({text!r})).click()"


def _follow_the_job_links(browser: Browser, url: str, job: str, downloads: Path) -> None:
    """The job page's links with the login cookie alone: the job as JSON, an output's file list, a download."""
    assert browser.load(lambda: browser.eval(_click("This job as JSON"))) == 200
    assert browser.eval("JSON.parse(document.body.innerText).id") == job
    assert browser.goto(f"{url}/ui/jobs/{job}") == 200
    assert browser.load(lambda: browser.eval(_click(f"/v1/jobs/{job}/outputs/4/files"))) == 200
    assert browser.eval("location.pathname") == f"/ui/jobs/{job}/outputs/4/files"
    listed = browser.eval("[...document.querySelectorAll('tr.file a')].map(a => a.textContent)")
    assert sorted(listed) == sorted(FILES), listed
    for name, data in FILES.items():
        saved = browser.download(lambda: browser.eval(_click(name)), downloads / name.replace("/", "_"))
        assert saved.read_bytes() == data, name


def _until(browser: Browser, expression: str, timeout: float = 20.0):
    """The expression's value once it is truthy (the page updating itself from its event stream)."""
    deadline = time.monotonic() + timeout
    while not (value := browser.eval(expression)):
        assert time.monotonic() < deadline, f"never true: {expression}"
        time.sleep(0.1)
    return value


def _live_cancel_and_rerun(browser: Browser, url: str, sessions, running: str, theirs: str) -> None:
    """The running job's page follows the worker without a reload; Cancel, then Re-run from the page;
    another team's job can be neither followed nor cancelled; log out."""
    from service.core.models import Job
    from service.jobs import states, store

    assert browser.goto(f"{url}/ui/jobs/{running}") == 200
    browser.eval("window.notReloaded = true")
    with sessions() as s:  # the worker moves on
        token = s.get(Job, running).lease_token
        store.set_progress(s, running, "evaluate", 0.73, eta=12, lease_token=token)
        store.add_event(s, running, "log", "evaluating k8 on wikitext2", stage="evaluate")
    _until(browser, "document.getElementById('events-recent').innerText.includes('evaluating k8 on wikitext2')")
    _until(browser, "document.getElementById('progress-text').textContent.startsWith('73%')")
    assert browser.eval("document.getElementById('progress-bar').value") == 0.73

    assert browser.load(lambda: browser.eval("document.querySelector('form.cancel').submit()")) == 200
    assert browser.eval("document.getElementById('status').textContent") == "cancelling"
    browser.eval("window.notReloaded = true")
    with sessions() as s:  # the worker sees the cancel at its next checkpoint
        states.finish(s, running, s.get(Job, running).lease_token, "cancelled")
    _until(browser, "document.body.dataset.ended === 'true'")
    _until(browser, "document.getElementById('status').textContent === 'cancelled'")
    assert browser.eval("window.notReloaded === true && !document.querySelector('form.cancel')")

    # Another team's job, with this team's cookie and a valid CSRF token: its stream and its cancel are 404s.
    status = browser.send(
        "Runtime.evaluate",
        awaitPromise=True,
        returnByValue=True,
        expression=(f"fetch('/ui/jobs/{theirs}/events/stream').then(r => r.status)"),
    )["result"]["value"]
    assert status == 404
    forged = f"const f = document.querySelector('form.rerun'); f.action = '/ui/jobs/{theirs}/cancel'; f.submit()"
    assert browser.load(lambda: browser.eval(forged)) == 404
    with sessions() as s:
        assert s.get(Job, theirs).status == "succeeded"

    assert browser.goto(f"{url}/ui/jobs/{running}") == 200
    assert browser.load(lambda: browser.eval("document.querySelector('form.rerun').submit()")) == 200
    again = browser.eval("location.pathname").rsplit("/", 1)[1]
    assert again != running and browser.eval("document.getElementById('status').textContent") == "queued"
    with sessions() as s:
        assert (
            s.get(Job, again).spec == s.get(Job, running).spec
            and s.get(Job, again).team_id == s.get(Job, running).team_id
        )

    browser.load(lambda: browser.eval("document.querySelector('form.logout').submit()"))
    assert browser.eval("location.pathname") == "/ui/login"
    assert browser.goto(f"{url}/ui/jobs") == 200 and browser.eval("location.pathname") == "/ui/login"
