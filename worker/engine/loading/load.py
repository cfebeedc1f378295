"""Load an input model safely: a Hub repo id (+ revision), a local checkpoint directory, or a GGUF file.

Every rule is checked on the config before any weight is read (model_rules.py): no custom code, a
supported family, safetensors only, and weights no larger than `max_bytes` when given: measured from
the Hub's file metadata before anything is downloaded (hub_download.py), or on disk. The caller says
the limit (the worker: Settings.max_model_bytes; the CLI: --max-model-bytes, else that setting,
NBL_MAX_MODEL_BYTES); the engine reads no setting of its own. A GGUF file is converted once
(gguf.py), into the caller's `models_dir`.

Every loaded model carries a `fingerprint` naming exactly which weights were loaded (Hub commit sha,
or the content hash of local files, fingerprint.py); the statistics cache is keyed on it.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass
from pathlib import Path

import torch

from nbl.families import TEXT_PARTS
from worker.engine.loading import custom_code
from worker.engine.loading.fingerprint import dir_digest, file_digest
from worker.engine.loading.gguf import convert_gguf
from worker.engine.loading.hub_download import fetch_from_hub
from worker.engine.loading.model_rules import ModelError, check_model_size, family_of, no_custom_code
from worker.engine.loading.text_part import extract_text_part
from worker.engine.loading.tokenizer_paths import path_overrides
from worker.engine.loading.weight_files import weight_map
from worker.engine.placement import max_memory_for, place, spread_kwargs


@dataclass
class LoadedModel:
    model: torch.nn.Module | None  # None until load_weights: calibration reads the checkpoint layer by layer
    tokenizer: object
    source: str  # what the user gave
    revision: str | None  # resolved Hub commit, if from the Hub
    fingerprint: str  # identity of the weights, for caches
    family: str
    path: Path  # local directory holding config (and tokenizer files)
    license: str | None = None
    dtype: torch.dtype | None = None  # the dtype and device the weights are (or will be) loaded as
    device: str = "cpu"
    text_part_of: str | None = None  # a multimodal family (nbl/families.TEXT_PARTS) whose text model this is


def resolve_dtype(dtype: str | torch.dtype | None, device: str) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype in (None, "auto"):
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    names = {
        "float32": torch.float32,
        "fp32": torch.float32,
        "bfloat16": torch.bfloat16,
        "bf16": torch.bfloat16,
        "float16": torch.float16,
        "fp16": torch.float16,
    }
    if dtype not in names:
        raise ModelError(f"unknown dtype {dtype!r}; use one of {sorted(names)}")
    return names[dtype]


def resolve_device(device: str | None) -> str:
    if device in (None, "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def load_model(
    model: str,
    revision: str | None = None,
    dtype: str | torch.dtype | None = None,
    device: str | None = None,
    max_bytes: int | None = None,
    weights: bool = True,
    models_dir: Path | None = None,
    home: Path | None = None,
    devices: list[str] | None = None,
    private_ok: bool = True,
) -> LoadedModel:
    """`max_bytes`: refuse weights larger than this, before reading (or downloading) them; None: no limit.
    `weights=False`: locate and check the checkpoint and load the tokenizer, but no weight (load_weights).
    `models_dir`: where a GGUF file is converted (Settings.models_dir; required for GGUF input);
    `home`: where local files' digests are memoised (Settings.home; None: hashed every time);
    `devices`: the run's devices, over which a model larger than the first is spread (placement.py);
    `private_ok=False`: a private Hub repo is refused (a job's: hub_download.fetch_from_hub)."""
    from transformers import AutoTokenizer

    device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, device)
    path = Path(model).expanduser()
    resolved_rev = None
    if path.is_file() and path.suffix == ".gguf":
        # transformers reads the tokenizer config beside a GGUF file too
        no_custom_code(custom_code.check_local_dir, path.parent, model, gguf_dir=True)
        check_model_size(path.stat().st_size, max_bytes, model)
        if models_dir is None:
            raise ValueError(f"{model}: a GGUF file is converted under models_dir; none was given")
        digest = file_digest(path, home)
        path = convert_gguf(path, Path(models_dir) / f"gguf-{digest[:16]}")
        family = family_of(path, model)
        fingerprint = "gguf:" + digest
    elif path.is_dir():
        family = family_of(path, model)
        weight_map(path, model)  # every weight file a regular file of the folder, before any is hashed or read
        check_model_size(sum(f.stat().st_size for f in path.glob("*.safetensors")), max_bytes, model)
        fingerprint = "dir:" + dir_digest(path, home)
    elif path.exists() or model.startswith((".", "/", "~")) or "://" in model:
        raise ModelError(f"{model}: not a model directory, a .gguf file or a Hub repo id")
    else:
        path, resolved_rev = fetch_from_hub(model, revision, max_bytes, private_ok)
        family = family_of(path, model)
        fingerprint = f"hub:{model}@{resolved_rev}"

    text_part_of = None
    if family in TEXT_PARTS:  # a multimodal model: the job compresses its text model, written out once
        if models_dir is None:
            raise ValueError(f"{model}: a multimodal model's text part is written under models_dir; none was given")
        path = extract_text_part(path, Path(models_dir) / f"text-{digest_of(fingerprint)}")
        text_part_of, family = family, TEXT_PARTS[family].family
    # False: never ask, never run code; path_overrides: no value of its config read as a path (tokenizer_paths.py)
    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=False, **path_overrides(path))
    lm = LoadedModel(
        model=None,
        tokenizer=tokenizer,
        source=model,
        revision=resolved_rev,
        fingerprint=fingerprint,
        family=family,
        path=path,
        license=license_of(path),
        dtype=torch_dtype,
        device=device,
        text_part_of=text_part_of,
    )
    return load_weights(lm, max_memory_for(path, devices)) if weights else lm


def digest_of(fingerprint: str) -> str:
    """A folder name for what is derived from these weights (the fingerprint names them exactly)."""
    import hashlib

    return hashlib.sha256(fingerprint.encode()).hexdigest()[:16]


def load_weights(lm: LoadedModel, max_memory: dict | None = None) -> LoadedModel:
    """Load the whole model onto its device, once (saving and the loss probe still need it whole);
    `max_memory`: spread it with device_map="auto" within that instead (placement.py: larger than a device)."""
    from transformers import AutoModelForCausalLM

    if lm.model is None:
        weight_map(lm.path, lm.source)  # transformers reads the index too: its shards checked first (weight_files.py)
        kw = spread_kwargs(max_memory)
        net = AutoModelForCausalLM.from_pretrained(
            lm.path, dtype=lm.dtype, trust_remote_code=False, use_safetensors=True, **kw
        )
        lm.model = place(net, lm.device, kw)
    return lm


def release_weights(lm: LoadedModel) -> LoadedModel:
    """Drop the whole model, if loaded, and return its device memory to the driver: a fresh process (the
    load check) is about to load an output beside this one."""
    if lm.model is not None:
        lm.model = None
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return lm


def license_of(path: Path) -> str | None:
    readme = path / "README.md"
    if readme.is_file():
        try:
            from huggingface_hub import ModelCard

            return ModelCard.load(readme).data.license
        except Exception:  # a malformed card must not stop a compression
            return None
    return None
