"""config.json files of known shapes, written by the tests (no weights)."""

from __future__ import annotations

import json
from pathlib import Path

LLAMA_70B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8192,
             "num_hidden_layers": 80, "intermediate_size": 28672, "num_attention_heads": 64,
             "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
             "torch_dtype": "bfloat16", "tie_word_embeddings": False}
LLAMA_8B = {**LLAMA_70B, "hidden_size": 4096, "num_hidden_layers": 32, "intermediate_size": 14336,
            "num_attention_heads": 32}
TINY = {**LLAMA_70B, "hidden_size": 64, "num_hidden_layers": 4, "intermediate_size": 128, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 128, "max_position_embeddings": 256}
HUGE = {**LLAMA_70B, "hidden_size": 65536, "num_attention_heads": 512}  # its sums alone: 172 GB a layer


def write_config(directory: Path, config: dict) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config))
    return directory
