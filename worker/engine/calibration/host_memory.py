"""Host memory for the tensors that live for a whole layer (its weights, its sums), kept out of the heap.

Calibration allocates two kinds of host memory: per-batch activations, freed within the batch, and
per-layer tensors (a layer's weights and float64 sums), freed when the layer is done. From glibc's
heap, the per-layer tensors land between the activations' free space and split it, and the heap grows
from layer to layer. Here each per-layer tensor gets its own anonymous mapping, which goes back to the
OS when the tensor is freed. Measured with bench/memory_cpu.py (random Llama, d=1024 x 24 layers,
glibc heap size over the run): 348 -> 843 MB with heap tensors, 424 -> 760 MB with these mappings, and
flat, 464 -> 472 MB, with these mappings and the heap on huge pages (GLIBC_TUNABLES=glibc.malloc.hugetlb=1,
as the worker image runs; docs/operations.md, Configuration).
"""

from __future__ import annotations

import math
import mmap

import torch


def off_heap_zeros(shape: tuple[int, ...], dtype: torch.dtype, device="cpu") -> torch.Tensor:
    """torch.zeros(shape, dtype), in its own anonymous mapping on the host (fresh pages are zero); a
    plain allocation on any other device."""
    if torch.device(device).type != "cpu":
        return torch.zeros(shape, dtype=dtype, device=device)
    count = math.prod(shape)
    if count == 0:
        return torch.zeros(shape, dtype=dtype)
    # private (a forked child gets its own copy), unmapped when the tensor, its only user, is freed
    buf = mmap.mmap(-1, count * dtype.itemsize, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    return torch.frombuffer(buf, dtype=dtype, count=count).view(shape)


def off_heap_copy(t: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """A CPU tensor's copy in its own mapping, cast to `dtype` on the way (one copy, no heap
    intermediate)."""
    return off_heap_zeros(tuple(t.shape), dtype or t.dtype).copy_(t)
