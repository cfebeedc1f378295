"""The statistics cache's recency is use, not creation (issue 10, finding 5): a hit touches its entry,
so the cap evicts the entry unused the longest, not the oldest written. Entries are directories of
per-layer shards; a reader that opened one keeps reading it after an eviction."""

from __future__ import annotations

import os
import time

import torch

from nbl import lru
from worker.engine.calibration import stats_cache
from worker.engine.calibration.stats import LayerAccumulator


def _write(path, value: float):
    acc = LayerAccumulator(4, "cpu", branches=("attn",))
    x = torch.full((3, 4), value) + torch.arange(12.0).reshape(3, 4)
    acc.add(x, {"attn": 2 * x}, "fit")
    w = stats_cache.ShardWriter(path)
    w.layer(0, acc.stats)
    return w.finish(torch.zeros(1, 4, dtype=torch.long), {"tokens": 4, "modes": ["attn"], "num_layers": 1})


def test_a_cache_hit_makes_its_entry_the_most_recently_used(tmp_path):
    a, b = stats_cache.entry_path(tmp_path, "a"), stats_cache.entry_path(tmp_path, "b")
    for i, path in enumerate((a, b)):
        _write(path, float(i))
    old = time.time() - 1000
    os.utime(a, (old, old))  # a written first, b after
    os.utime(b, (old + 1, old + 1))
    assert [p.name for p in tmp_path.iterdir()] and not list(tmp_path.glob("*.tmp"))
    hit = stats_cache.open_entry(a)  # a hit: a is now the most recently used
    assert hit is not None and hit.modes == ("attn",)
    size = sum(f.stat().st_size for f in a.iterdir())
    assert [e.path.name for e in lru.evict(tmp_path, size)] == ["b.stats"]
    assert stats_cache.open_entry(b) is None and stats_cache.open_entry(a).meta["tokens"] == 4  # evicted: a miss
    assert [e.path.name for e in lru.evict(tmp_path, 0)] == ["a.stats"]
    assert not a.exists() and float(hit.layer(0).splits["fit"].n) == 3  # opened before: still readable
