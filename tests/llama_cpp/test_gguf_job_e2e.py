"""A portable job end to end through real processes: `nbl serve` and `nbl worker` on Postgres and Redis, the Hub
offline (HF_HUB_OFFLINE; the model is a local one, `local:tiny`). The job asks compression.form fold in block mode
and publish.formats ["safetensors", "gguf:q8_0"]: the result names the form and its runtimes, the files endpoint
lists the GGUF with its sha256, the download matches it, and llama.cpp (llama-cpp-python) loads it and generates."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from gguf_helpers import REPO, llama_cpp_greedy
from testkit.models import DATA_DIR, save_tiny_checkpoint, smollm2_gguf

pytestmark = pytest.mark.slow  # and e2e (tests/conftest.py E2E_FILES)

TEXTS = ["The capital of France is", "def fibonacci(n):\n    ", "Once upon a time, in a small village,"]
JOB = {
    "model": {"id": "local:tiny"},
    "calibration": {"dataset": "c4", "num_samples": 10, "seq_len": 32},
    "compression": {"mode": "block", "form": "fold", "criterion": "cosine", "k": [1]},
    "evaluation": {"perplexity": []},
    "publish": {"local_dir": "tiny-fold", "formats": ["safetensors", "gguf:q8_0"]},
}


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tiny_with_smollm2_tokenizer(path: Path, tmp: Path) -> None:
    """A tiny random Llama with SmolLM2's tokenizer: llama.cpp's converter reads only tokenizers it knows."""
    from transformers import AutoTokenizer

    from worker.engine.loading.gguf import convert_gguf

    save_tiny_checkpoint(path, vocab=49152, seed=11)
    for f in path.glob("tokenizer*"):
        f.unlink()
    AutoTokenizer.from_pretrained(convert_gguf(smollm2_gguf(), tmp / "smollm2")).save_pretrained(path)


def test_fold_job_publishes_a_gguf_llama_cpp_runs(
    pg_url, redis_queue, settings_for, team_key_for, gguf_python, tmp_path
):
    import httpx

    redis_url, queue, _ = redis_queue
    settings = settings_for(pg_url, broker_url=redis_url, queue_name=queue)
    settings.ensure_dirs()
    tiny_with_smollm2_tokenizer(settings.models_dir / "tiny", tmp_path)
    auth = team_key_for(settings)
    env = {
        **os.environ,
        "NBL_HOME": str(settings.home),
        "DATABASE_URL": pg_url,
        "BROKER_URL": redis_url,
        "NBL_QUEUE": queue,
        "NBL_DATA_DIR": str(DATA_DIR),
        "NBL_GGUF_PYTHON": str(gguf_python),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "PYTHONPATH": str(REPO),
    }
    port = free_port()
    logs = {name: tmp_path / f"{name}.log" for name in ("serve", "worker")}
    cmds = {
        "serve": ["serve", "--port", str(port), "--log-level", "warning"],
        "worker": ["worker", "--loglevel", "INFO"],
    }
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-m", "cli.main", *cmd],
            cwd=REPO,
            env=env,
            stdout=open(logs[name], "w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        for name, cmd in cmds.items()
    }

    def said() -> str:
        return "\n".join(f"--- {n}\n{p.read_text(errors='replace')[-3000:]}" for n, p in logs.items())

    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=auth, timeout=30) as c:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if c.get("/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline and procs["serve"].poll() is None, said()
                time.sleep(0.2)
            resp = c.post("/v1/jobs", json=JOB)
            assert resp.status_code == 201, resp.text
            job_id = resp.json()["id"]
            deadline = time.monotonic() + 900
            while (job := c.get(f"/v1/jobs/{job_id}").json())["status"] not in ("succeeded", "failed", "cancelled"):
                assert time.monotonic() < deadline and procs["worker"].poll() is None, (job["status"], said())
                time.sleep(1)
            assert job["status"] == "succeeded", (job["error"], said())
            out = job["result"]["outputs"][0]
            assert out["form"] == "fold" and "llama.cpp" in out["runs_in"] and 0 not in out["layers"]
            listed = {f["path"]: f for f in c.get(f"/v1/jobs/{job_id}/outputs/1/files").json()["data"]}
            assert {"model-q8_0.gguf", "config.json", "model.safetensors"} <= set(listed)
            config = c.get(f"/v1/jobs/{job_id}/outputs/1/files/config.json").json()
            assert config["num_hidden_layers"] == 3 and "auto_map" not in config  # the stock Llama class
            body = c.get(f"/v1/jobs/{job_id}/outputs/1/files/model-q8_0.gguf").content
    finally:
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait(timeout=10)
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
