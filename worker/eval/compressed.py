"""Load a model for evaluation: our own compressed outputs here, every other model through the
engine's `load_model` (which never trusts remote code).

A compressed output (`nbl compress`) is a directory whose config.json has model_type `nbl_<family>`
and an auto_map into the modeling_nbl.py beside it; it loads with trust_remote_code=True. We trust
that file only when it is byte-identical to the modeling_nbl.py this package ships, i.e. the code is
ours. A directory whose copy differs (an older release, or an edited file) is loaded with the
installed classes instead, never its own code, with a warning. A DeciLM output (forms linear and fold-attn,
model_type `nemotron-nas`) is trusted the same way through its modeling_decilm.py; a fold-block output is the
base's own class and loads as any model.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from pathlib import Path

from ..engine.loading.fingerprint import dir_digest
from ..engine.loading.load import LoadedModel, ModelError, load_model, resolve_device, resolve_dtype
from ..engine.loading.weight_files import weight_map
from ..engine.modeling import modeling_decilm, modeling_nbl
from ..engine.placement import max_memory_for, place, spread_kwargs

log = logging.getLogger(__name__)
MODELING_FILE = "modeling_nbl.py"
DECILM_FILE, DECILM_TYPE = "modeling_decilm.py", "nemotron-nas"


def is_compressed_dir(path: str | Path) -> bool:
    path = Path(path).expanduser()
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, json.JSONDecodeError):
        return False
    if config.get("model_type") == DECILM_TYPE:
        return (path / DECILM_FILE).is_file()
    return str(config.get("model_type", "")).startswith("nbl_") and (path / MODELING_FILE).is_file()


def load_compressed(
    path: str | Path, dtype=None, device: str | None = None, home: Path | None = None, max_memory: dict | None = None
) -> LoadedModel:
    """`home`: where weight digests are memoised (fingerprint.py; None: hashed every time); `max_memory`:
    spread it with device_map="auto" within that (placement.py: larger than one device), else on `device`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(path).expanduser()
    config = json.loads((path / "config.json").read_text())
    decilm = config["model_type"] == DECILM_TYPE
    plain = config["model_type"] in modeling_nbl.FAMILIES  # form fold, block: the base's own class, no code at all
    module, file = (modeling_decilm, DECILM_FILE) if decilm else (modeling_nbl, MODELING_FILE)
    family = "llama" if decilm else config["model_type"].removeprefix("nbl_")  # DeciLM is Llama-shaped
    if family not in modeling_nbl.FAMILIES:
        raise ModelError(f"{path}: compressed model of unknown family {family!r}")
    if not any(path.glob("*.safetensors")):
        raise ModelError(f"{path}: no *.safetensors weights")
    weight_map(path, str(path))  # its index names only files of its own folder (engine/loading/weight_files.py)
    device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, device)
    ours = plain or Path(module.__file__).read_bytes() == (path / file).read_bytes()
    # The tokenizer needs no code, ours or any other (an auto_map in tokenizer_config.json would run):
    # say False, or transformers asks on stdin since config.json names our code. Its notices go to
    # stderr: stdout must stay clean for --json.
    with contextlib.redirect_stdout(sys.stderr):
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=False)
    kw = spread_kwargs(max_memory)
    if ours:
        with contextlib.redirect_stdout(sys.stderr):
            model = AutoModelForCausalLM.from_pretrained(
                path, dtype=torch_dtype, trust_remote_code=not plain, use_safetensors=True, **kw
            )
    else:
        log.warning(
            "%s: %s differs from the installed one; loading with the installed classes, not its code", path, file
        )
        cls = (
            modeling_decilm.DeciLMForCausalLM if decilm else getattr(modeling_nbl, modeling_nbl.class_names(family)[1])
        )
        model = cls.from_pretrained(path, dtype=torch_dtype, use_safetensors=True, **kw)
    model = place(model, device, kw)
    decompressed(model)
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        source=str(path),
        revision=None,
        fingerprint="dir:" + dir_digest(path, home),
        family=family,
        path=path,
    )


def decompressed(model) -> None:
    """A quantized output (publish.quantize) loads compressed, and compressed-tensors decompresses it in a hook on
    the model's first forward; the evaluation runs its layers one by one (progress per layer) and would never fire
    it, so one token's forward fires it here. Its weights then hold the quantized values and its activations are
    quantized as the scheme says (w8a8, fp8-dynamic), as vLLM runs it."""
    if getattr(model, "ct_decompress_hook", None) is None:
        return
    import torch

    from ..engine.placement import input_device

    with torch.no_grad():
        model(input_ids=torch.zeros((1, 1), dtype=torch.long, device=input_device(model)))


def load_for_eval(
    model: str,
    revision: str | None = None,
    dtype=None,
    device: str | None = None,
    max_bytes: int | None = None,
    models_dir: Path | None = None,
    home: Path | None = None,
    devices: list[str] | None = None,
) -> LoadedModel:
    """A compressed output or any input model; `models_dir`, `home` and `devices` (over which a model
    larger than one device is spread) as load_model takes them."""
    if is_compressed_dir(model):
        return load_compressed(model, dtype, device, home, max_memory_for(Path(model).expanduser(), devices))
    return load_model(
        model,
        revision=revision,
        dtype=dtype,
        device=device,
        max_bytes=max_bytes,
        models_dir=models_dir,
        home=home,
        devices=devices,
    )


def recorded_base(path: str | Path) -> tuple[str, str | None] | None:
    """(base model source, its fingerprint) recorded by `nbl compress` in nbl_scores.json, if any."""
    try:
        report = json.loads((Path(path).expanduser() / "nbl_scores.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return (report["base_model"], report.get("base_fingerprint")) if report.get("base_model") else None
