"""Every family of nbl/families.py, end to end on its tiny random checkpoint (issue 37's "done when"):

- a job through the API succeeds, each output reloaded in a fresh process by the load check (the nbl form's
  token-exactness: its logits equal the compressed model's in memory), and the result claims only the runtimes
  the family's entry claims;
- `nbl compress` succeeds on it and `nbl estimate` sizes it;
- a form the family cannot be written in is a 422 at submit, with the entry's reason.

The dense four, one MoE and one Gemma run in `make test-fast`; the others are marked slow (testkit.models).
"""

from __future__ import annotations

import json

import pytest
from testkit.models import FAMILY_CONFIGS, family_param, save_tiny_checkpoint

from cli import main as cli
from nbl.families import FAMILIES
from nbl.outputs.forms import runs_in

FAMILY_PARAMS = [family_param(f) for f in sorted(FAMILY_CONFIGS)]
# a whole job per family: the dense four have their own job tests (tests/worker/publish/), so only the new ones here,
# and of those one MoE and one Gemma in test-fast
NEW = [f for f in sorted(FAMILY_CONFIGS) if f not in ("llama", "mistral", "qwen2", "qwen3")]
JOB_PARAMS = [pytest.param(f, marks=() if f in ("qwen3_moe", "gemma3_text") else pytest.mark.slow) for f in NEW]
JOB = {
    "calibration": {"dataset": "c4", "num_samples": 8, "seq_len": 32},
    "compression": {"mode": "attn", "k": 1},
    "evaluation": {"perplexity": []},
}


@pytest.fixture
def db_url(sqlite_clean_url):
    return sqlite_clean_url


@pytest.fixture
def in_process(settings, monkeypatch):
    """The worker's task runs here, on the API's database."""
    from worker import tasks

    settings.ensure_dirs()
    monkeypatch.setattr(tasks, "settings", settings)
    monkeypatch.setattr(tasks, "_sessions", None)
    return tasks


@pytest.mark.parametrize("family", JOB_PARAMS)
def test_a_job_on_each_family_succeeds_and_claims_its_entrys_runtimes(family, settings, client, auth, in_process):
    save_tiny_checkpoint(settings.models_dir / family, family)
    resp = client.post("/v1/jobs", json={**JOB, "model": {"id": f"local:{family}"}}, headers=auth)
    assert resp.status_code == 201, resp.text
    assert in_process.run_job(resp.json()["id"]) == "succeeded"
    job = client.get(f"/v1/jobs/{resp.json()['id']}", headers=auth).json()
    assert job["status"] == "succeeded", job["error"]
    assert job["selected_layers"][0]["family"] == family
    (out,) = job["result"]["outputs"]
    assert out["runs_in"] == runs_in("nbl", "attn", "nbl", family)
    assert ("vllm+plugin" in out["runs_in"]) == FAMILIES[family].plugin
    assert out["dtype"] == "float32"  # publish.dtype auto: the tiny base's stored dtype, as the result says


@pytest.mark.parametrize("family", FAMILY_PARAMS)
def test_nbl_compress_and_nbl_estimate_take_each_family(family, tmp_path, text_file, capsys):
    model = save_tiny_checkpoint(tmp_path / family, family)
    size = ["--model", str(model), "--num-samples", "8", "--seq-len", "32", "--k", "1"]
    assert cli.main(["estimate", *size, "--json"]) == 0, capsys.readouterr().err
    est = json.loads(capsys.readouterr().out)
    assert est["host_bytes"] > 0 and est["seconds"][0] > 0
    args = ["compress", "--model", str(model), "--dataset", str(text_file), "--num-samples", "8", "--seq-len", "32"]
    code = cli.main([*args, "--mode", "block", "--k", "1", "--out", str(tmp_path / "out"), "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    result = json.loads(out.out)
    assert result["outputs"][0]["family"] == family
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["model_type"] == f"nbl_{family}" and config["nbl"]["mode"] == "block"
    # the parameters it says it removed are those the base has and the output has not
    from transformers import AutoModelForCausalLM

    count = lambda path, **kw: sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(path, **kw).parameters())  # noqa: E731
    params = result["outputs"][0]["params"]
    assert params["total"] == count(model)
    assert params["total"] - params["removed_total"] == count(tmp_path / "out", trust_remote_code=True)
    assert (params["active"] < params["total"]) == FAMILIES[family].moe
    assert "Parameters removed:" in (tmp_path / "out" / "README.md").read_text()


@pytest.mark.parametrize(
    "family", [f for f, e in sorted(FAMILIES.items()) if e.fold and f in ("qwen3_moe", "gemma3_text")]
)
def test_fold_where_the_entry_refuses_it_is_a_422_with_its_reason(family, settings, client, auth):
    save_tiny_checkpoint(settings.models_dir / family, family)
    body = {**JOB, "model": {"id": f"local:{family}"}, "compression": {"mode": "block", "k": 1, "form": "fold"}}
    resp = client.post("/v1/jobs", json=body, headers=auth)
    assert resp.status_code == 422, resp.text
    assert FAMILIES[family].fold in resp.text and "use form 'nbl'" in resp.text


def test_a_multimodal_gemma3_job_compresses_its_text_model(
    settings, client, auth, in_process, tmp_path, text_file, capsys
):
    """gemma3's text part (nbl/families.TEXT_PARTS): the job succeeds on the text model, says so on its events and
    card, and publishes the text model alone; `nbl estimate` sizes it."""
    from testkit.models import save_tiny_gemma3_multimodal

    save_tiny_gemma3_multimodal(settings.models_dir / "mm")
    resp = client.post("/v1/jobs", json={**JOB, "model": {"id": "local:mm"}}, headers=auth)
    assert resp.status_code == 201, resp.text
    assert in_process.run_job(resp.json()["id"]) == "succeeded"
    job = client.get(f"/v1/jobs/{resp.json()['id']}", headers=auth).json()
    assert job["status"] == "succeeded", job["error"]
    assert job["selected_layers"][0]["family"] == "gemma3_text"
    events = client.get(f"/v1/jobs/{job['id']}/events", headers=auth).json()["data"]
    said = [e["message"] for e in events if e["kind"] == "warning"]
    assert any("multimodal gemma3 model: this output is its text model alone" in m for m in said), said
    (folder,) = {p.parent for p in settings.publish_dir.rglob("config.json")}
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "nbl_gemma3_text" and "vision_config" not in config
    assert "its text model alone" in (folder / "README.md").read_text()
    size = ["--model", str(settings.models_dir / "mm"), "--num-samples", "8", "--seq-len", "32", "--k", "1"]
    assert cli.main(["estimate", *size, "--json"]) == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["host_bytes"] > 0
    args = ["compress", "--model", str(settings.models_dir / "mm"), "--dataset", str(text_file), *size[2:]]
    assert cli.main([*args, "--out", str(tmp_path / "out"), "--json"]) == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["outputs"][0]["family"] == "gemma3_text"
