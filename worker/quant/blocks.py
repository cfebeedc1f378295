"""The token blocks GPTQ calibrates on: the run's own calibration data (its dataset, its count and length), cut by
the output's tokenizer as calibration cut it (make_blocks: each block opening with the tokenizer's prefix), at most
llm-compressor's recommended count and length (quant_schemes.GPTQ_SAMPLES x GPTQ_SEQ_LEN)."""

from __future__ import annotations

from pathlib import Path

from nbl.outputs.quant_schemes import GPTQ_SAMPLES, GPTQ_SEQ_LEN
from nbl.recipe import Recipe

from ..engine.calibration.data import DatasetSpec, load_texts, make_blocks


def gptq_blocks(recipe: Recipe, model_dir: Path, data_dir: Path | None = None) -> list[list[int]]:
    from transformers import AutoTokenizer

    cal = recipe.calibration
    tok = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=False)
    texts = load_texts(DatasetSpec(cal.dataset, cal.config, cal.split, cal.text_field), data_dir)
    n, seq_len = min(cal.num_samples, GPTQ_SAMPLES), min(cal.seq_len, GPTQ_SEQ_LEN)
    return make_blocks(texts, tok, n, seq_len, shuffle=cal.shuffle, seed=cal.seed).tolist()
