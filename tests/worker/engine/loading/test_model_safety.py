"""The worker's model loader on hostile or oversized input models: the size is checked before any
download (NBL_MAX_MODEL_BYTES, from the Hub's file metadata; on disk for local models), custom code
(auto_map) is refused and trust_remote_code is never true, pickled weights are refused.

The Hub is the edge of the world here (unreachable from CI): HfApi.model_info, hf_hub_download and
snapshot_download are replaced by fakes that record their calls; everything else is real."""

from __future__ import annotations

import json
from types import SimpleNamespace

import huggingface_hub
import pytest
from testkit.models import save_tiny_checkpoint

from service.core.paths import model_source
from service.core.settings import Settings
from worker.engine.loading.load import ModelError, load_model

GB = 10**9
SHA = "c0ffee" + "0" * 34


class FakeHub:
    """model_info answers from a file list; downloads are recorded (and write what they are asked for)."""

    def __init__(self, monkeypatch, tmp_path, files: dict[str, int | None], config: dict | None = None):
        self.calls: list[tuple] = []
        self.files, self.config, self.tmp = files, config or {"model_type": "llama"}, tmp_path
        hub = self

        def model_info(api_self, repo_id, revision=None, files_metadata=False, **kw):
            hub.calls.append(("model_info", repo_id, revision, files_metadata))
            return SimpleNamespace(sha=SHA, siblings=[SimpleNamespace(rfilename=n, size=s) for n, s in files.items()])

        def hf_hub_download(repo_id, filename, revision=None, **kw):
            hub.calls.append(("hf_hub_download", repo_id, filename, revision))
            path = tmp_path / "hub" / filename
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(hub.config))
            return str(path)

        def snapshot_download(repo_id, revision=None, **kw):
            hub.calls.append(("snapshot_download", repo_id, revision))
            raise AssertionError("snapshot_download must not be reached in these tests")

        answers = SimpleNamespace(head=lambda url, **kw: None)  # hub_access.reach: the endpoint answers
        monkeypatch.setattr(huggingface_hub.utils, "get_session", lambda: answers)
        monkeypatch.setattr(huggingface_hub.HfApi, "model_info", model_info)
        monkeypatch.setattr(huggingface_hub, "hf_hub_download", hf_hub_download)
        monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)

    def downloads(self) -> list[tuple]:
        return [c for c in self.calls if c[0] != "model_info"]


SHARDED_70B = {
    "config.json": 900,
    "generation_config.json": 200,
    "tokenizer.json": 9_000_000,
    "README.md": 40_000,
    **{f"model-{i:05d}-of-00030.safetensors": 4_700_000_000 for i in range(1, 31)},
    "original/consolidated.00.pth": 16 * GB,  # not fetched (HUB_PATTERNS), not counted
}


def test_an_oversized_hub_model_is_refused_before_any_download(monkeypatch, tmp_path):
    hub = FakeHub(monkeypatch, tmp_path, SHARDED_70B)
    with pytest.raises(ModelError, match=r"141\.\d+ GB, over this server's limit of 100\.00 GB \(NBL_MAX_MODEL"):
        load_model("meta-llama/Llama-3.1-70B", revision="main", device="cpu", max_bytes=100 * GB)
    assert hub.calls == [("model_info", "meta-llama/Llama-3.1-70B", "main", True)]
    assert hub.downloads() == []  # not even config.json


def test_under_the_limit_the_measured_commit_is_fetched_and_custom_code_still_refused(monkeypatch, tmp_path):
    hub = FakeHub(
        monkeypatch,
        tmp_path,
        SHARDED_70B,
        config={"model_type": "llama", "auto_map": {"AutoModelForCausalLM": "evil.Model"}},
    )
    with pytest.raises(ModelError, match="auto_map .*never loaded with trust_remote_code"):
        load_model("someone/custom-code-model", device="cpu", max_bytes=200 * GB)
    # Sized first, then only config.json, of exactly the commit that was sized; no weights.
    assert hub.calls == [
        ("model_info", "someone/custom-code-model", None, True),
        ("hf_hub_download", "someone/custom-code-model", "config.json", SHA),
    ]


def test_unknown_file_sizes_are_refused_when_a_limit_is_set(monkeypatch, tmp_path):
    hub = FakeHub(monkeypatch, tmp_path, {"config.json": 900, "model.safetensors": None})
    with pytest.raises(ModelError, match="no size for model.safetensors"):
        load_model("a/b", device="cpu", max_bytes=GB)
    assert hub.downloads() == []


def test_without_a_limit_the_file_list_is_read_without_sizes(monkeypatch, tmp_path):
    hub = FakeHub(
        monkeypatch,
        tmp_path,
        {"config.json": None, "model.safetensors": None},
        config={"model_type": "llama", "auto_map": {"x": "y"}},
    )
    monkeypatch.setenv("NBL_MAX_MODEL_BYTES", "1")  # the engine reads no setting: only max_bytes limits
    with pytest.raises(ModelError, match="auto_map"):
        load_model("a/b", device="cpu")
    # The file list (for code, custom_code.py) but no sizes; then only config.json, of the listed commit.
    assert hub.calls == [("model_info", "a/b", None, False), ("hf_hub_download", "a/b", "config.json", SHA)]


def test_local_models_are_sized_on_disk(monkeypatch, tmp_path):
    path = save_tiny_checkpoint(tmp_path / "tiny")
    size = sum(f.stat().st_size for f in path.glob("*.safetensors"))
    with pytest.raises(ModelError, match="NBL_MAX_MODEL_BYTES"):
        load_model(str(path), device="cpu", max_bytes=size - 1)

    # At the limit it loads, and never with remote code, always from safetensors.
    from transformers import AutoModelForCausalLM

    seen = {}
    real = AutoModelForCausalLM.from_pretrained.__func__

    def spy(cls, *args, **kwargs):
        seen.update(kwargs)
        return real(cls, *args, **kwargs)

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", classmethod(spy))
    assert load_model(str(path), device="cpu", max_bytes=size).family == "llama"
    assert seen["trust_remote_code"] is False and seen["use_safetensors"] is True


def test_local_custom_code_and_pickled_weights_are_refused(tmp_path):
    path = save_tiny_checkpoint(tmp_path / "tiny")
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps(config | {"auto_map": {"AutoModelForCausalLM": "m.M"}}))
    with pytest.raises(ModelError, match="auto_map"):
        load_model(str(path), device="cpu")
    (path / "config.json").write_text(json.dumps(config))
    for f in path.glob("*.safetensors"):
        f.rename(f.with_name("pytorch_model.bin"))
    with pytest.raises(ModelError, match="pickled weights"):
        load_model(str(path), device="cpu")


def test_bad_limit_setting_and_user_error_class(monkeypatch):
    monkeypatch.setenv("NBL_MAX_MODEL_BYTES", "10GB")
    with pytest.raises(ValueError, match="NBL_MAX_MODEL_BYTES"):  # `nbl` prints it as a user error, exit 2
        Settings()
    assert issubclass(ModelError, ValueError)  # the worker classifies it as a user error


def test_a_hub_id_that_is_also_a_path_on_the_worker_is_refused(tmp_path, monkeypatch):
    """The loader reads an existing relative path as a local checkpoint: a job's Hub id like `models/x`
    must not pick up a directory that happens to sit in the worker's working directory."""
    from worker.pipeline import resolve_model

    settings = Settings(home=tmp_path / "home")
    monkeypatch.chdir(tmp_path)
    assert resolve_model(model_source(settings, "owner/name")) == "owner/name"
    (tmp_path / "owner" / "name").mkdir(parents=True)
    with pytest.raises(ValueError, match="working directory"):
        resolve_model(model_source(settings, "owner/name"))
    local = settings.models_dir / "tiny"
    local.mkdir(parents=True)
    assert resolve_model(model_source(settings, "local:tiny")) == str(local)  # a resolved path


def test_the_worker_passes_settings_max_model_bytes_to_the_loader(
    sqlite_clean_url, settings_for, team_key_for, monkeypatch
):
    """Settings(max_model_bytes=...) limits a job's model, with NBL_MAX_MODEL_BYTES unset: the task runs in
    this process with those settings."""
    from fastapi.testclient import TestClient

    from service.api import create_app
    from worker import tasks

    monkeypatch.delenv("NBL_MAX_MODEL_BYTES", raising=False)
    probe = settings_for(sqlite_clean_url)
    probe.ensure_dirs()
    tiny = save_tiny_checkpoint(probe.models_dir / "tiny")
    size = sum(f.stat().st_size for f in tiny.glob("*.safetensors"))
    settings = probe.model_copy(update={"max_model_bytes": size - 1})
    monkeypatch.setattr(tasks, "settings", settings)
    monkeypatch.setattr(tasks, "_sessions", None)  # built from the settings above on first use
    auth = team_key_for(settings)
    with TestClient(create_app(settings)) as client:
        job = client.post(
            "/v1/jobs",
            headers=auth,
            json={
                "model": {"id": "local:tiny"},
                "calibration": {"dataset": "c4", "num_samples": 8, "seq_len": 32},
                "compression": {"k": 1},
            },
        ).json()
        assert tasks.run_job(job["id"]) == "failed"
        job = client.get(f"/v1/jobs/{job['id']}", headers=auth).json()
    assert job["error"]["type"] == "user" and "over this server's limit" in job["error"]["message"], job
