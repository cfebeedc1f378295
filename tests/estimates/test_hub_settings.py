"""The API's config.json fetch reads the Hub's address and token from the Settings (HF_ENDPOINT and
HF_TOKEN, huggingface_hub's own variable names), not from the environment at each request."""

from __future__ import annotations

import json

from configs import TINY, hub_serving

from service.core.settings import HUB, Settings
from service.estimates.configs import model_config


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
