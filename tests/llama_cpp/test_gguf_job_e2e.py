"""A portable job end to end through real processes: `nbl serve` and `nbl worker` on Postgres and Redis, the Hub
offline (HF_HUB_OFFLINE; the model is a local one, `local:tiny`). The job asks compression.form fold in block mode
and publish.formats ["safetensors", "gguf:q8_0"]: the result names the form and its runtimes, the files endpoint
lists the GGUF with its sha256, the download matches it, and llama.cpp (llama-cpp-python) loads it and generates."""

from __future__ import annotations

import hashlib

import pytest
from gguf_helpers import llama_cpp_greedy
from live_job import finished, live_service, service_env, tiny_with_smollm2_tokenizer

pytestmark = pytest.mark.slow  # and e2e (tests/conftest.py E2E_FILES)

TEXTS = ["The capital of France is", "def fibonacci(n):\n    ", "Once upon a time, in a small village,"]
JOB = {
    "model": {"id": "local:tiny"},
    "calibration": {"dataset": "c4", "num_samples": 10, "seq_len": 32},
    "compression": {"mode": "block", "form": "fold", "criterion": "cosine", "k": [1]},
    "evaluation": {"perplexity": []},
    "publish": {"local_dir": "tiny-fold", "formats": ["safetensors", "gguf:q8_0"]},
}


def test_fold_job_publishes_a_gguf_llama_cpp_runs(
    pg_url, redis_queue, settings_for, team_key_for, gguf_python, tmp_path
):
    redis_url, queue, _ = redis_queue
    settings = settings_for(pg_url, broker_url=redis_url, queue_name=queue)
    settings.ensure_dirs()
    tiny_with_smollm2_tokenizer(settings.models_dir / "tiny", tmp_path)
    env = service_env(settings, pg_url, redis_url, queue, gguf_python)
    with live_service(settings, env, tmp_path, team_key_for(settings)) as (c, said):
        job = finished(c, said, JOB)
        job_id = job["id"]
        out = job["result"]["outputs"][0]
        assert out["form"] == "fold" and "llama.cpp" in out["runs_in"] and 0 not in out["layers"]
        listed = {f["path"]: f for f in c.get(f"/v1/jobs/{job_id}/outputs/1/files").json()["data"]}
        assert {"model-q8_0.gguf", "config.json", "model.safetensors"} <= set(listed)
        config = c.get(f"/v1/jobs/{job_id}/outputs/1/files/config.json").json()
        assert config["num_hidden_layers"] == 3 and "auto_map" not in config  # the stock Llama class
        body = c.get(f"/v1/jobs/{job_id}/outputs/1/files/model-q8_0.gguf").content
    entry = listed["model-q8_0.gguf"]
    assert len(body) == entry["size"] and hashlib.sha256(body).hexdigest() == entry["sha256"]
    gguf = tmp_path / "downloaded-q8_0.gguf"
    gguf.write_bytes(body)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(settings.models_dir / "tiny")
    ids = [tok(t, add_special_tokens=False)["input_ids"] for t in TEXTS]
    got = llama_cpp_greedy(gguf_python, gguf, ids, TEXTS, 16, tmp_path)
    assert got["arch"] == "llama" and got["ids"] == ids  # the tokenizer is embedded
    # q8_0: other logits than float32, so no token-exact comparison (the f32 one is test_gguf_forms.py's)
    assert all(len(t) == 16 and all(0 <= i < 49152 for i in t) for t in got["tokens"])
