"""A Hugging Face cache snapshot built by hand, laid out as huggingface_hub lays one out, and weight indexes
crafted to reach outside it (issue 35, finding 1):

    <cache>/models--org--name/refs/main                 the commit
    <cache>/models--org--name/snapshots/<commit>/NAME   -> ../../blobs/<sha256 of its bytes>

With HF_HUB_OFFLINE the loader takes such a snapshot as the model `org/name`, as it would one downloaded."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from testkit.models import tiny_model, tiny_tokenizer

REV = "5e1ec7ed" * 5  # the snapshot's commit
INDEX = "model.safetensors.index.json"
SHARD = "model-00009-of-00009.safetensors"  # the one shard a crafted index names, when it is a plain name
# what the crafted index names: a path out of the folder, or a plain name whose entry is not a file of the model
CASES = ("dotdot", "absolute", "symlink", "dangling", "fifo", "directory", "missing")


def sharded_checkpoint(path: Path, seed: int = 0) -> Path:
    """A tiny Llama saved in several shards with their index, and its tokenizer."""
    tiny_model(seed=seed).save_pretrained(path, max_shard_size="200KB")
    tiny_tokenizer().save_pretrained(path)
    assert (path / INDEX).is_file()
    return path


def secret_model(root: Path) -> Path:
    """Another team's published weights (a different seed), where the worker could read them."""
    folder = root / "home" / "published" / "beta" / "secret"
    tiny_model(seed=1).save_pretrained(folder)
    return folder / "model.safetensors"


def put(snap: Path, name: str, data: bytes) -> None:
    """One file of the snapshot: its blob, and the snapshot's symlink to it (replacing any there)."""
    blob = snap.parent.parent / "blobs" / hashlib.sha256(data).hexdigest()
    blob.write_bytes(data)
    link = snap / name
    if os.path.lexists(link):
        link.unlink()
    link.symlink_to(os.path.relpath(blob, snap))


def hub_snapshot(cache: Path, repo_id: str, src: Path) -> Path:
    """The files of the folder `src` as the cached snapshot of `repo_id` at REV; returns the snapshot folder."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / REV
    snap.mkdir(parents=True)
    (repo / "blobs").mkdir()
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REV)
    for f in sorted(src.iterdir()):
        if f.is_file():
            put(snap, f.name, f.read_bytes())
    return snap


def craft(folder: Path, case: str, secret: Path) -> str:
    """Point every tensor of `folder`'s index at one shard, made as `case` says (a CASES name); returns the
    name the index gives. The folder's own shards stay, as the dummy shard of the attack."""
    name = {"dotdot": os.path.relpath(secret, folder), "absolute": str(secret)}.get(case, SHARD)
    entry = folder / SHARD
    if case == "symlink":
        entry.symlink_to(secret)
    elif case == "dangling":
        entry.symlink_to(secret.parent / "not-there.safetensors")
    elif case == "fifo":
        os.mkfifo(entry)
    elif case == "directory":
        entry.mkdir()
    index = json.loads((folder / INDEX).read_text())
    index["weight_map"] = {tensor: name for tensor in index["weight_map"]}
    text = json.dumps(index).encode()
    if (folder / INDEX).is_symlink():
        put(folder, INDEX, text)
    else:
        (folder / INDEX).write_bytes(text)
    return name
