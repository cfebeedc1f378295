"""Quantized outputs (worker/quant/quantize.py, llm-compressor) in stock vLLM CPU with no plugin loaded
(VLLM_PLUGINS=): w8a8 (INT8, oneDNN) and w4a16 (symmetric 4-bit, CPUWNA16LinearKernel) load from their
compressed-tensors config and generate; so does a fold attn output (a DeciLM, vLLM's own nemotron_nas class, our
config class through trust_remote_code) quantized alike. vLLM's CPU backend runs no FP8: fp8-dynamic is not
served here."""

import json
import os
import subprocess
from pathlib import Path

import pytest
from vllm_once import served

pytestmark = pytest.mark.slow
HERE = Path(__file__).resolve().parent
PROJECT_PYTHON = Path(os.environ.get("NBL_PROJECT_PYTHON", HERE.parents[1] / ".venv" / "bin" / "python"))


@pytest.fixture(scope="session")
def quant_reference(tmp_path_factory) -> dict:
    work = tmp_path_factory.mktemp("quant")
    subprocess.run([str(PROJECT_PYTHON), str(HERE / "quant_prepare.py"), str(work)], check=True, timeout=1800)
    return json.loads((work / "quant_reference.json").read_text())


@pytest.mark.parametrize("scheme", ["w8a8", "w4a16", "deci-w8a8", "deci-w4a16"])
def test_quantized_outputs_load_and_generate_in_stock_vllm(scheme, quant_reference):
    ref = quant_reference[scheme]
    config = json.loads((Path(ref["path"]) / "config.json").read_text())
    assert config["quantization_config"]["quant_method"] == "compressed-tensors"
    assert config["model_type"] == ("nemotron-nas" if scheme.startswith("deci-") else "llama")
    remote = scheme.startswith("deci-")  # the DeciLM config class is ours (transformers has none); the model vLLM's
    got = served(ref["path"], ref["prompts"], remote=remote, plugins=False, dtype="bfloat16")
    assert [len(t) for t in got["tokens"]] == [len(t) for t in got["logprobs"]] and all(got["tokens"])
    assert all(lp <= 0 for row in got["logprobs"] for lp in row)  # real log-probabilities, not NaN
