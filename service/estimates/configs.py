"""A model's config.json, and nothing else, from wherever the model is named: a directory (the CLI), a
`local:NAME` under NBL_MODELS_DIR, or a Hub id (config.json alone, one GET: no weight is
downloaded). Errors are ConfigUnavailable, with a message that names the model as given
(never a server path) and says whether the Hub could not be reached (`unreachable`) or the model is wrong.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import quote

from nbl.model.checks import CONFIG, read_config
from nbl.names import LOCAL_PREFIX, model_id
from service.core.paths import local_model_dir
from service.core.settings import Settings

MAX_CONFIG_BYTES = 1 << 20


class ConfigUnavailable(ValueError):
    """`unreachable`: the Hub could not be asked; `invalid`: the file was had and is not a config (not JSON,
    not an object, too large, nested too deep): no retry or other token changes that."""

    def __init__(self, message: str, unreachable: bool = False, invalid: bool = False):
        super().__init__(message)
        self.unreachable = unreachable
        self.invalid = invalid


def model_config(
    model: str, settings: Settings, revision: str | None = None, *, allow_dirs: bool = False, timeout_s: float = 10.0
) -> dict:
    """`allow_dirs`: a path to a directory holding config.json is accepted (the CLI; never the API)."""
    if allow_dirs and Path(model).expanduser().is_dir():
        config = read_config(Path(model).expanduser())
        if config is None:
            raise ConfigUnavailable(f"{model}: no readable {CONFIG}")
        return config
    try:
        model_id(model)
    except ValueError as e:
        raise ConfigUnavailable(str(e)) from None
    if model.startswith(LOCAL_PREFIX):
        directory = local_model_dir(settings, model)
        config = read_config(directory) if directory.is_dir() else None
        if config is None:
            raise ConfigUnavailable(f"no model {model!r} on this server (or no readable {CONFIG})")
        return config
    return hub_config(model, revision, settings, timeout_s)


def hub_config(repo_id: str, revision: str | None, settings: Settings, timeout_s: float = 10.0) -> dict:
    """One GET of the file, no retries: the API calls this while a client waits (huggingface_hub's own
    download retries a lost connection for ~30 s). From the Settings' HF_ENDPOINT, with their HF_TOKEN; none
    when they say HF_HUB_OFFLINE (unreachable, as a Hub that is down: no estimate, the worker checks the job)."""
    if settings.hf_hub_offline:
        raise ConfigUnavailable(
            f"{repo_id}: HF_HUB_OFFLINE is set, so {CONFIG} is not fetched from the Hub; give a "
            f"directory holding its {CONFIG} instead",
            unreachable=True,
        )
    endpoint = settings.hf_read_endpoint.rstrip("/")
    url = f"{endpoint}/{repo_id}/resolve/{quote(revision or 'main', safe='')}/{CONFIG}"
    headers = {"User-Agent": "nbl-service"}
    if settings.hf_token is not None:
        headers["Authorization"] = f"Bearer {settings.hf_token.get_secret_value()}"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout_s) as resp:
            raw = resp.read(MAX_CONFIG_BYTES + 1)
    except urllib.error.HTTPError as e:
        if e.code in (401, 403):
            raise ConfigUnavailable(f"{repo_id}: gated or private: set a token with access") from None
        if e.code == 404:
            raise ConfigUnavailable(f"{repo_id}: no {CONFIG} at this repo and revision") from None
        raise ConfigUnavailable(f"{repo_id}: the Hub answered {e.code} for {CONFIG}", unreachable=True) from None
    except (urllib.error.URLError, OSError) as e:  # offline, DNS, refused, timed out
        reason = getattr(e, "reason", e)
        raise ConfigUnavailable(
            f"{repo_id}: cannot fetch {CONFIG} from the Hub ({reason}); give a directory holding its {CONFIG} instead",
            unreachable=True,
        ) from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigUnavailable(f"{repo_id}: {CONFIG} is over {MAX_CONFIG_BYTES} bytes", invalid=True)
    try:
        config = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
        raise ConfigUnavailable(f"{repo_id}: {CONFIG} is not JSON (or nests too deep)", invalid=True) from None
    if not isinstance(config, dict):
        raise ConfigUnavailable(f"{repo_id}: {CONFIG} is not a JSON object", invalid=True)
    return config
