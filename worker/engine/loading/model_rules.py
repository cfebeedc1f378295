"""What an input model must be before any weight is read, and the error that says why not.

- never custom code: an `auto_map` in any config, or a `.py` file, is refused (custom_code.py), so
  trust_remote_code is never needed;
- only the families of nbl/families.py that the installed transformers has (the API and `nbl estimate` refuse
  the others with the same words);
- a shape within nbl/sizing/shapes.BOUNDS, at the top level and under text_config (a config is user input:
  a GGUF's metadata of 4e9 layers would be built layer by layer);
- weights only from safetensors (pickled .bin/.pt can run code on load);
- weights no larger than the caller's limit, when it gives one.
"""

from __future__ import annotations

import json
from pathlib import Path

from nbl.families import FAMILIES, family_error
from nbl.sizing.shapes import out_of_bounds
from worker.engine.loading import custom_code


class ModelError(ValueError):
    """An input model this engine will not or cannot load (a user error)."""


def supported_families() -> list[str]:
    import transformers

    return [f for f, entry in FAMILIES.items() if hasattr(transformers, entry.config)]


def check_config(config: dict, source: str) -> str:
    """Return the family of a config dict, or raise ModelError saying why it is refused."""
    if config.get("auto_map"):
        raise ModelError(
            f"{source}: config.json has auto_map (custom code); input models are never loaded with "
            "trust_remote_code. Use a model whose architecture ships with transformers."
        )
    why = family_error(config, supported_families())
    if why is not None:
        raise ModelError(f"{source}: {why}")
    family = config["model_type"]
    bad = out_of_bounds(config)
    if bad:
        raise ModelError(f"{source}: {bad[0]}")
    return family


def check_model_size(total: int, limit: int | None, source: str) -> None:
    if limit is not None and total > limit:
        raise ModelError(
            f"{source}: the weights are {total / 1e9:.2f} GB, over this server's limit of "
            f"{limit / 1e9:.2f} GB (NBL_MAX_MODEL_BYTES); nothing was loaded or downloaded"
        )


def no_custom_code(check, *args, **kwargs) -> None:
    """Run one of custom_code's checks, its refusal re-raised as a ModelError (a user error)."""
    try:
        check(*args, **kwargs)
    except custom_code.CustomCodeError as e:
        raise ModelError(str(e)) from e


def read_config(path: Path, source: str) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError as e:
        raise ModelError(f"{source}: no config.json in {path.parent}") from e


def require_safetensors(path: Path, source: str) -> None:
    if not any(path.glob("*.safetensors")):
        raise ModelError(f"{source}: no *.safetensors weights in {path}; pickled weights (.bin/.pt) are refused")


def family_of(path: Path, source: str) -> str:
    """The family of a local checkpoint directory, after every rule above that needs no weight."""
    no_custom_code(custom_code.check_local_dir, path, source)
    family = check_config(read_config(path / "config.json", source), source)
    require_safetensors(path, source)
    return family
