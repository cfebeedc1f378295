"""Refuse input models that carry custom code, wherever transformers would look for it.

transformers runs a repository's own Python when a config names it: an `auto_map` (or
`custom_pipelines`) in config.json, tokenizer_config.json, generation_config.json or a
processor/preprocessor config points at a module in the repo (`module.Class`) or in another repo
(`owner/repo--module.Class`). Input models are never loaded with trust_remote_code, but a config
that carries such a map is refused outright, naming the file: what is loaded, and what an output
copies from its input (the tokenizer files), must never point at code. A `.py` file in the model is
refused too: a model whose architecture ships with transformers needs none.

Checked on the file list and the small JSON files before any weight is read: for a Hub repo before
anything but those files is downloaded, for a local directory (or the directory of a GGUF file) on
disk. Torch-free, like hub_ids.
"""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath

CODE_KEYS = ("auto_map", "custom_pipelines")
# JSON files that hold data, not settings: transformers reads no auto_map from them, and they are large.
DATA_JSON = ("tokenizer.json", "vocab.json")


class CustomCodeError(ValueError):
    """A model that carries custom code (a user error); the worker's loader re-raises it as ModelError."""


def config_files(names: list[str]) -> list[str]:
    """The JSON files among `names` (repo-relative) whose keys transformers reads: every *.json but the
    tokenizer's vocabularies and the weight index, config.json first."""
    picked = [
        n
        for n in names
        if n.endswith(".json") and PurePosixPath(n).name not in DATA_JSON and not n.endswith(".index.json")
    ]
    return sorted(picked, key=lambda n: (n != "config.json", n))


def check_file_list(names: list[str], source: str) -> None:
    """Refuse any Python file in a model's file list."""
    code = sorted(n for n in names if n.endswith(".py"))
    if code:
        raise CustomCodeError(
            f"{source}: the model ships Python code ({', '.join(code[:5])}); input models "
            "are never loaded with custom code. Use a model whose architecture ships with "
            "transformers."
        )


def check_config_dict(config: object, name: str, source: str) -> None:
    """Refuse a config (a parsed JSON file called `name`) that has an auto_map or custom pipelines at
    any depth (composite configs nest one config inside another)."""
    key = _code_key(config)
    if key:
        raise CustomCodeError(
            f"{source}: {name} has {key} (custom code); input models are never loaded with "
            "trust_remote_code. Use a model whose architecture ships with transformers."
        )


def check_config_file(path: Path, name: str, source: str) -> None:
    try:
        config = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CustomCodeError(f"{source}: {name} is not readable JSON ({e.__class__.__name__})") from e
    check_config_dict(config, name, source)


def check_local_dir(directory: Path, source: str, gguf_dir: bool = False) -> None:
    """Check a model directory on disk: its Python files and its config JSON files. The directory of a
    GGUF file may be any folder (a Python package ships one beside its __init__.py): there only the
    config files at its top level count, which transformers reads beside the GGUF."""
    files = directory.glob("*") if gguf_dir else directory.rglob("*")
    names = sorted(f.relative_to(directory).as_posix() for f in files if f.is_file())
    if not gguf_dir:
        check_file_list(names, source)
    for name in config_files(names):
        check_config_file(directory / name, name, source)


def _code_key(value: object) -> str | None:
    if isinstance(value, dict):
        for key, inner in value.items():
            if key in CODE_KEYS and inner:
                return key
            found = _code_key(inner)
            if found:
                return found
    elif isinstance(value, list):
        for inner in value:
            found = _code_key(inner)
            if found:
                return found
    return None
