"""Form fold outputs in stock vLLM, no plugin loaded (VLLM_PLUGINS=, each run in its own process): 3 prompts x 16
greedy fp32 tokens identical to transformers, log-probabilities within 1e-3. Fold block is the base's own class;
fold attn is DeciLM (attention no_op), whose `nemotron-nas` config vLLM reads through the shipped file
(--trust-remote-code: transformers has no such config class); vLLM's own DeciLM model runs it."""

import json
import os
import subprocess
from pathlib import Path

import pytest
from plan import LOGPROB_TOL
from vllm_once import served, worst_logprob

pytestmark = pytest.mark.slow
HERE = Path(__file__).resolve().parent
PROJECT_PYTHON = Path(os.environ.get("NBL_PROJECT_PYTHON", HERE.parents[1] / ".venv" / "bin" / "python"))
NAMES = [
    "tiny-llama-fold-block",
    "tiny-mistral-fold-block",
    "tiny-qwen2-fold-block",
    "tiny-qwen3-fold-block",
    "tiny-phi3-fold-block",
    "tiny-mixtral-fold-block",
    "tiny-qwen2_moe-fold-block",
    "tiny-qwen3_moe-fold-block",
    "tiny-olmoe-fold-block",
    "tiny-llama-fold-attn",
    "smollm2-fold-block",
    "smollm2-fold-attn",
]


@pytest.fixture(scope="session")
def form_reference(tmp_path_factory) -> dict:
    work = tmp_path_factory.mktemp("forms")
    subprocess.run(
        [str(PROJECT_PYTHON), str(HERE / "forms_prepare.py"), str(work)],
        env={**os.environ, "NBL_HOME": str(work / "home")},
        check=True,
        timeout=1800,
    )
    return json.loads((work / "forms_reference.json").read_text())


@pytest.mark.parametrize("name", NAMES)
def test_fold_outputs_run_in_vllm_without_plugins(name, form_reference):
    ref = form_reference[name]
    got = served(ref["path"], ref["prompts"], remote=ref["remote"], plugins=False)
    assert got["tokens"] == ref["tokens"], name
    worst = worst_logprob(got, ref)
    assert worst <= LOGPROB_TOL, (name, worst)
