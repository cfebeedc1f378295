"""Where validated names land on disk, for the worker. Re-checks the grammar (a spec read back
from the DB is still input) and that the result stays under its base directory.

Local outputs live by team: NBL_PUBLISH_DIR/<team>/<name>, each holding an owner marker
(OWNER_FILE, nbl/outputs/manifest.py: the team and the job that created it) written with the output, so a job replaces only
what a job of its team made. A job copies into its own NBL_PUBLISH_DIR/.nbl-staging/<job id> before
renaming into place. Neither name can be a team's or an output's: simple names start with a letter
or digit.
"""

from __future__ import annotations

import os
from pathlib import Path

from nbl.names import LOCAL_PREFIX, simple_name
from service.core.settings import Settings

STAGING_DIR = ".nbl-staging"


def _under(base: Path, name: str) -> Path:
    simple_name(name)
    path = base / name
    if os.path.commonpath([base, os.path.normpath(path)]) != str(base):  # belt and braces
        raise ValueError(f"{name!r} escapes {base.name}")  # the directory's name, never its path
    return path


def local_model_dir(settings: Settings, model_id: str) -> Path:
    """The directory under NBL_MODELS_DIR that `local:NAME` names (it may not exist)."""
    return _under(settings.models_dir, model_id[len(LOCAL_PREFIX) :])


def model_source(settings: Settings, model_id: str) -> str:
    """What to hand the engine's loader: the directory under NBL_MODELS_DIR for `local:NAME`, else
    the Hub id unchanged."""
    if model_id.startswith(LOCAL_PREFIX):
        path = local_model_dir(settings, model_id)
        if not path.is_dir():
            raise ValueError(f"model {model_id!r}: no directory {path.name!r} under NBL_MODELS_DIR")
        return str(path)
    return model_id  # a Hub id that is also a local path is refused by the worker (worker/engine/loading/hub_ids.py)


def publish_dir(settings: Settings, team: str, name: str) -> Path:
    """The directory a `publish: {local_dir: NAME}` job of `team` writes to."""
    return _under(_under(settings.publish_dir, team), name)


def local_uri(team: str, name: str, k: int | None = None) -> str:
    """What a job records for a local output: names, never a server path (the API may serve it)."""
    return f"{LOCAL_PREFIX}{team}/{name}" + (f"/k{k}" if k is not None else "")


def staging_root(settings: Settings) -> Path:
    return settings.publish_dir / STAGING_DIR


def scratch_dir(settings: Settings, job_id: str) -> Path:
    """A job's scratch space (checkpoints before publishing), deleted when the job ends."""
    return _under(settings.home / "jobs", job_id)
