"""An input model from the Hub: sized and checked from its file metadata and small config files
before any weight is downloaded, then exactly the commit that was checked is fetched (hub_access.py:
how long the Hub is waited for, and what its failures mean)."""

from __future__ import annotations

from fnmatch import fnmatch
from pathlib import Path

from worker.engine.loading import custom_code
from worker.engine.loading.hub_access import HubModelError, offline, reach, translated
from worker.engine.loading.model_rules import ModelError, check_config, check_model_size, no_custom_code, read_config
from worker.engine.loading.weight_files import weight_map

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


def fetch_from_hub(repo_id: str, revision: str | None, limit: int | None, private_ok: bool = True) -> tuple[Path, str]:
    """(snapshot directory, commit). `private_ok=False` (a job: the worker's Hub token is the deployment's, shared
    by every team's jobs) refuses a repo the Hub calls private, before anything of it is downloaded: that token
    may read another team's private outputs. Check the size (when limited), the file list (no code) and the small
    config files (no auto_map, a supported family) before any weight is downloaded, then fetch the snapshot.
    The Hub is asked first whether it is there at all (hub_access.reach: a bounded wait), and its failures
    come out worded for the job (HubUnreachable, HubModelError). Offline (HF_HUB_OFFLINE): the cached snapshot,
    checked as a local directory is."""
    from huggingface_hub import HfApi, hf_hub_download, snapshot_download

    with translated(repo_id, revision):
        if offline():
            return _cached(repo_id, revision, limit)
        reach(repo_id, revision)
        info = HfApi().model_info(repo_id, revision=revision, files_metadata=limit is not None)
        if not private_ok and getattr(info, "private", False):
            raise HubModelError(
                f"{repo_id}: a private repository; jobs read the Hub with this deployment's token, "
                "which every team's jobs share, so they read only public (or gated) models. An "
                "operator can import it for every team as local:NAME"
            )
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
    weight_map(snap, repo_id)  # its index names only files of the snapshot (weight_files.py): before calibrate
    return snap, snap.name  # snapshots/<commit sha>


def _cached(repo_id: str, revision: str | None, limit: int | None) -> tuple[Path, str]:
    """The snapshot in the Hugging Face cache (offline: LocalEntryNotFoundError when there is none), with the
    checks of a local directory (engine/loading/load.py)."""
    from huggingface_hub import snapshot_download

    snap = Path(snapshot_download(repo_id, revision=revision, allow_patterns=HUB_PATTERNS))
    no_custom_code(custom_code.check_local_dir, snap, repo_id)
    if not (snap / "config.json").is_file():
        raise ModelError(f"{repo_id}: no config.json in the cached snapshot {snap.name}")
    check_config(read_config(snap / "config.json", repo_id), repo_id)
    weight_map(snap, repo_id)  # a cached snapshot's index too: only files of the snapshot (weight_files.py)
    check_model_size(sum(f.stat().st_size for f in snap.glob("*.safetensors")), limit, repo_id)
    return snap, snap.name


def in_cache(repo_id: str, revision: str | None) -> bool:
    """Whether the snapshot's weights are in the Hugging Face cache already (a warm load: no download), asked
    of the cache alone, before fetch_from_hub runs."""
    from huggingface_hub import snapshot_download

    try:
        snap = Path(snapshot_download(repo_id, revision=revision, allow_patterns=HUB_PATTERNS, local_files_only=True))
    except Exception:  # noqa: BLE001 - LocalEntryNotFoundError and kin: not in the cache
        return False
    return any(snap.glob("*.safetensors"))
