"""The statistics cache's recency is use, not creation (issue 10, finding 5): a hit touches its entry,
so the cap evicts the entry unused the longest, not the oldest written."""

from __future__ import annotations

import os
import time

import torch

from service import lru
from worker.engine import stats_cache


def test_a_cache_hit_makes_its_entry_the_most_recently_used(tmp_path):
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    for path in (a, b):
        stats_cache.save(path, [], torch.zeros(1, 4, dtype=torch.long), {"tokens": 4})
    old = time.time() - 1000
    os.utime(a, (old, old))  # a written first, b after
    os.utime(b, (old + 1, old + 1))
    assert stats_cache.load(a) is not None  # a hit: a is now the most recently used
    assert [e.path.name for e in lru.evict(tmp_path, a.stat().st_size)] == ["b.safetensors"]
    assert stats_cache.load(b) is None and stats_cache.load(a)[2] == {"tokens": 4}  # evicted: a miss
