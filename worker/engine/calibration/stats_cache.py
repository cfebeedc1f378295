"""Calibration statistics cache: one directory per calibration, one safetensors shard per layer.

    <stats_dir>/<key>.stats/layer-00000.safetensors ...   the float64 sums of each layer (stats.py)
    <stats_dir>/<key>.stats/held_blocks.safetensors       the held-out token blocks, for the loss probe
    <stats_dir>/<key>.stats/meta.json                     modes held, layer count, calibration figures

The key names everything the sums depend on: the exact weights (Hub commit or content hash), the
dataset spec, num_samples, seq_len, seed, shuffle, dtype, the held-out split, the product
precision and the prefix every block opens with, when the tokenizer adds one (data.make_blocks). A
run that differs only in k, method or criterion hits the cache and skips calibration.
The mode is not in the key: the entry records which modes it holds, and a request for a mode it
lacks calibrates again (and replaces the entry).

Shards are written as calibration finishes each layer, into `<key>.<pid>.tmp/`; the directory is
renamed into place once complete, so a reader sees a whole entry or none. Readers load one layer's
shard at a time (scoring, and `fit` reads only the chosen layers).

The directory is capped (NBL_STATS_CACHE_MAX_BYTES): the worker evicts the least recently used
entries after each job (nbl/lru.py); a hit touches its entry, so recency is use, not creation.
A reader opens every file of its entry at once: an eviction meanwhile leaves them readable.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import torch
from safetensors.torch import load, save_file

from nbl import lru
from worker.engine.calibration.stats import LayerStats

FORMAT_VERSION = 3


def cache_key(**parts) -> str:
    blob = json.dumps({"v": FORMAT_VERSION, **parts}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def entry_path(stats_dir: Path, key: str) -> Path:
    return Path(stats_dir) / f"{key}{lru.SUFFIX}"


def _shard(path: Path, i: int) -> Path:
    return path / f"layer-{i:05d}.safetensors"


class Shards:
    """A complete cache entry: each layer's sums read on demand, from files opened up front."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.meta = json.loads((self.path / "meta.json").read_text())
        self.num_layers = int(self.meta["num_layers"])
        self.modes = tuple(self.meta["modes"])
        self._files = [open(_shard(self.path, i), "rb") for i in range(self.num_layers)]  # noqa: SIM115
        self._held = open(self.path / "held_blocks.safetensors", "rb")  # noqa: SIM115

    def layer(self, i: int, device="cpu") -> LayerStats:
        f = self._files[i]
        f.seek(0)
        return LayerStats.from_flat({k: v.to(device) for k, v in load(f.read()).items()}, "layer")

    def held_blocks(self) -> torch.Tensor:
        self._held.seek(0)
        return load(self._held.read())["held_blocks"]

    def close(self) -> None:
        for f in [*getattr(self, "_files", []), getattr(self, "_held", None)]:
            if f is not None:
                f.close()

    def __del__(self):
        self.close()


def open_entry(path: Path) -> Shards | None:
    """The entry at `path` if it is complete (and marked as just used), else None."""
    try:
        shards = Shards(path)
    except FileNotFoundError:  # absent, or evicted by another worker while being opened: a miss
        return None
    lru.touch(path)
    return shards


class ShardWriter:
    """Writes one entry layer by layer; `finish` makes it visible, `abort` removes the partial files."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        shutil.rmtree(self.tmp, ignore_errors=True)
        self.tmp.mkdir(parents=True)

    def layer(self, i: int, stats: LayerStats) -> None:
        save_file(stats.to_flat("layer"), str(_shard(self.tmp, i)))

    def finish(self, held_blocks: torch.Tensor, meta: dict) -> Shards:
        save_file({"held_blocks": held_blocks.contiguous()}, str(self.tmp / "held_blocks.safetensors"))
        (self.tmp / "meta.json").write_text(json.dumps(meta))
        old = self.path.with_name(f"{self.path.name}.{os.getpid()}.old.tmp")
        if self.path.exists():  # an entry for other modes: replaced
            self.path.rename(old)
        try:
            self.tmp.rename(self.path)
        except OSError:  # another process finished the same entry first: keep theirs
            shutil.rmtree(self.tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
        return Shards(self.path)

    def abort(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)
