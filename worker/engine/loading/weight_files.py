"""Which files a checkpoint's weights may be read from: regular files of the model's own folder.

A weight index (model.safetensors.index.json) is input, like a config: a team writes what it likes into
it. Read as given, a shard named `../../../home/published/beta/secret/model.safetensors`, an absolute
path, a shard symlinked out of the folder, a FIFO (open() blocks the worker for good), /dev/urandom or a
directory would be read as this model's weights, or fail in a way that says whether a path exists on
the worker (issue 35). So every file a reader opens as weights -- the index itself, each shard it names,
and every *.safetensors of the folder (read when there is no index, hashed for the fingerprint, listed
by llama.cpp's converter) -- must be

    a plain name        no separator, not "." or "..", no NUL: Hugging Face shards are flat
                        (model-00001-of-00002.safetensors)
    inside the model    once symlinks are resolved: in the folder, or, for a Hugging Face cache snapshot
                        (models--org--name/snapshots/<rev>/, every file a symlink to ../../blobs/<hash>),
                        in that same repo's blobs/ folder
    a regular file      by stat, before anything opens it: no FIFO, device or directory

Decided from names, readlink and stat alone; nothing is opened but the index, once it passed. A refusal
is a WeightFileError (a ValueError: `user`, worker/errors.py) whose text is the same whatever the name
points at and whether it exists, so it tells nothing about the worker's files. Every reader calls
`weight_map` first: the loader (loading/load.py, hub_download.py, worker/fetch.py), calibration's layer source
and the output writer (layer_source.tensor_files), evaluation (eval/compressed.py), the load check and
GGUF export. Torch-free, like custom_code.py: `nbl export` checks a folder without loading torch.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

INDEX = "model.safetensors.index.json"  # transformers' SAFE_WEIGHTS_INDEX_NAME
SHOWN = 120  # characters of a refused name quoted back (it is the model's own text, not the worker's)


class WeightFileError(ValueError):
    """A weight file that is not a regular file of the model's own folder (a user error)."""


def refused(name: object, source: str) -> WeightFileError:
    """The one refusal, whatever the name points at and whether it exists: no oracle of the worker's files."""
    text = str(name)
    shown = text if len(text) <= SHOWN else text[:SHOWN] + "..."
    return WeightFileError(
        f"{source}: the weights name {shown!r}, which is not a file of the model: each shard "
        "must be a plain file name (like model-00001-of-00002.safetensors) of a regular file in the "
        "model's own folder; nothing was read"
    )


def plain_name(name: object) -> bool:
    return (
        isinstance(name, str)
        and name not in ("", ".", "..")
        and "/" not in name
        and "\\" not in name
        and "\0" not in name
    )


def own_roots(folder: Path) -> tuple[str, ...]:
    """Where the model's files may really lie: its folder and, for a Hugging Face cache snapshot, its repo's
    blobs/ (taken as named, unresolved: a blobs/ that is a symlink elsewhere holds no file of the model)."""
    real = Path(os.path.realpath(folder))
    if real.parent.name == "snapshots" and real.parent.parent.name.startswith("models--"):
        return str(real), str(real.parent.parent / "blobs")
    return (str(real),)


def check_weight_file(folder: Path, name: object, roots: tuple[str, ...], source: str) -> None:
    """Refuse `name` unless it is a plain name whose file, symlinks resolved, is a regular file under `roots`."""
    if not plain_name(name):
        raise refused(name, source)
    real = os.path.realpath(os.path.join(folder, name))  # readlink only: a FIFO or device is not opened
    if not any(real != root and os.path.commonpath([real, root]) == root for root in roots):
        raise refused(name, source)
    try:
        mode = os.stat(real).st_mode
    except (OSError, ValueError):  # missing, a symlink loop, unreadable
        raise refused(name, source) from None
    if not stat.S_ISREG(mode):
        raise refused(name, source)


def read_index(folder: Path, roots: tuple[str, ...], source: str) -> dict[str, str] | None:
    """The index's weight_map (tensor name -> shard name), None when there is no index; the index file itself
    checked before it is read."""
    path = Path(folder) / INDEX
    if not os.path.lexists(path):
        return None
    check_weight_file(folder, INDEX, roots, source)
    try:
        index = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        raise WeightFileError(f"{source}: {INDEX} is not readable JSON ({type(e).__name__})") from None
    found = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(found, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in found.items()):
        raise WeightFileError(f"{source}: {INDEX} has no weight_map of tensor names to shard file names")
    return dict(found)


def weight_map(folder: Path, source: str = "the model") -> dict[str, str] | None:
    """The index's weight_map, None when the folder has none; first every file a reader opens as weights is
    checked (the index, each shard it names, each *.safetensors of the folder). `source` names the model in
    the refusal (the job's model, never a server path where the caller knows it)."""
    roots = own_roots(Path(folder))
    index = read_index(folder, roots, source)
    names = set(index.values()) if index is not None else set()
    names.update(n for n in os.listdir(folder) if n.endswith(".safetensors"))
    for name in sorted(names):
        check_weight_file(folder, name, roots, source)
    return index
