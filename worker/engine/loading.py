"""Load an input model safely: a Hub repo id (+ revision), a local checkpoint directory, or a GGUF file.

Rules, checked on the config before any weight is read:
- never trust_remote_code for an input model; custom code anywhere (an `auto_map` in any config,
  a `.py` file) is refused before anything is loaded (custom_code.py);
- only the families in modeling_nbl.FAMILIES (that the installed transformers has);
- weights only from safetensors (GGUF files aside);
- weights no larger than `max_bytes` when given: measured from the Hub's file metadata before
  anything is downloaded (then exactly the measured commit is fetched), or on disk. The caller says
  the limit (the worker: Settings.max_model_bytes; the CLI: --max-model-bytes, else the variable
  NBL_MAX_MODEL_BYTES); the engine reads no setting of its own.

Every loaded model carries a `fingerprint` naming exactly which weights were loaded (Hub commit sha,
or the content hash of local files); the statistics cache is keyed on it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path

import torch

from . import custom_code
from .modeling_nbl import FAMILIES

HUB_PATTERNS = ["*.json", "*.safetensors", "*.model", "*.txt", "*.tiktoken", "*.jinja"]


class ModelError(ValueError):
    """An input model this engine will not or cannot load (a user error)."""


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


def supported_families() -> list[str]:
    import transformers

    return [f for f, (cfg, _) in FAMILIES.items() if hasattr(transformers, cfg)]


def check_config(config: dict, source: str) -> str:
    """Return the family of a config dict, or raise ModelError saying why it is refused."""
    if config.get("auto_map"):
        raise ModelError(
            f"{source}: config.json has auto_map (custom code); input models are never loaded with "
            "trust_remote_code. Use a model whose architecture ships with transformers."
        )
    family = config.get("model_type")
    if family not in supported_families():
        raise ModelError(
            f"{source}: architecture {family!r} is not supported; supported: {', '.join(supported_families())}"
        )
    return family


def resolve_dtype(dtype: str | torch.dtype | None, device: str) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype in (None, "auto"):
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    names = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
             "float16": torch.float16, "fp16": torch.float16}
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
) -> LoadedModel:
    """`max_bytes`: refuse weights larger than this, before reading (or downloading) them; None: no limit.
    `weights=False`: locate and check the checkpoint and load the tokenizer, but no weight (load_weights)."""
    from transformers import AutoTokenizer

    device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, device)
    path = Path(model).expanduser()
    resolved_rev = None
    if path.is_file() and path.suffix == ".gguf":
        # transformers reads the tokenizer config beside a GGUF file too
        _no_custom_code(custom_code.check_local_dir, path.parent, model, gguf_dir=True)
        check_model_size(path.stat().st_size, max_bytes, model)
        digest = file_digest(path)
        path = convert_gguf(path, models_dir() / f"gguf-{digest[:16]}")
        family = _family_of(path, model)
        fingerprint = "gguf:" + digest
    elif path.is_dir():
        family = _family_of(path, model)
        check_model_size(sum(f.stat().st_size for f in path.glob("*.safetensors")), max_bytes, model)
        fingerprint = "dir:" + dir_digest(path)
    elif path.exists() or model.startswith((".", "/", "~")) or "://" in model:
        raise ModelError(f"{model}: not a model directory, a .gguf file or a Hub repo id")
    else:
        path, resolved_rev = _from_hub(model, revision, max_bytes)
        family = _family_of(path, model)
        fingerprint = f"hub:{model}@{resolved_rev}"

    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=False)  # False: never ask, never run code
    lm = LoadedModel(
        model=None,
        tokenizer=tokenizer,
        source=model,
        revision=resolved_rev,
        fingerprint=fingerprint,
        family=family,
        path=path,
        license=_license_of(path),
        dtype=torch_dtype,
        device=device,
    )
    return load_weights(lm) if weights else lm


def load_weights(lm: LoadedModel) -> LoadedModel:
    """Load the whole model onto its device, once (saving and the loss probe still need it whole)."""
    from transformers import AutoModelForCausalLM

    if lm.model is None:
        net = AutoModelForCausalLM.from_pretrained(lm.path, dtype=lm.dtype, trust_remote_code=False,
                                                   use_safetensors=True)
        lm.model = net.to(lm.device).eval()
    return lm


def models_dir() -> Path:
    home = Path(os.environ.get("NBL_HOME", "~/.nbl")).expanduser()
    return Path(os.environ.get("NBL_MODELS_DIR", home / "models"))


def convert_gguf(gguf: Path, out: Path) -> Path:
    """Dequantize a GGUF file once into a float32 safetensors checkpoint at `out` (reused if present).

    transformers reads GGUF slowly (about 20 s for a 135M model) and marks the result as quantized,
    which cannot be saved; the converted directory loads in well under a second.
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    if (out / "config.json").is_file():
        return out
    check_config(AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name).to_dict(), str(gguf))
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, trust_remote_code=False)
    net = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # The weights are plain float tensors now; drop the GGUF quantizer marks so they can be saved.
    net.hf_quantizer = None
    net.is_quantized = False
    if hasattr(net.config, "quantization_config"):
        del net.config.quantization_config
    tmp = out.with_name(out.name + f".{os.getpid()}.partial")
    net.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    try:
        tmp.rename(out)
    except OSError:  # another process finished the same conversion first
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _family_of(path: Path, source: str) -> str:
    _no_custom_code(custom_code.check_local_dir, path, source)
    family = check_config(_read_json(path / "config.json", source), source)
    _require_safetensors(path, source)
    return family


def max_model_bytes() -> int | None:
    """NBL_MAX_MODEL_BYTES, the CLI's default limit (the worker passes Settings.max_model_bytes, which reads
    the same variable); unset: no limit."""
    raw = os.environ.get("NBL_MAX_MODEL_BYTES", "").strip()
    if not raw:
        return None
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"NBL_MAX_MODEL_BYTES must be a positive number of bytes, got {raw!r}")
    return int(raw)


def check_model_size(total: int, limit: int | None, source: str) -> None:
    if limit is not None and total > limit:
        raise ModelError(f"{source}: the weights are {total / 1e9:.2f} GB, over this server's limit of "
                         f"{limit / 1e9:.2f} GB (NBL_MAX_MODEL_BYTES); nothing was loaded or downloaded")


def _no_custom_code(check, *args, **kwargs) -> None:
    try:
        check(*args, **kwargs)
    except custom_code.CustomCodeError as e:
        raise ModelError(str(e)) from e


def hub_download_size(repo_id: str, revision: str | None, info=None) -> tuple[int, str | None]:
    """(bytes, commit) of the files snapshot_download(allow_patterns=HUB_PATTERNS) would fetch, from
    the Hub's file metadata (`info`, fetched when not given): nothing is downloaded."""
    from huggingface_hub import HfApi

    info = info or HfApi().model_info(repo_id, revision=revision, files_metadata=True)
    total = 0
    for f in info.siblings or []:
        if any(fnmatch(f.rfilename, p) for p in HUB_PATTERNS):
            if f.size is None:
                raise ModelError(f"{repo_id}: the Hub gave no size for {f.rfilename}; cannot check NBL_MAX_MODEL_BYTES")
            total += f.size
    return total, info.sha


def _from_hub(repo_id: str, revision: str | None, limit: int | None) -> tuple[Path, str]:
    """Check the size (when limited), the file list (no code) and the small config files (no auto_map,
    a supported family) before any weight is downloaded, then fetch the snapshot."""
    from huggingface_hub import HfApi, hf_hub_download, snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

    try:
        info = HfApi().model_info(repo_id, revision=revision, files_metadata=limit is not None)
        if limit is not None:
            check_model_size(hub_download_size(repo_id, revision, info)[0], limit, repo_id)
        revision = info.sha or revision  # fetch the commit that was listed (and measured), not a newer one
        names = [f.rfilename for f in info.siblings or []]
        _no_custom_code(custom_code.check_file_list, names, repo_id)
        if "config.json" not in names:
            raise ModelError(f"{repo_id}: no config.json in the repository")
        for name in custom_code.config_files([n for n in names if any(fnmatch(n, p) for p in HUB_PATTERNS)]):
            local = Path(hf_hub_download(repo_id, name, revision=revision))
            _no_custom_code(custom_code.check_config_file, local, name, repo_id)
            if name == "config.json":
                check_config(_read_json(local, repo_id), repo_id)
        snap = Path(snapshot_download(repo_id, revision=revision, allow_patterns=HUB_PATTERNS))
    except (RepositoryNotFoundError, RevisionNotFoundError) as e:
        raise ModelError(f"{repo_id}@{revision or 'main'}: not found on the Hub ({e.__class__.__name__})") from e
    except HfHubHTTPError as e:
        raise ModelError(f"{repo_id}: the Hub refused the download: {e}") from e
    return snap, snap.name  # snapshots/<commit sha>


def _read_json(path: Path, source: str) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError as e:
        raise ModelError(f"{source}: no config.json in {path.parent}") from e


def _require_safetensors(path: Path, source: str) -> None:
    if not any(path.glob("*.safetensors")):
        raise ModelError(f"{source}: no *.safetensors weights in {path}; pickled weights (.bin/.pt) are refused")


def _license_of(path: Path) -> str | None:
    readme = path / "README.md"
    if readme.is_file():
        try:
            from huggingface_hub import ModelCard

            return ModelCard.load(readme).data.license
        except Exception:  # a malformed card must not stop a compression
            return None
    return None


# --- content fingerprints, memoised by (path, size, mtime) so large files hash once ------------
def file_digest(path: Path) -> str:
    st = path.stat()
    memo_path = Path(os.environ.get("NBL_HOME", "~/.nbl")).expanduser() / "cache" / "digests.json"
    key = f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}"
    try:
        memo = json.loads(memo_path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        memo = {}
    if key not in memo:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 24), b""):
                h.update(chunk)
        memo[key] = h.hexdigest()
        memo_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo_path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(memo))
        tmp.replace(memo_path)
    return memo[key]


def dir_digest(path: Path) -> str:
    """Hash of config.json and every weight file, by content."""
    h = hashlib.sha256()
    for f in sorted([path / "config.json", *path.glob("*.safetensors")]):
        h.update(f.name.encode() + b"\0" + file_digest(f).encode())
    return h.hexdigest()
