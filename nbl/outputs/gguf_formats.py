"""What an output may be published as besides its safetensors checkpoint, and in which dtype; torch-free
(the API validates requests with it, the worker and `nbl export` act on it).

    publish.formats   ["safetensors", "gguf:TYPE", ...]: "safetensors" (the checkpoint, always written,
                      checked and evaluated) and GGUF files of llama.cpp's TYPEs, one per TYPE
    publish.dtype     auto | bfloat16 | float16 | float32: the saved weights' dtype; auto is the
                      base's stored dtype (bfloat16 for a GGUF input, whose weights are quantized)

A checkpoint exports to GGUF when llama.cpp has its architecture: a plain checkpoint of a family's own
class whose entry names one (nbl/families.py `gguf`) and whose config is what llama.cpp assumes of that
architecture (nbl/outputs/gguf_assumed.py), or DeciLM's `block_configs` schema (llama.cpp's `deci`,
per-layer head counts). Our `nbl` form (modeling_nbl.py, `h + W h + b`) has none.
"""

from __future__ import annotations

from nbl.families import FAMILIES
from nbl.outputs.gguf_assumed import assumed_error

GGUF_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_k_m")
OUTPUT_DTYPES = ("auto", "bfloat16", "float16", "float32")
SAFETENSORS = "safetensors"
# transformers' class -> the GGUF architecture llama.cpp's converter writes for it: each family's entry
# (nbl/families.py `gguf`), and DeciLM, the class forms linear and fold attn write
GGUF_ARCHS = {
    **{entry.model: entry.gguf for entry in FAMILIES.values() if entry.gguf},
    "DeciLMForCausalLM": "deci",
}
# the classes GGUF export refuses, with their entry's reason (nbl/families.py `no_gguf`)
NO_GGUF = {entry.model: entry.no_gguf for entry in FAMILIES.values() if entry.no_gguf}
EXPORTING_FORMS = (
    "a `fold` output or an output with no replaced layers (the base family's own class), or a "
    "`linear`/`fold` DeciLM output (architectures DeciLMForCausalLM, block_configs)"
)


def gguf_file(kind: str) -> str:
    """The file name a GGUF of TYPE `kind` gets in an output's folder."""
    return f"model-{kind}.gguf"


def check_type(kind: str) -> str:
    if kind not in GGUF_TYPES:
        raise ValueError(f"unknown GGUF type {kind!r}: one of {', '.join(GGUF_TYPES)}")
    return kind


def check_formats(formats: list[str]) -> list[str]:
    """The request's publish.formats, validated: "safetensors" first-class and present, each gguf:TYPE known,
    none twice. The checkpoint is what the load check and the evaluation read, hence always written."""
    if len(set(formats)) != len(formats):
        raise ValueError("formats must be distinct")
    if SAFETENSORS not in formats:
        raise ValueError(
            'formats must include "safetensors": the checkpoint is always written, checked and '
            "evaluated; GGUF files are made from it"
        )
    for f in formats:
        if f == SAFETENSORS:
            continue
        kind, sep, rest = f.partition(":")
        if kind != "gguf" or not sep:
            raise ValueError(
                f'unknown format {f!r}: "safetensors" or "gguf:TYPE" (TYPE one of {", ".join(GGUF_TYPES)})'
            )
        check_type(rest)
    return formats


def gguf_types(formats) -> list[str]:
    return [f.partition(":")[2] for f in formats or () if f.startswith("gguf:")]


def gguf_arch(config: dict, where: str = "the checkpoint") -> str:
    """The GGUF architecture llama.cpp's converter writes for a checkpoint's config.json; ValueError (one
    line) for one that has none."""
    if "nbl" in config or str(config.get("model_type", "")).startswith("nbl_"):
        raise ValueError(
            f"{where} is an nbl-form output (modeling_nbl.py, h + W h + b), which has no GGUF "
            f"architecture; what exports: {EXPORTING_FORMS}"
        )
    archs = config.get("architectures") or []
    arch = GGUF_ARCHS.get(archs[0]) if len(archs) == 1 else None
    if arch is None and len(archs) == 1 and archs[0] in NO_GGUF:
        raise ValueError(f"{where} is a {archs[0]}, which GGUF export does not take: {NO_GGUF[archs[0]]}")
    if arch is None:
        raise ValueError(
            f"{where} is a {archs or 'model without architectures'}: GGUF export takes {', '.join(GGUF_ARCHS)}"
        )
    assumed_error(config, where)
    if arch == "deci" and not isinstance(config.get("block_configs"), list):
        raise ValueError(f"{where} is a DeciLM without block_configs: GGUF export takes the Nemotron-NAS schema")
    if arch == "deci" and any(
        isinstance(b, dict) and isinstance(b.get("ffn"), dict) and b["ffn"].get("replace_with_linear")
        for b in config["block_configs"]
    ):
        raise ValueError(
            f"{where} has an ffn replace_with_linear layer (the linear form in block mode), which "
            "llama.cpp's deci cannot run (attention no_op / replace_with_linear and ffn no_op it can): "
            "GGUF export takes block-mode outputs of the fold form"
        )
    return arch


def refuse_form(form: str, mode: str) -> None:
    """A request's compression.form/mode that no GGUF can hold (what gguf_arch would refuse of its output)."""
    if form == "nbl":
        raise ValueError(
            "publish.formats gguf:* needs compression.form linear or fold: an nbl-form output "
            "(h + W h + b) has no GGUF architecture"
        )
    if form == "linear" and mode == "block":
        raise ValueError(
            "publish.formats gguf:* with compression.form linear needs mode attn: llama.cpp's deci "
            "has no linear FFN (block mode); use form fold for blocks"
        )
