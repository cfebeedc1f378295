"""One output through vLLM in a process of its own (vllm_plain.py), as the fold-form and family tests serve it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def served(
    path: str, prompts: list[list[int]], remote: bool = False, plugins: bool = True, dtype: str = "float32"
) -> dict:
    """vllm_plain.py's RESULT ({"tokens", "logprobs", ...}); `plugins` False: VLLM_PLUGINS empty, none loaded,
    else ours by its entry point; `dtype` the model's. An AssertionError with the process's stderr when it gives none."""
    env = {k: v for k, v in os.environ.items() if k != "VLLM_PLUGINS"} | {"NBL_VLLM_DTYPE": dtype}
    run = subprocess.run(
        [sys.executable, str(HERE / "vllm_plain.py"), path, "1" if remote else "0", json.dumps(prompts)],
        env=env if plugins else {**env, "VLLM_PLUGINS": ""},
        capture_output=True,
        text=True,
        timeout=1200,
    )
    lines = [x for x in run.stdout.splitlines() if x.startswith("RESULT ")]
    assert run.returncode == 0 and lines, run.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT ") :])


def worst_logprob(got: dict, ref: dict) -> float:
    """The largest difference of a generated token's log-probability between vLLM and the reference."""
    return max(abs(a - b) for la, lb in zip(got["logprobs"], ref["logprobs"]) for a, b in zip(la, lb))
