"""glibc's heap during calibration: large activations in their own mappings, the heap trimmed once a layer.

Calibration frees every batch's activations within the batch, layer after layer, for hours. From glibc's
heap, freed activations split the free space and the heap grows from layer to layer. Inside
`calibration_heap()`:
- allocations of 8 MB and more (a 2,048-token batch's hidden states from d=1024 on, the MLP and attention
  intermediates) that the heap's free space cannot serve get their own mapping, given back to the OS when
  freed, instead of growing the heap;
- up to 64 MB free at the heap's top is kept between batches instead of being faulted in again;
- the caller trims the rest once a layer (release_free_memory).

Measured with bench/memory_cpu.py (random Llama d=1024 x 24, peak RSS over the import baseline, as a
fraction of the weights, GLIBC_TUNABLES=glibc.malloc.hugetlb=1): trimming after every batch with glibc's
defaults 0.47, 0.48, 0.48 (calibration 58-61 s); once a layer with the defaults 0.42, 0.42, 0.59 (the heap
grew on one run in three); this policy 0.40, 0.42, 0.42, 0.43 (58-62 s). On SmolLM2 (bench/engine_cpu.py's
pair at 32 x 512, alternated in one process) calibration took 34.8-35.0 s against 35.9-37.4 s.

On exit the thresholds go to glibc's own ceiling (32 MB mmap, 64 MB trim), where its dynamic thresholds
settle in a long-running process: setting them once turns the dynamic adjustment off, so they cannot be
handed back. Elsewhere than glibc these are no-ops.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from contextlib import contextmanager

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # malloc.h
CALIBRATION = {M_MMAP_THRESHOLD: 8 << 20, M_TRIM_THRESHOLD: 64 << 20}
AFTER = {M_MMAP_THRESHOLD: 32 << 20, M_TRIM_THRESHOLD: 64 << 20}  # glibc's DEFAULT_MMAP_THRESHOLD_MAX, 2x it


def _libc():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else None  # glibc only


_LIBC = _libc()


def _set(params: dict[int, int]) -> None:
    if _LIBC is not None:
        for param, value in params.items():
            _LIBC.mallopt(param, value)


@contextmanager
def calibration_heap():
    """glibc's thresholds for calibration inside the block (module docstring), glibc's ceiling after."""
    _set(CALIBRATION)
    try:
        yield
    finally:
        _set(AFTER)


def release_free_memory() -> None:
    """Hand the heap's free pages back to the OS (glibc's malloc_trim)."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)
