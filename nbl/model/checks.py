"""What a job's model allows, checked from its config.json alone (no weights, no torch): a family this engine
compresses (nbl/families.py) in weights that are not quantized, its shape's numbers within bounds (nbl/sizing/shapes.BOUNDS), every k below the
layer count, seq_len within the context length, and a form that can write it (nbl/forms.family_error). The API
runs these at submit and in POST /v1/estimates whenever it has the config: a `local:NAME` model's from
NBL_MODELS_DIR (service/estimates/local_model.py), a Hub model's when it could fetch it (placement.py); the
worker runs the same checks on the config.json before downloading any weight (worker/preflight.py), `nbl
estimate` before it sizes. A failure is the user's.
"""

from __future__ import annotations

import json
from pathlib import Path

from nbl import recipe as R
from nbl.families import family_error, text_model_config
from nbl.outputs import forms
from nbl.sizing.shapes import out_of_bounds

CONFIG = "config.json"


def _text_config(config: dict) -> dict:
    """Multimodal configs keep the language model's numbers under text_config."""
    inner = config.get("text_config")
    return inner if isinstance(inner, dict) else config


def layer_count(config: dict) -> int | None:
    n = _text_config(config).get("num_hidden_layers")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


def context_length(config: dict) -> int | None:
    n = _text_config(config).get("max_position_embeddings")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


def quantized_error(config: dict) -> str | None:
    """Why a quantized checkpoint cannot be read (None: it is not quantized). The engine reads each layer's
    tensors as stored (worker/engine/calibration/layer_source.py) and the writer copies them: packed MXFP4
    blocks, GPTQ/AWQ integers or FP8 with their scales would be read as if they were the weights, or not found."""
    for where, cfg in (("", config), ("text_config.", _text_config(config))):
        quant = cfg.get("quantization_config")
        if quant is None:
            continue
        method = quant.get("quant_method") if isinstance(quant, dict) else None
        shown = repr(method) if isinstance(method, str) and len(method) <= 32 else "unnamed"
        return (
            f"the checkpoint is quantized ({where}quantization_config, quant_method {shown}); the engine reads "
            "unquantized weights only: submit the unquantized checkpoint, or a dequantized copy "
            "(transformers: from_pretrained(..., quantization_config=<its config class>(dequantize=True)) "
            "then save_pretrained)"
        )
    return None


def config_problems(
    config: dict, ks: list[int], seq_len: int, form: str = R.FORM, mode: str = R.MODE
) -> list[tuple[tuple[str, ...], str]]:
    """(field, message) for each way this request cannot work on a model with this config (a multimodal model's:
    of its text part, which is what a job compresses)."""
    family = family_error(config) or quantized_error(config)
    config = text_model_config(config)
    bounds = [str(e) for e in out_of_bounds(config)]
    problems = [(("model", "id"), msg) for msg in ([family] if family else []) + bounds]
    why = None if family or bounds else forms.family_error(form, mode, config["model_type"], config)
    if why is not None:  # the output could not be written in this form
        problems.append((("compression", "form"), why))
    layers = layer_count(config)
    for k in ks:
        if layers is not None and k >= layers:
            problems.append((("compression", "k"), f"k={k} must be below the model's number of layers ({layers})"))
    ctx = context_length(config)
    if ctx is not None and seq_len > ctx:
        problems.append(
            (
                ("calibration", "seq_len"),
                f"seq_len={seq_len} is over the model's context length ({ctx}, max_position_embeddings)",
            )
        )
    return problems


def read_config(directory: Path) -> dict | None:
    """The directory's config.json as a dict, or None when it is missing or not a JSON object."""
    try:
        config = json.loads((directory / CONFIG).read_text())
    except (OSError, ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
        return None
    return config if isinstance(config, dict) else None
