"""A job never reads a private Hub repo (worker/engine/loading/hub_download.py, worker/load_stage.py).

The worker reads the Hub with the deployment's token (HF_TOKEN), the same for every team's jobs. Where that
token can read an organisation's private repos (a service account in the company's org, to reach gated
models), team alpha's job naming `company/beta-secret` (team beta's private output, pushed with beta's own
token) downloaded, compressed and published it to alpha: another team's weights, and most of them unchanged
at a small k. Now a job refuses a repo the Hub calls private (`user`), before any file of it is downloaded;
`nbl compress` and `nbl eval`, run with their user's own token, still read one. The Hub is faked at its edge.
"""

from __future__ import annotations

from types import SimpleNamespace

import huggingface_hub
import pytest

from nbl import recipe as R
from worker.engine.config import from_recipe
from worker.engine.loading.hub_access import HubModelError
from worker.engine.loading.load import load_model
from worker.errors import classify
from worker.load_stage import load
from worker.pipeline_io import Options

LLAMA = {
    "model_type": "llama",
    "num_hidden_layers": 4,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 128,
    "max_position_embeddings": 256,
}


class PrivateHub:
    """A Hub whose repo `company/beta-secret` is private (and readable with the deployment's token): it lists
    its files and serves config.json; any other download is recorded."""

    def __init__(self, monkeypatch, tmp_path, private: bool = True):
        self.calls: list[tuple] = []

        def model_info(api_self, repo_id, revision=None, files_metadata=False, **kw):
            self.calls.append(("model_info", repo_id))
            return SimpleNamespace(
                sha="be7a" + "0" * 36,
                private=private,
                gated=False,
                siblings=[
                    SimpleNamespace(rfilename=n, size=10)
                    for n in ("config.json", "model.safetensors", "tokenizer.json")
                ],
            )

        def hf_hub_download(repo_id, filename, revision=None, **kw):
            self.calls.append(("hf_hub_download", filename))
            path = tmp_path / "hub" / filename
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(__import__("json").dumps(LLAMA) if filename == "config.json" else "{}")
            return str(path)

        def snapshot_download(repo_id, local_files_only=False, **kw):
            if local_files_only:  # fetch.is_warm asks the cache alone: nothing there
                raise FileNotFoundError("not in the cache")
            self.calls.append(("snapshot_download", repo_id))
            raise RuntimeError("the test's Hub serves no snapshot")

        session = SimpleNamespace(head=lambda url, **kw: self.calls.append(("head", url)))
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
        monkeypatch.setattr(huggingface_hub.utils, "get_session", lambda: session)
        monkeypatch.setattr(huggingface_hub.HfApi, "model_info", model_info)
        monkeypatch.setattr(huggingface_hub, "hf_hub_download", hf_hub_download)
        monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)

    def downloaded(self) -> list[str]:
        return [
            c[1]
            for c in self.calls
            if c[0] in ("snapshot_download",) or (c[0] == "hf_hub_download" and c[1] != "config.json")
        ]


class Sink:
    def progress(self, *a, **kw):
        pass

    def warning(self, *a, **kw):
        pass

    def estimate(self, *a, **kw):
        pass


def _job_load(options: Options):
    recipe = R.Recipe(
        model="company/beta-secret",
        compression=R.Compression(ks=(1,)),
        calibration=R.Calibration(num_samples=8, seq_len=32),
    )
    cfg = from_recipe(recipe)
    return load(recipe, cfg, options, Sink())


def test_a_jobs_load_refuses_a_private_repo_before_downloading_it(monkeypatch, tmp_path):
    hub = PrivateHub(monkeypatch, tmp_path)
    with pytest.raises(HubModelError) as refused:
        _job_load(Options(fit_check=False))
    failure = classify(refused.value)
    assert failure.type == "user" and "private" in failure.message and "company/beta-secret" in failure.message
    assert hub.downloaded() == [], hub.calls  # not a byte of its weights or tokenizer


def test_a_public_repo_is_read_as_before(monkeypatch, tmp_path):
    hub = PrivateHub(monkeypatch, tmp_path, private=False)
    with pytest.raises(RuntimeError, match="serves no snapshot"):  # got as far as downloading it
        _job_load(Options(fit_check=False))
    assert ("snapshot_download", "company/beta-secret") in hub.calls


def test_the_command_line_reads_a_private_repo_with_its_users_token(monkeypatch, tmp_path):
    """`nbl compress` / `nbl eval`: one user, their own token; load_model reads a private repo by default."""
    hub = PrivateHub(monkeypatch, tmp_path)
    with pytest.raises(RuntimeError, match="serves no snapshot"):
        load_model("company/beta-secret", device="cpu", weights=False)
    with pytest.raises(RuntimeError, match="serves no snapshot"):
        _job_load(Options(fit_check=False, private_hub=True))
    assert ("snapshot_download", "company/beta-secret") in hub.calls
