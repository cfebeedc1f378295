"""The one table of failure causes (worker/errors.py, issue 10 finding 10), on the exceptions the libraries
really raise: huggingface_hub against a local fake Hub, requests / httpx against a closed port and real
responses. Fakes only at the edge: the Hub."""

from __future__ import annotations

import json
import logging
import socket

import httpx
import pytest
import requests
from testkit.fakehub import FakeHub

from worker.engine.calibration.data import DataError
from worker.engine.loading.load import ModelError
from worker.errors import GATED, classify, retrying


@pytest.fixture
def hub(monkeypatch, tmp_path):
    """A fake Hub that hf_hub_download talks to, with a fresh download cache."""
    from huggingface_hub import constants

    h = FakeHub(tokens={"hf_read"}).start()
    monkeypatch.setattr(constants, "ENDPOINT", h.url)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", h.url + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    yield h
    h.stop()


def download(repo: str) -> str:
    from huggingface_hub import hf_hub_download

    return hf_hub_download(repo, "config.json")


def raised(fn, wrap: type[Exception] | None = None) -> BaseException:
    """What fn raises; with `wrap`, re-raised as our loaders do (`raise DataError(...) from e`)."""
    try:
        try:
            fn()
        except Exception as e:
            if wrap is None:
                raise
            raise wrap(f"cannot load: {e}") from e
    except Exception as e:  # noqa: BLE001
        return e
    raise AssertionError("nothing raised")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_hub_answers_are_classed_by_cause(hub):
    hub.models["org/ok"] = {"config.json": b"{}"}
    hub.gated.update({"org/gated": 403, "org/private": 401})
    assert json.loads(open(download("org/ok")).read()) == {}

    for repo in ("org/gated", "org/private"):  # our loader said "not found on the Hub" for both
        gated = classify(raised(lambda: download(repo), ModelError))
        assert (gated.type, gated.retry) == ("user", False) and gated.message.startswith(GATED), gated
    missing = classify(raised(lambda: download("org/missing"), ModelError))
    assert (missing.type, missing.retry) == ("user", False) and "not found" in missing.message.lower(), missing

    # A Hub 500 while fetching a dataset, wrapped as our loader wraps it: a DataError, i.e. a ValueError, which
    # the old table classed `user`. (hf_hub_download retries a HEAD's 5xx itself; the metadata call does not.)
    from huggingface_hub import HfApi

    info = lambda: HfApi(endpoint=hub.url, token="hf_read").model_info("org/ok")  # noqa: E731
    for status in (500, 503):
        hub.fail["repo_info"] = status
        failed = raised(info, DataError)
        assert isinstance(failed, DataError) and isinstance(failed, ValueError)
        assert (classify(failed).type, classify(failed).retry) == ("system", True), failed


def test_http_libraries_status_and_transport_errors():
    port = closed_port()
    refused = [
        raised(lambda: requests.get(f"http://127.0.0.1:{port}/", timeout=2)),
        raised(lambda: httpx.get(f"http://127.0.0.1:{port}/", timeout=2)),
        raised(lambda: httpx.get(f"http://127.0.0.1:{port}/", timeout=2), DataError),
    ]
    timeout = httpx.ReadTimeout("timed out", request=httpx.Request("GET", "https://huggingface.co/x"))
    for exc in [*refused, timeout, raised(lambda: (_ for _ in ()).throw(timeout), ModelError)]:
        got = classify(exc)
        assert (got.type, got.retry) == ("system", True), (exc, got)

    def status(code: int) -> list[BaseException]:
        r = requests.Response()
        r.status_code, r.url, r.reason = code, "https://huggingface.co/api/datasets/x", "x"
        req = httpx.Request("GET", "https://huggingface.co/api/models/x")
        return [raised(r.raise_for_status), raised(httpx.Response(code, request=req).raise_for_status, DataError)]

    for code, want in (
        (500, ("system", True)),
        (502, ("system", True)),
        (429, ("system", True)),
        (401, ("user", False)),
        (403, ("user", False)),
        (404, ("user", False)),
    ):
        for exc in status(code):
            got = classify(exc)
            assert (got.type, got.retry) == want, (code, exc, got)
            if code in (401, 403):
                assert got.message.startswith(GATED)


def test_programming_errors_are_system_with_a_traceback_and_input_errors_user():
    for exc in (KeyError("layers"), TypeError("x"), AttributeError("y")):
        got = classify(exc)
        assert (got.type, got.retry, got.traceback) == ("system", False, True), exc  # KeyError was `user`
    for exc in (ModelError("m: architecture 'x' is not supported"), DataError("too few blocks"), ValueError("k")):
        assert classify(exc).type == "user"
    from celery.exceptions import SoftTimeLimitExceeded

    from worker.errors import HubRefused, HubUnavailable

    assert classify(SoftTimeLimitExceeded()).type == "timeout"
    assert classify(HubRefused("401 Unauthorized; set-hub-token")).type == "user"
    assert (classify(HubUnavailable("503")).type, classify(HubUnavailable("503")).retry) == ("system", True)


def test_retrying_is_bounded_and_only_for_transient_causes(caplog):
    caplog.set_level(logging.WARNING)
    calls, waits = [], []

    def flaky(failures: list[BaseException]):
        def fn():
            calls.append(1)
            if failures:
                raise failures.pop(0)
            return "ok"

        return fn

    from worker.errors import HubUnavailable

    assert (
        retrying(
            flaky([HubUnavailable("503"), HubUnavailable("502")]), "x", attempts=3, backoff_s=1, sleep=waits.append
        )
        == "ok"
    )
    assert len(calls) == 3 and waits == [1, 2]
    calls.clear()
    with pytest.raises(HubUnavailable):
        retrying(flaky([HubUnavailable(str(i)) for i in range(10)]), "x", attempts=3, backoff_s=0, sleep=waits.append)
    assert len(calls) == 3  # bounded
    calls.clear()
    with pytest.raises(ModelError):
        retrying(flaky([ModelError("bad"), None]), "x", attempts=3, backoff_s=0, sleep=waits.append)
    assert len(calls) == 1  # a user error is not retried
