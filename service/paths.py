"""Where validated names land on disk, for the worker. Re-checks the grammar (a spec read back
from the DB is still input) and that the result stays under its base directory."""

from __future__ import annotations

import os
from pathlib import Path

from .schemas import LOCAL_PREFIX, _simple_name
from .settings import Settings


def _under(base: Path, name: str) -> Path:
    _simple_name(name)
    path = base / name
    if os.path.commonpath([base, os.path.normpath(path)]) != str(base):  # belt and braces
        raise ValueError(f"{name!r} escapes {base}")
    return path


def model_source(settings: Settings, model_id: str) -> str:
    """What to hand the engine's loader: the directory under NBL_MODELS_DIR for `local:NAME`, else
    the Hub id unchanged."""
    if model_id.startswith(LOCAL_PREFIX):
        path = _under(settings.models_dir, model_id[len(LOCAL_PREFIX):])
        if not path.is_dir():
            raise ValueError(f"model {model_id!r}: no directory {path.name!r} under NBL_MODELS_DIR")
        return str(path)
    return model_id  # a Hub id that is also a local path is refused by the worker (worker/engine/hub_ids.py)


def publish_dir(settings: Settings, name: str) -> Path:
    """The directory a `publish: {local_dir: NAME}` job writes to."""
    return _under(settings.publish_dir, name)
