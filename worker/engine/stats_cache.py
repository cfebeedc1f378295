"""Calibration statistics cache: the float64 sums of every layer, as one safetensors file.

The key names everything the sums depend on: the exact weights (Hub commit or content hash), the
dataset spec, num_samples, seq_len, seed, shuffle, dtype, the held-out split and the product
precision. A run that differs only in k, mode, method or criterion hits the cache and skips
calibration entirely (the held-out token blocks are stored too, for the loss probe).

The directory is capped (NBL_STATS_CACHE_MAX_BYTES): the worker evicts the least recently used
entries after each job (service/lru.py); a hit touches its file, so recency is use, not creation.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from service import lru

from .stats import LayerStats

FORMAT_VERSION = 1


def cache_key(**parts) -> str:
    blob = json.dumps({"v": FORMAT_VERSION, **parts}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def default_dir() -> Path:
    home = Path(os.environ.get("NBL_HOME", "~/.nbl")).expanduser()
    return Path(os.environ.get("NBL_STATS_DIR", home / "stats"))


def save(path: Path, stats: list[LayerStats], held_blocks: torch.Tensor, meta: dict) -> None:
    tensors = {}
    for i, s in enumerate(stats):
        tensors.update(s.to_flat(f"layer.{i}"))
    tensors["held_blocks"] = held_blocks.contiguous()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    save_file(tensors, str(tmp), metadata={"meta": json.dumps(meta), "num_layers": str(len(stats))})
    tmp.replace(path)  # atomic: a reader sees the old file or the whole new one


def load(path: Path, device="cpu") -> tuple[list[LayerStats], torch.Tensor, dict] | None:
    if not path.is_file():
        return None
    from safetensors import safe_open

    try:
        with safe_open(str(path), "pt") as f:
            md = f.metadata()
        flat = load_file(str(path), device=str(device))
    except FileNotFoundError:  # evicted by another worker between the check and the read: a miss
        return None
    lru.touch(path)
    stats = [LayerStats.from_flat(flat, f"layer.{i}") for i in range(int(md["num_layers"]))]
    return stats, flat["held_blocks"], json.loads(md["meta"])
