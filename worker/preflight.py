"""The request's checks against the model's config.json, before any weight is read or downloaded.

The API checks a `local:NAME` model at submit (service/jobs/model_checks.py); a Hub model can only be checked
here, by fetching its config.json alone: k below the layer count, seq_len within the context length, an
existing repo and revision. A failure is a ModelError (`user`, worker/errors.py), a Hub outage is retried
by the caller. A local directory is checked again: it may have changed since the job was submitted.
"""

from __future__ import annotations

import json
from pathlib import Path

from service.jobs.model_checks import CONFIG, config_problems, read_config

from .engine.loading import ModelError


def hub_config(repo_id: str, revision: str | None) -> dict:
    """The Hub model's config.json, and nothing else."""
    from huggingface_hub import hf_hub_download

    path = hf_hub_download(repo_id, CONFIG, revision=revision)
    try:
        config = json.loads(Path(path).read_text())
    except ValueError as e:
        raise ModelError(f"{repo_id}: config.json is not JSON ({e})") from None
    if not isinstance(config, dict):
        raise ModelError(f"{repo_id}: config.json is not a JSON object")
    return config


def check(name: str, source: str, revision: str | None, ks: list[int], seq_len: int) -> None:
    """`name` is the job's model (a Hub id or local:NAME), `source` what the loader reads (a Hub id or the
    local directory). Raises ModelError naming the fields that cannot work."""
    local = Path(source)
    if local.is_dir():
        config = read_config(local)
        if config is None:
            raise ModelError(f"{name}: no readable {CONFIG}")
    elif Path(source).suffix == ".gguf":
        return  # the loader converts it first; the engine checks k against the converted model
    else:
        config = hub_config(source, revision)
    problems = config_problems(config, ks, seq_len)
    if problems:
        raise ModelError(f"{name}: " + "; ".join(f"{'.'.join(loc)}: {msg}" for loc, msg in problems))
