"""The dtype an output's weights are saved in (a job's publish.dtype), not the dtype they were computed in.

None       the compute dtype (`nbl compress`: float32 on the CPU), as before publish.dtype existed
auto       the base's stored dtype: config.json's `dtype` (`torch_dtype` before transformers 5); a GGUF
           input's is bfloat16 (its weights are quantized; the float32 it is converted to only holds
           them), so a 98 MB Q4 input no longer becomes a 533 MB float32 output
NAME       bfloat16, float16, float32
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

NAMES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def stored_dtype(path: Path, fingerprint: str = "") -> torch.dtype | None:
    """The dtype the base was stored in; None when its config does not say one of NAMES."""
    if fingerprint.startswith("gguf:"):
        return torch.bfloat16
    try:
        cfg = json.loads((Path(path) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    name = cfg.get("dtype") or cfg.get("torch_dtype") if isinstance(cfg, dict) else None
    return NAMES.get(name) if isinstance(name, str) else None


def dtype_name(dtype: torch.dtype) -> str:
    """ "bfloat16" for torch.bfloat16: the name the result, the card and config.json use."""
    return str(dtype).removeprefix("torch.")


def output_dtype(choice: str | None, compute: torch.dtype, path: Path, fingerprint: str = "") -> torch.dtype:
    """The saved weights' dtype for `choice` (module doc); `compute` the dtype the model runs in here."""
    if choice is None:
        return compute
    if choice == "auto":
        return stored_dtype(path, fingerprint) or compute
    if choice not in NAMES:
        raise ValueError(f"unknown output dtype {choice!r}: auto or one of {', '.join(NAMES)}")
    return NAMES[choice]
