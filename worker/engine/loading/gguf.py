"""A GGUF input model, dequantized once into a safetensors checkpoint the rest of the engine reads."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import torch

from worker.engine.loading.gguf_dtype import import_dtype
from worker.engine.loading.gguf_header import check_gguf
from worker.engine.loading.model_rules import check_config

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def convert_gguf(gguf: Path, out: Path, dtype: str | None = None) -> Path:
    """Dequantize a GGUF file once into a safetensors checkpoint at `out` (reused if present), its weights
    in `dtype`: bfloat16, float16, float32, or auto, the precision the GGUF stored them with (gguf_dtype.py,
    `nbl import-gguf`'s default); None keeps float32: a job's own conversion of a GGUF input, a
    cache the engine computes from (its outputs' `auto` dtype is bfloat16 all the same: forms/out_dtype.py).

    transformers reads GGUF slowly (about 20 s for a 135M model) and marks the result as quantized,
    which cannot be saved; the converted directory loads in well under a second.
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    if (out / "config.json").is_file():
        return out
    header = check_gguf(
        gguf, str(gguf)
    )  # every count and length within the file, before transformers' reader trusts them
    check_config(AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name).to_dict(), str(gguf))
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, trust_remote_code=False)
    net = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # The weights are plain float tensors now; drop the GGUF quantizer marks so they can be saved.
    net.hf_quantizer = None
    net.is_quantized = False
    if hasattr(net.config, "quantization_config"):
        del net.config.quantization_config
    if dtype is not None:
        net.to(
            DTYPES[import_dtype(header) if dtype == "auto" else dtype]
        )  # save_pretrained writes config.json's `dtype` from the weights'
    tmp = out.with_name(out.name + f".{os.getpid()}.partial")
    net.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    try:
        tmp.rename(out)
    except OSError:  # another process finished the same conversion first
        shutil.rmtree(tmp, ignore_errors=True)
    return out
