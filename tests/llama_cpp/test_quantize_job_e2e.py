"""publish.quantize in a job end to end (issue 39): real `nbl serve` and `nbl worker` on Postgres and Redis, the Hub
offline. A fold block job on `local:tiny` asks publish.formats ["safetensors", "gguf:q8_0"] and publish.quantize
["w8a8"], with an evaluation and gates.quantized. The output folder holds the checkpoint, the GGUF and the w8a8/
copy; the files endpoint lists each file with its sha256 and serves what it lists; the result gives NBL + w8a8 and
base + w8a8 beside base and NBL, and gates.quantized's check; the card has the comparison (a copy failing its gate:
tests/worker/test_gates.py)."""

from __future__ import annotations

import hashlib
import json

import pytest
from live_job import finished, live_service, service_env, tiny_with_smollm2_tokenizer

pytestmark = pytest.mark.slow  # and e2e (tests/conftest.py E2E_FILES)
QJOB = {
    "model": {"id": "local:tiny"},
    "calibration": {"dataset": "c4", "num_samples": 10, "seq_len": 32},
    "compression": {"mode": "block", "form": "fold", "criterion": "cosine", "k": [1]},
    "evaluation": {"perplexity": ["wikitext2"], "max_tokens": 256},
    "gates": {"quantized": {"max_ppl_increase": {"wikitext2": 5.0}}},
    "publish": {"local_dir": "tiny-q", "formats": ["safetensors", "gguf:q8_0"], "quantize": ["w8a8"]},
}


def test_a_fold_job_publishes_its_w8a8_copy_beside_the_gguf_with_the_joint_evaluation(
    pg_url, redis_queue, settings_for, team_key_for, gguf_python, quant_python, tmp_path
):
    redis_url, queue, _ = redis_queue
    settings = settings_for(pg_url, broker_url=redis_url, queue_name=queue)
    settings.ensure_dirs()
    tiny_with_smollm2_tokenizer(settings.models_dir / "tiny", tmp_path)
    env = service_env(settings, pg_url, redis_url, queue, gguf_python) | {"NBL_QUANT_PYTHON": str(quant_python)}
    with live_service(settings, env, tmp_path, team_key_for(settings)) as (c, said):
        job = finished(c, said, QJOB)
        files = f"/v1/jobs/{job['id']}/outputs/1/files"
        listed = {f["path"]: f for f in c.get(files).json()["data"]}
        served = {p: c.get(f"{files}/{p}").content for p in listed if p.startswith("w8a8/") or p == "README.md"}

    assert {"model.safetensors", "model-q8_0.gguf", "w8a8/config.json", "w8a8/quantization.json"} <= set(listed)
    weights = [p for p in listed if p.startswith("w8a8/") and p.endswith(".safetensors")]
    assert weights and all(len(listed[p]["sha256"]) == 64 for p in listed)
    for p in served:
        if p != "README.md":
            assert hashlib.sha256(served[p]).hexdigest() == listed[p]["sha256"], p
    config = json.loads(served["w8a8/config.json"])
    assert config["quantization_config"]["quant_method"] == "compressed-tensors"
    assert json.loads(served["w8a8/quantization.json"])["unquantized"] == ["lm_head"]

    out, result = job["result"]["outputs"][0], job["result"]
    [q] = out["quantized"]
    assert q["scheme"] == "w8a8" and q["path"] == "w8a8" and q["bytes"] == sum(listed[p]["size"] for p in weights)
    assert q["calibration_tokens"] == 10 * 32  # the job's own calibration blocks
    assert (q["method"], q["unquantized"], q["llmcompressor"], q["compressed_tensors"]) == (
        "smoothquant+gptq",
        ["lm_head"],
        "0.14.0.1",
        "0.19.0",
    )
    [bq] = result["base_quantized"]
    assert bq["scheme"] == "w8a8" and bq["path"] is None and bq["bytes"] > 0
    ppl = {
        "base": result["base"]["perplexity"]["wikitext2"]["ppl"],
        "base+w8a8": bq["metrics"]["perplexity"]["wikitext2"]["ppl"],
        "nbl": out["metrics"]["perplexity"]["wikitext2"]["ppl"],
        "nbl+w8a8": q["metrics"]["perplexity"]["wikitext2"]["ppl"],
    }
    assert all(v > 1 for v in ppl.values()) and ppl["nbl+w8a8"] != ppl["nbl"], ppl  # measured, and quantized
    assert q["relative"]["perplexity"]["wikitext2"]["ppl"] == pytest.approx(ppl["nbl+w8a8"] / ppl["base"] - 1)
    [check] = [g for g in job["gates"]["checks"] if g["output"] == "k1+w8a8"]
    assert check["passed"] and check["value"] == pytest.approx(ppl["nbl+w8a8"])
    card = served["README.md"].decode()
    assert "## Quantized" in card and "| NBL + w8a8 |" in card and "| base + w8a8 |" in card
    assert "llm-compressor 0.14.0.1" in card and "`vllm serve <this folder>/w8a8`" in card
    row = {line.split(" | ")[0]: line for line in card.splitlines() if line.startswith("| ")}
    # each row's size: the copies' from the result, the base's own beside them
    assert row["| base + w8a8"].endswith(f"| {bq['bytes'] / 1e6:,.1f} |") and row["| base"].split(" | ")[-1] != "— |"
    assert row["| NBL + w8a8"].endswith(f"| {q['bytes'] / 1e6:,.1f} |")
