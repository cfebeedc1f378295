"""Helpers of the GGUF tests: llama.cpp (llama-cpp-python, its converter and quantizer) runs in the GGUF venv
(.venv-gguf, `make gguf-env`) as a subprocess (integrations/gguf/run_gguf.py); the outputs and the transformers
reference are made here.

Without the GGUF venv, the tests that need it (conftest.py's `gguf_python` fixture) are skipped with the reason,
except in CI (CI set), where .ci/run builds it first and they must run (and so fail when it is missing).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GGUF_PYTHON = Path(os.environ.get("NBL_GGUF_PYTHON") or REPO / ".venv-gguf" / "bin" / "python")
RUN_GGUF = REPO / "integrations" / "gguf" / "run_gguf.py"


def run_gguf(python: Path, *args: str, timeout: float = 1200) -> dict:
    """integrations/gguf/run_gguf.py in the GGUF venv; its JSON answer."""
    proc = subprocess.run([str(python), str(RUN_GGUF), *args], capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def llama_cpp_greedy(python: Path, gguf: Path, prompts: list[list[int]], texts: list[str], new: int, tmp: Path) -> dict:
    req = tmp / "generate.json"
    req.write_text(json.dumps({"prompts": prompts, "texts": texts, "new": new}))
    return run_gguf(python, "generate", str(gguf), str(req))


def transformers_greedy(model_dir: Path, prompts: list[list[int]], new: int) -> list[list[int]]:
    """Greedy decoding (argmax, no eos stop) of the checkpoint in float32, one token at a time."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, trust_remote_code=False).eval()
    return greedy(model, prompts, new)


def greedy(model, prompts: list[list[int]], new: int) -> list[list[int]]:
    """Greedy decoding (argmax of the full sequence's last logits, no eos stop) of a loaded model."""
    import torch

    out = []
    with torch.no_grad():
        for prompt in prompts:
            ids, got = torch.tensor([prompt]), []
            for _ in range(new):
                nxt = int(model(ids).logits[0, -1].argmax())
                got.append(nxt)
                ids = torch.cat([ids, torch.tensor([[nxt]])], dim=1)
            out.append(got)
    return out
