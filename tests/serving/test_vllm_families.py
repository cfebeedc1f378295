"""The nbl form of every family the plugin builds, in vLLM (CPU) with the plugin loaded by its entry point, each
run in its own process: a tiny random model of the family (families_prepare.py) compressed in attn mode (k=2) and
block mode (k=1); 3 prompts x 16 greedy fp32 tokens identical to transformers (the output's modeling_nbl.py),
log-probabilities within 1e-3, and a KV cache laid out for the layers that keep attention only.

The families are the plugin's own table (nbl_vllm/configs.py, held equal to the entries with plugin=True in the
main suite): a family the plugin claims is run here, or by test_vllm_outputs.py for the dense four."""

import json
import os
import subprocess
from pathlib import Path

import pytest
from plan import FAMILY_MODES, LOGPROB_TOL, OUTPUT_FAMILIES, kv_cache_tokens, plugin_families
from vllm_once import served, worst_logprob

pytestmark = pytest.mark.slow
HERE = Path(__file__).resolve().parent
PROJECT_PYTHON = Path(os.environ.get("NBL_PROJECT_PYTHON", HERE.parents[1] / ".venv" / "bin" / "python"))
FAMILIES = [f for f in plugin_families() if f not in OUTPUT_FAMILIES]


@pytest.fixture(scope="session")
def family_reference(tmp_path_factory):
    """family -> its outputs' reference, made once per session in .venv (NBL_SERVING_WORK=DIR: kept in DIR/<family>
    and reused while its reference.json exists, as conftest's `reference`)."""
    root = Path(os.environ.get("NBL_SERVING_WORK") or tmp_path_factory.mktemp("families"))
    made = {}

    def get(family: str) -> dict:
        work = root / family
        if family not in made and not (work / "reference.json").exists():
            env = {**os.environ, "NBL_HOME": str(root / "home")}
            cmd = [str(PROJECT_PYTHON), str(HERE / "families_prepare.py"), str(work), family]
            subprocess.run(cmd, env=env, check=True, timeout=1800)
        made[family] = json.loads((work / "reference.json").read_text())
        return made[family]

    return get


@pytest.mark.parametrize("mode", list(FAMILY_MODES))
@pytest.mark.parametrize("family", FAMILIES)
def test_nbl_output_runs_in_vllm_as_in_transformers(family, mode, family_reference):
    ref = family_reference(family)[mode]
    assert ref["nbl"]["mode"] == mode and len(ref["nbl"]["layers"]) == FAMILY_MODES[mode]
    got = served(ref["path"], ref["prompts"])  # our plugin, by its entry point
    assert got["tokens"] == ref["tokens"], (family, mode)
    worst = worst_logprob(got, ref)
    assert worst <= LOGPROB_TOL, (family, mode, worst)
    cached = {int(name.split(".")[2]) for name in got["kv_cache_layers"]}  # model.layers.{i}.<attention>
    assert cached == set(range(ref["num_layers"])) - set(ref["nbl"]["layers"]), (family, mode)
    if not ref["hybrid"]:  # sliding and full layers (Gemma) are cached in groups of their own: another count
        want = kv_cache_tokens(ref["attention_layers"], ref["kv_bytes_per_token_layer"], got["block_size"])
        assert got["kv_cache_tokens"] == want, (family, mode)
