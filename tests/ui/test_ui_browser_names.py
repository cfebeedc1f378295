"""Issue 38 in a real browser: the dashboard names what a job made. Headless Chromium at 1280 px against a real
`nbl serve`: the jobs list clips no column, each job has a label beside its id, a linear job's form is shown
in the list, on its page and on compare, compare finds no false differences between requests written
differently, and a failed job's page says why and what the gates held back. Saves failed.png beside the
other screenshots (NBL_UI_SHOTS, as test_ui_browser.py)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from testkit.cdp import Browser, chromium_binary, env_without
from testkit.ui_seed import seed_job
from testkit.ui_server import REPO, cli_key, nbl_serve

SHOTS = Path(os.environ.get("NBL_UI_SHOTS") or tempfile.mkdtemp(prefix="nbl-ui-shots-"))
# Chips long enough that a fixed-width table would run past the window (the metadata column clipped first).
WIDE_METADATA = {"ci": "nightly", "branch": "feature/a-rather-long-branch-name", "owner": "platform-team"}

if chromium_binary() is None:
    if os.environ.get("CI"):
        pytest.fail("chromium is not installed (apt-get install -y chromium)", pytrace=False)
    pytest.skip("chromium is not installed (apt-get install -y chromium)", allow_module_level=True)

# Every cell of the jobs table against its scrolling box and the window: what lies (partly) outside is clipped.
CLIPPED = """(() => {
  const box = document.querySelector('table.jobs').closest('.wide'), b = box.getBoundingClientRect();
  const right = Math.min(b.right, document.documentElement.clientWidth) + 0.5;
  const out = [...document.querySelectorAll('table.jobs th, table.jobs td')]
    .filter(c => c.getBoundingClientRect().right > right).map(c => c.textContent.trim().slice(0, 30));
  return {box: [box.scrollWidth, box.clientWidth], page: [document.documentElement.scrollWidth,
          document.documentElement.clientWidth], out};
})()"""


def test_the_dashboard_names_what_each_job_made(tmp_path):
    from service.core.db import make_engine, make_sessionmaker
    from service.core.settings import Settings

    env = {**env_without("DATABASE_URL", "BROKER_URL"), "NBL_HOME": str(tmp_path / "home"), "PYTHONPATH": str(REPO)}
    key = cli_key(env, "alpha")
    settings = Settings(home=env["NBL_HOME"])
    engine = make_engine(settings)
    sessions = make_sessionmaker(engine)
    with nbl_serve(env) as ready:
        plain = seed_job(sessions, settings, key, ks=(4,), compression={"k": 4}, metadata={"name": "nightly attn"})
        spelled = seed_job(sessions, settings, key, ks=(4,), compression={"form": "nbl", "criterion": "cosine"})
        linear = seed_job(sessions, settings, key, ks=(4,), compression={"form": "linear"}, metadata=WIDE_METADATA)
        failed = seed_job(
            sessions,
            settings,
            key,
            ks=(2,),
            finish="failed",
            error_type="quality",
            error_message="no output passed its quality gates",
            gate=0.01,
            published=False,
        )
        browser = Browser(tmp_path / "chrome", width=1280)
        try:
            url = ready()
            _log_in(browser, url, key)
            _list_fits_and_names_jobs(browser, url, plain, linear)
            _job_page_names_the_form(browser, url, linear)
            _compare_without_false_differences(browser, url, plain, spelled, linear)
            _failed_job_says_why(browser, url, failed)
        finally:
            browser.close()
            engine.dispose()


def _log_in(browser: Browser, url: str, key: str) -> None:
    assert browser.goto(f"{url}/ui/login") == 200
    status = browser.load(
        lambda: browser.eval(
            f"document.getElementById('key').value = {key!r}; document.querySelector('form.login').submit()"
        )
    )
    assert status == 200 and browser.eval("location.pathname") == "/ui/jobs"


def _list_fits_and_names_jobs(browser: Browser, url: str, plain: str, linear: str) -> None:
    assert browser.eval("window.innerWidth") == 1280
    fit = browser.eval(CLIPPED)
    assert fit["box"][0] <= fit["box"][1] and fit["page"][0] <= fit["page"][1] and fit["out"] == [], fit
    heads = browser.eval("[...document.querySelectorAll('table.jobs thead th')].map(th => th.textContent.trim())")
    assert heads[-1] == "Metadata" and any("perplexity" in h for h in heads), heads
    rows = browser.eval("""Object.fromEntries([...document.querySelectorAll('tr.job')].map(tr => [
        tr.querySelector('input[name=ids]').value,
        {label: tr.querySelector('a.label').textContent, id: tr.querySelector('code.id').textContent,
         recipe: tr.querySelector('td.recipe').innerText}]))""")
    assert rows[plain]["label"] == "nightly attn" and rows[plain]["id"] == plain  # metadata name, beside the id
    assert rows[linear]["label"] == "SmolLM2-135M-Instruct · attn k=4 · linear form"  # else model + recipe
    assert "attn · nbl · linear form · k=4" in rows[linear]["recipe"]  # the form, not only the method
    assert "nbl form" in rows[plain]["recipe"]


def _job_page_names_the_form(browser: Browser, url: str, linear: str) -> None:
    assert browser.goto(f"{url}/ui/jobs/{linear}") == 200
    assert browser.eval("document.querySelector('h1 .label').textContent").endswith("linear form")
    assert browser.eval("document.querySelector('.job-id code').textContent") == linear
    assert "linear form" in browser.eval("document.querySelector('dd.recipe').textContent")


def _compare_without_false_differences(browser: Browser, url: str, plain: str, spelled: str, linear: str) -> None:
    # `k: 4` with defaults left out against `k: [4]` with form and criterion spelled out: the same request.
    assert browser.goto(f"{url}/ui/compare?ids={plain},{spelled}") == 200
    assert browser.eval("document.querySelector('table.diff')") is None
    assert "Same request" in browser.eval("document.body.innerText")
    assert browser.goto(f"{url}/ui/compare?ids={plain},{linear}") == 200
    rows = browser.eval("""[...document.querySelectorAll('table.diff tbody tr')].map(tr =>
        [...tr.children].map(c => c.textContent.trim()))""")
    assert rows == [["compression.form", "nbl", "linear"]], rows
    forms = browser.eval("[...document.querySelectorAll('table.compare td.recipe')].map(td => td.dataset.form)")
    assert forms == ["nbl", "linear"]
    labels = browser.eval("[...document.querySelectorAll('table.compare thead a.label')].map(a => a.textContent)")
    assert labels[0] == "nightly attn"


def _failed_job_says_why(browser: Browser, url: str, failed: str) -> None:
    assert browser.goto(f"{url}/ui/jobs/{failed}") == 200
    text = browser.eval("document.body.innerText")
    assert "No outputs yet" not in text
    assert "The job failed" in text
    assert browser.eval("document.querySelector('.outcome-error').textContent") == (
        "Why: quality: no output passed its quality gates"
    )
    held = browser.eval("[...document.querySelectorAll('.held-back li')].map(li => li.textContent)")
    assert len(held) == 1 and held[0].startswith("k2: WikiText-2 perplexity") and "at most +1%" in held[0], held
    browser.screenshot(SHOTS / "failed.png")
