"""The API's config.json fetch reads the Hub's address, token and offline switch from the Settings (HF_ENDPOINT,
HF_TOKEN and HF_HUB_OFFLINE, huggingface_hub's own variable names), not from the environment at each request.
Offline, it never reaches the Hub: an estimate is absent as when the Hub cannot be reached."""

from __future__ import annotations

import json

import pytest
from testkit.model_configs import TINY, hub_serving
from testkit.service_lib import assert_problem

from service.core.models import Job
from service.core.settings import HUB, Settings
from service.estimates import placement
from service.estimates.configs import ConfigUnavailable, model_config


def test_hf_endpoint_and_hf_token_are_settings(monkeypatch, tmp_path):
    monkeypatch.setenv("NBL_HOME", str(tmp_path))
    for empty in ("", " "):
        monkeypatch.setenv("HF_ENDPOINT", empty)
        monkeypatch.setenv("HF_TOKEN", empty)
        s = Settings()
        assert (s.hf_read_endpoint, s.hf_token) == (HUB, None)  # empty: unset, as huggingface_hub reads them
    monkeypatch.setenv("NBL_HF_ENDPOINT", "http://publish.example")  # the publishing Hub is another setting
    monkeypatch.delenv("HF_ENDPOINT")
    assert Settings().hf_read_endpoint == HUB


def test_the_config_fetch_uses_the_settings_endpoint_and_token(monkeypatch, tmp_path):
    seen: list = []
    with hub_serving({"org/tiny": json.dumps(TINY).encode()}, seen) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        monkeypatch.setenv("HF_TOKEN", "hf_secret")
        with_token = Settings(home=tmp_path)
        monkeypatch.delenv("HF_TOKEN")
        without = Settings(home=tmp_path)
        monkeypatch.delenv("HF_ENDPOINT")  # read once, when the Settings were built
        assert model_config("org/tiny", with_token) == TINY
        assert model_config("org/tiny", without) == TINY
    assert seen == ["Bearer hf_secret", None]
    assert "hf_secret" not in repr(with_token)


@pytest.mark.parametrize(
    "env,offline",
    [
        ({"HF_HUB_OFFLINE": "1"}, True),
        ({"HF_HUB_OFFLINE": "true"}, True),
        ({"HF_HUB_OFFLINE": "YES"}, True),
        ({"TRANSFORMERS_OFFLINE": "1"}, True),
        ({"HF_HUB_OFFLINE": "0"}, False),
        ({"HF_HUB_OFFLINE": ""}, False),
        ({"HF_HUB_OFFLINE": "no"}, False),
        ({"HF_HUB_OFFLINE": "maybe"}, False),
        ({}, False),
    ],
)
def test_hf_hub_offline_is_a_setting_read_as_huggingface_hub_reads_it(monkeypatch, tmp_path, env, offline):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert Settings(home=tmp_path).hf_hub_offline is offline


def test_offline_the_config_fetch_never_reaches_the_hub(monkeypatch, tmp_path):
    seen: list = []
    with hub_serving({"org/tiny": json.dumps(TINY).encode()}, seen) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        with pytest.raises(ConfigUnavailable, match="HF_HUB_OFFLINE") as e:
            model_config("org/tiny", Settings(home=tmp_path))
        assert e.value.unreachable and not e.value.invalid  # as when the Hub is down: no estimate, no 422
        monkeypatch.delenv("HF_HUB_OFFLINE")
        assert model_config("org/tiny", Settings(home=tmp_path)) == TINY  # the same stand-in, online
    assert seen == [None]  # one request: the online one


def test_an_offline_api_answers_without_the_hub(settings, client, auth, sessions, monkeypatch):
    """POST /v1/estimates has nothing to answer (a 503, as with the Hub down); POST /v1/jobs takes the job
    without an estimate, for the worker to check. The Hub stand-in is asked nothing."""
    monkeypatch.setattr(placement, "_hub_down_until", 0.0)  # an earlier test's memory of a Hub outage
    seen: list = []
    with hub_serving({"org/tiny": json.dumps(TINY).encode()}, seen) as url:
        monkeypatch.setattr(settings, "hf_read_endpoint", url)
        monkeypatch.setattr(settings, "hf_hub_offline", True)
        body = {"model": {"id": "org/tiny"}, "calibration": {"num_samples": 8, "seq_len": 32}, "compression": {"k": 1}}
        p = assert_problem(client.post("/v1/estimates", json=body, headers=auth), 503, "not-ready")
        assert "HF_HUB_OFFLINE" in p["detail"], p
        resp = client.post("/v1/jobs", json=body, headers=auth)
        assert resp.status_code == 201, resp.text
    assert seen == []
    with sessions() as s:
        assert s.get(Job, resp.json()["id"]).estimate is None
