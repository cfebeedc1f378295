"""Calibration's heap policy (heap.py): large activations in their own mappings inside the block, the
heap (glibc's ceiling) after it."""

import sys

import pytest
import torch

from worker.engine.heap import _LIBC, AFTER, _set, calibration_heap, release_free_memory
from test_host_memory import _mapped, _region

pytestmark = pytest.mark.skipif(sys.platform != "linux" or _LIBC is None, reason="glibc's malloc only")

NINE_MB = (9 << 20) // 4  # float32 elements: above calibration's 8 MB threshold, below glibc's 32 MB ceiling


def test_large_allocations_get_their_own_mapping_only_during_calibration():
    _set(AFTER)  # as after an earlier calibration (a fresh process's 128 KB threshold would map it anyway)
    before = torch.empty(NINE_MB)
    assert not _mapped(before)
    del before
    release_free_memory()  # as calibration trims once a layer: the heap has no free 9 MB to hand out
    with calibration_heap():
        inside = torch.empty(NINE_MB)
        small = torch.empty(1 << 18)  # 1 MB: stays in the heap
        assert _mapped(inside) and not _mapped(small)
        addr = inside.data_ptr()
        del inside
        assert _region(addr) is None  # its mapping went back to the OS when freed
        release_free_memory()
    after = torch.empty(NINE_MB)
    assert not _mapped(after)  # thresholds back at glibc's ceiling: from the heap again


def test_the_policy_is_restored_when_calibration_raises():
    with pytest.raises(RuntimeError), calibration_heap():
        raise RuntimeError("a cancelled job")
    assert not _mapped(torch.empty(NINE_MB))
