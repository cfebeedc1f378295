"""A job through real processes, for the GGUF and quantization job tests: `nbl serve` and `nbl worker` on the
test's Postgres and Redis (live_service), a job submitted and waited for (finished), and a tiny random Llama with
SmolLM2's tokenizer (llama.cpp's converter reads only tokenizers it knows)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

from gguf_helpers import REPO
from testkit.models import DATA_DIR, save_tiny_checkpoint, smollm2_gguf


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


@contextlib.contextmanager
def live_service(settings, env: dict, tmp_path: Path, auth: dict):
    """`nbl serve` and `nbl worker` as processes; yields (httpx client, said): `said()` is their logs' tails."""
    import httpx

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
            c.worker = procs["worker"]
            yield c, said
    finally:
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait(timeout=10)


def finished(c, said, job: dict, timeout_s: float = 900) -> dict:
    resp = c.post("/v1/jobs", json=job)
    assert resp.status_code == 201, resp.text
    job_id = resp.json()["id"]
    deadline = time.monotonic() + timeout_s
    while (got := c.get(f"/v1/jobs/{job_id}").json())["status"] not in ("succeeded", "failed", "cancelled"):
        assert time.monotonic() < deadline and c.worker.poll() is None, (got["status"], said())
        time.sleep(1)
    assert got["status"] == "succeeded", (got["error"], said())
    return got


def service_env(settings, pg_url: str, redis_url: str, queue: str, gguf_python: Path) -> dict:
    return {
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
