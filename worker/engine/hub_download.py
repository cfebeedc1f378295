"""An input model from the Hub: sized and checked from its file metadata and small config files
before any weight is downloaded, then exactly the commit that was checked is fetched."""

from __future__ import annotations

from fnmatch import fnmatch
from pathlib import Path

from . import custom_code
from .model_rules import ModelError, check_config, check_model_size, no_custom_code, read_config

HUB_PATTERNS = ["*.json", "*.safetensors", "*.model", "*.txt", "*.tiktoken", "*.jinja"]


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


def fetch_from_hub(repo_id: str, revision: str | None, limit: int | None) -> tuple[Path, str]:
    """(snapshot directory, commit). Check the size (when limited), the file list (no code) and the small
    config files (no auto_map, a supported family) before any weight is downloaded, then fetch the snapshot."""
    from huggingface_hub import HfApi, hf_hub_download, snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

    try:
        info = HfApi().model_info(repo_id, revision=revision, files_metadata=limit is not None)
        if limit is not None:
            check_model_size(hub_download_size(repo_id, revision, info)[0], limit, repo_id)
        revision = info.sha or revision  # fetch the commit that was listed (and measured), not a newer one
        names = [f.rfilename for f in info.siblings or []]
        no_custom_code(custom_code.check_file_list, names, repo_id)
        if "config.json" not in names:
            raise ModelError(f"{repo_id}: no config.json in the repository")
        for name in custom_code.config_files([n for n in names if any(fnmatch(n, p) for p in HUB_PATTERNS)]):
            local = Path(hf_hub_download(repo_id, name, revision=revision))
            no_custom_code(custom_code.check_config_file, local, name, repo_id)
            if name == "config.json":
                check_config(read_config(local, repo_id), repo_id)
        snap = Path(snapshot_download(repo_id, revision=revision, allow_patterns=HUB_PATTERNS))
    except (RepositoryNotFoundError, RevisionNotFoundError) as e:
        raise ModelError(f"{repo_id}@{revision or 'main'}: not found on the Hub ({e.__class__.__name__})") from e
    except HfHubHTTPError as e:
        raise ModelError(f"{repo_id}: the Hub refused the download: {e}") from e
    return snap, snap.name  # snapshots/<commit sha>
