"""The request's checks against the model's config.json, before any weight is read or downloaded.

The API checks a `local:NAME` model at submit (service/estimates/local_model.py), and a Hub model when it could
fetch its config.json; here every model is checked again, a Hub model by fetching its config.json alone: a family
and form the engine can write, k below the layer count, seq_len within the context length (nbl/model/checks.py),
an existing repo and revision. A failure is a ModelError (`user`, worker/errors.py), a Hub outage is retried
by the caller. A local directory is checked again: it may have changed since the job was submitted.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from nbl import recipe as R
from nbl.model.checks import CONFIG, config_problems, read_config

from .engine.loading.hub_access import reach, translated
from .engine.loading.load import ModelError


def hub_config(repo_id: str, revision: str | None) -> dict:
    """The Hub model's config.json, and nothing else (the Hub asked first whether it is there at all, its
    failures worded for the job: engine/loading/hub_access.py)."""
    from huggingface_hub import hf_hub_download

    with translated(repo_id, revision):
        reach(repo_id, revision)
        path = hf_hub_download(repo_id, CONFIG, revision=revision)
    try:
        config = json.loads(Path(path).read_text())
    except ValueError as e:
        raise ModelError(f"{repo_id}: config.json is not JSON ({e})") from None
    except RecursionError:
        raise ModelError(f"{repo_id}: config.json nests deeper than its parser goes") from None
    if not isinstance(config, dict):
        raise ModelError(f"{repo_id}: config.json is not a JSON object")
    return config


def check(
    name: str,
    source: str,
    revision: str | None,
    ks: list[int],
    seq_len: int,
    fit: Callable[[dict], None] | None = None,
    form: str = R.FORM,
    mode: str = R.MODE,
) -> None:
    """`name` is the job's model (a Hub id or local:NAME), `source` what the loader reads (a Hub id or the
    local directory). Raises ModelError naming the fields that cannot work. `fit(config)` then checks that
    the job fits this worker (`fits`)."""
    local = Path(source)
    if local.is_dir():
        config = read_config(local)
        if config is None:
            raise ModelError(f"{name}: no readable {CONFIG}")
    elif Path(source).suffix == ".gguf":
        return  # the loader converts it first; the engine checks k against the converted model
    else:
        config = hub_config(source, revision)
    problems = config_problems(config, ks, seq_len, form, mode)
    if problems:
        raise ModelError(f"{name}: " + "; ".join(f"{'.'.join(loc)}: {msg}" for loc, msg in problems))
    if fit is not None:
        fit(config)


def fits(name: str, config: dict, recipe, devices_setting: str | None, host_cache_bytes: int | None) -> dict:
    """The job's estimate on this worker's own devices (nbl/sizing, as the API's); a ModelError (`user`) with the
    numbers when it needs more memory than they hold. Returns the estimate's figures."""
    from nbl.sizing.classes import gb
    from nbl.sizing.job import as_json, job_options
    from nbl.sizing.model import estimate
    from nbl.sizing.shapes import ShapeError, shape_of
    from nbl.sizing.spread import Memory

    from .host.capacity import own

    devices, me = own(devices_setting)
    try:
        est = estimate(
            shape_of(config),
            job_options(recipe, host_cache_bytes),
            devices,
            Memory(me.device_bytes or None, me.host_bytes),
        )  # a model larger than a device is spread
    except ShapeError as e:
        raise ModelError(f"{name}: {e}") from None
    over = []
    if me.devices and est.device_bytes > me.device_bytes:
        over.append(f"{gb(est.device_bytes)} on one device, this worker's have {gb(me.device_bytes)} each")
    if est.host_bytes > me.host_bytes:
        over.append(f"{gb(est.host_bytes)} of host memory, this worker has {gb(me.host_bytes)}")
    if over:
        raise ModelError(f"{name}: the job does not fit this worker ({','.join(devices)}): it needs " + "; ".join(over))
    return as_json(est, None)
