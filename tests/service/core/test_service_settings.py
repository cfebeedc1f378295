"""Settings derive everything from NBL_HOME, so two instances never share anything; the name
grammars keep paths and URLs out; local names resolve under their base directory only."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError
from testkit.service_lib import body, sqla_broker_messages

from nbl.request import JobCreate
from service.api import create_app
from service.core import migrate
from service.core.paths import model_source, publish_dir
from service.core.settings import Settings


def test_defaults_follow_nbl_home(tmp_path, monkeypatch):
    for var in ("DATABASE_URL", "BROKER_URL", "NBL_MODELS_DIR", "NBL_PUBLISH_DIR", "NBL_STATS_DIR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NBL_HOME", str(tmp_path / "h"))
    s = Settings()
    h = (tmp_path / "h").resolve()
    assert s.database_url == f"sqlite:///{h / 'nbl.db'}"
    assert s.broker_url == f"sqla+sqlite:///{h / 'broker.db'}"
    assert (s.models_dir, s.publish_dir, s.stats_dir) == (h / "models", h / "published", h / "stats")
    assert s.spill_dir == h / "spill"  # beside the statistics cache


def test_only_the_documented_variables_are_read(tmp_path, monkeypatch):
    """A field's own name is no environment variable: HOME is not NBL_HOME (the state went straight into
    the user's home), SECRET_KEY is not NBL_SECRET_KEY, DEVICES is not NBL_DEVICES."""
    monkeypatch.delenv("NBL_HOME", raising=False)
    monkeypatch.delenv("NBL_SECRET_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.setenv("SECRET_KEY", "not-a-fernet-key")
    monkeypatch.setenv("DEVICES", "cuda:7")
    s = Settings()
    assert s.home == (tmp_path / "user" / ".nbl").resolve()
    assert s.secret_key is None
    assert s.devices != "cuda:7"
    assert Settings(home=tmp_path / "h").home == (tmp_path / "h").resolve()  # code still passes fields by name


def test_data_dir_is_a_setting_and_empty_means_unset(tmp_path, monkeypatch):
    monkeypatch.setenv("NBL_DATA_DIR", str(tmp_path / "data"))
    assert Settings().data_dir == tmp_path / "data"
    for unset in ("", "  "):
        monkeypatch.setenv("NBL_DATA_DIR", unset)
        assert Settings().data_dir is None
    monkeypatch.delenv("NBL_DATA_DIR")
    assert Settings().data_dir is None

    monkeypatch.setenv("DATABASE_URL", "postgres://u:p@db/nbl")
    monkeypatch.setenv("NBL_MAX_K", "12")
    s = Settings()
    assert s.database_url == "postgresql+psycopg://u:p@db/nbl" and s.max_k == 12
    with pytest.raises(ValidationError):
        Settings(task_time_limit_s=600, task_soft_time_limit_s=700)
    with pytest.raises(ValidationError):
        Settings(task_time_limit_s=600, visibility_timeout_s=500)


def test_two_homes_never_interfere(tmp_path, team_key_for):
    a, b = (Settings(home=tmp_path / name) for name in ("a", "b"))
    for s in (a, b):
        migrate.ensure_schema(s)
    key_a, key_b = team_key_for(a, "same-name"), team_key_for(b, "same-name")
    with TestClient(create_app(a)) as ca, TestClient(create_app(b)) as cb:
        job = ca.post("/v1/jobs", json=body(), headers=key_a).json()
        assert ca.get("/v1/jobs", headers=key_b).status_code == 401  # b's key means nothing to a
        assert cb.get("/v1/jobs", headers=key_b).json()["data"] == []
        assert cb.get(f"/v1/jobs/{job['id']}", headers=key_b).status_code == 404
    assert [m["args"] for m in sqla_broker_messages(a)] == [[job["id"]]]
    assert sqla_broker_messages(b) == []


@pytest.mark.parametrize(
    "model_id",
    [
        "gpt2",
        "openai-community/gpt2",
        "meta-llama/Llama-3.1-8B-Instruct",
        "Qwen/Qwen2.5-0.5B",
        "local:smol_v2.1",
        "a/b",
    ],
)
def test_valid_model_ids(model_id):
    assert JobCreate.model_validate(body(model=model_id)).model.id == model_id


def test_local_names_resolve_under_their_directories(tmp_path):
    s = Settings(home=tmp_path)
    (s.models_dir / "smol").mkdir(parents=True)
    assert model_source(s, "local:smol") == str(s.models_dir / "smol")
    assert model_source(s, "acme/model") == "acme/model"
    assert publish_dir(s, "alpha", "smol-k4") == s.publish_dir / "alpha" / "smol-k4"
    for bad in ("..", "../x", "a/b", "/etc", "", ".nbl-staging"):
        with pytest.raises(ValueError):
            publish_dir(s, "alpha", bad)
        with pytest.raises(ValueError):
            publish_dir(s, bad, "smol-k4")
    with pytest.raises(ValueError):
        model_source(s, "local:missing")
    with pytest.raises(ValueError):
        model_source(s, "local:../../etc")
