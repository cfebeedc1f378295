"""The input model's Hub access (worker/engine/loading/hub_access.py, issue 24 finding 20), on the exceptions the
libraries really raise: a closed loopback port, the fake Hub, httpx responses. Fakes only at the edge:
the Hub.

- the loader fails at once when nothing answers at the endpoint, as HubUnreachable (`system`, retried),
  worded for the job row, where huggingface_hub alone retried a refused connection for ~23 s per file;
- each Hub answer is worded (gated, missing, unwell) and classed by worker/errors.py as worded;
- HF_HUB_OFFLINE=1, the way out the message names, loads a model from the Hugging Face cache (the
  loader asked the Hub for its file list even then, and failed).
"""

from __future__ import annotations

import socket
import time

import httpx
import pytest
from testkit.fakehub import FakeHub
from testkit.models import save_tiny_checkpoint

from worker.engine.loading.hub_access import HubModelError, HubUnreachable, meaning
from worker.engine.loading.load import ModelError, load_model
from worker.errors import classify, retrying


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def endpoint(monkeypatch, tmp_path):
    """endpoint(url): huggingface_hub talks to `url`, with an empty download cache."""
    from huggingface_hub import constants

    def point(url: str) -> str:
        monkeypatch.setattr(constants, "ENDPOINT", url)
        monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", url + "/{repo_id}/resolve/{revision}/{filename}")
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
        return url

    return point


@pytest.fixture
def hub(endpoint):
    h = FakeHub().start()
    endpoint(h.url)
    yield h
    h.stop()


def test_the_loader_fails_at_once_when_no_hub_answers(endpoint):
    url = endpoint(f"http://127.0.0.1:{closed_port()}")
    start = time.monotonic()
    with pytest.raises(HubUnreachable) as caught:
        load_model("org/tiny-llama", weights=False)
    assert time.monotonic() - start < 8  # was ~23 s: huggingface_hub's five retries of a refused connection
    assert str(caught.value).startswith(f"cannot reach the Hugging Face Hub at {url} to download org/tiny-llama@main")
    failure = classify(caught.value)
    assert (failure.type, failure.retry, failure.message) == ("system", True, str(caught.value))


def test_a_hub_that_never_answers_is_given_up_within_the_etag_timeout(endpoint, monkeypatch):
    """A dropped route: the connection is taken (a listening socket that never accepts) and nothing comes
    back. The Hub's file listing has no timeout at all (model_info's default), so the loader waited forever."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_ETAG_TIMEOUT", 1)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = endpoint(f"http://127.0.0.1:{silent.getsockname()[1]}")
        start = time.monotonic()
        with pytest.raises(HubUnreachable, match=f"cannot reach the Hugging Face Hub at {url} .*timed out"):
            load_model("org/tiny-llama", weights=False)
        assert time.monotonic() - start < 8


def response_error(status: int) -> httpx.HTTPStatusError:
    request = httpx.Request("HEAD", "https://hub.example/org/m/resolve/main/config.json")
    try:
        httpx.Response(status, request=request).raise_for_status()
    except httpx.HTTPStatusError as e:
        return e
    raise AssertionError(status)


@pytest.mark.parametrize(
    "status,kind,says",
    [
        (503, HubUnreachable, "answered 503 while downloading org/m@v1; try again later"),
        (429, HubUnreachable, "answered 429"),
        (
            404,
            HubModelError,
            "org/m@v1: the Hugging Face Hub at http://127.0.0.1:1 has no /org/m/resolve/main/config.json",
        ),
        (400, HubModelError, "refused the download (400)"),
        (403, HubModelError, "gated or private: set a token with access (org/m): the Hugging Face Hub at"),
    ],
)
def test_each_answer_is_worded_and_classed_as_worded(endpoint, status, kind, says):
    endpoint("http://127.0.0.1:1")
    wrapped = ModelError("the loader's own wrapping")
    wrapped.__cause__ = response_error(status)
    clear = meaning(wrapped, "org/m", "v1")
    assert isinstance(clear, kind) and says in str(clear), clear
    failure = classify(clear)
    assert (failure.type, failure.retry) == (("system", True) if kind is HubUnreachable else ("user", False))
    assert failure.message == str(clear)


def test_our_own_refusals_are_left_as_they_are():
    assert meaning(ModelError("org/m: architecture 'x' is not supported"), "org/m", None) is None
    assert meaning(KeyError("layers"), "org/m", None) is None


def test_a_retry_is_said_before_its_wait():
    said, waits = [], []
    unreachable = HubUnreachable("cannot reach the Hugging Face Hub at http://h to download org/m@main")
    attempts = iter([unreachable, "ok"])

    def fn():
        got = next(attempts)
        if isinstance(got, Exception):
            raise got
        return got

    assert retrying(fn, "loading the model", attempts=3, backoff_s=2, sleep=waits.append, on_retry=said.append) == "ok"
    assert said == [f"loading the model failed: {unreachable}; trying again in 2 s (attempt 2 of 3)"] and waits == [2]


def test_offline_a_cached_hub_model_loads_and_an_uncached_one_is_a_user_error(hub, tmp_path, monkeypatch):
    from huggingface_hub import constants, hf_hub_download

    src = save_tiny_checkpoint(tmp_path / "tiny")
    hub.models["org/tiny"] = {p.name: p.read_bytes() for p in src.iterdir() if p.is_file()}
    for name in hub.models["org/tiny"]:  # the cache, filled while online
        hf_hub_download("org/tiny", name)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    requests = len(hub.requests)

    lm = load_model("org/tiny", weights=False)  # was: OfflineModeIsEnabled from the file listing
    assert (
        lm.family == "llama" and lm.path.parent.name == "snapshots" and lm.fingerprint == f"hub:org/tiny@{lm.path.name}"
    )
    assert len(hub.requests) == requests  # nothing asked of the Hub

    with pytest.raises(
        HubModelError, match="org/other@main is not in this machine's Hugging Face cache, and HF_HUB_OFFLINE is set"
    ):
        load_model("org/other", weights=False)


def test_nbl_compress_says_the_hub_is_away_without_a_traceback(endpoint, text_file, tmp_path, capsys, monkeypatch):
    from cli import main as cli

    url = endpoint(f"http://127.0.0.1:{closed_port()}")
    monkeypatch.setenv("NBL_HUB_ATTEMPTS", "2")  # the worker's retry setting, which `nbl compress` now follows
    monkeypatch.setenv("NBL_HUB_BACKOFF", "0.01")
    code = cli.main(
        [
            "compress",
            "--model",
            "org/tiny-llama",
            "--dataset",
            str(text_file),
            "--k",
            "1",
            "--out",
            str(tmp_path / "out"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err, err  # was: a traceback of LocalEntryNotFoundError, exit 1
    assert f"nbl: error: cannot reach the Hugging Face Hub at {url} to download org/tiny-llama@main" in err, err
    assert "warning: reading the model's config failed: cannot reach" in err and "(attempt 2 of 2)" in err, err
