"""The hidden states between two layers, one entry per calibration batch, on the host.

Layer i reads entry b (a batch, or a (stream, batch) pair), runs it, and writes its output back into entry b: the outputs replace the
inputs, so the cache holds one set of hidden states (num_blocks x seq_len x d in the model's dtype),
never two. Entries stay in memory up to `budget_bytes`; past it they are written to files under
`spill_dir` (safetensors, one per entry) and read back when their turn comes. The files go when the
cache is closed.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Hashable
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file


class HiddenCache:
    def __init__(self, budget_bytes: int | None = None, spill_dir: Path | None = None):
        self.budget = budget_bytes  # None: never spill
        self.spill_root = Path(spill_dir) if spill_dir is not None else None
        self._dir: Path | None = None
        self._mem: dict[Hashable, torch.Tensor] = {}
        self._files: dict[Hashable, tuple[Path, int]] = {}  # entry -> (file, bytes)
        self._written = 0  # files written, for unique names
        self.mem_bytes = 0
        self.spilt_bytes = 0  # bytes on disk now
        self.peak_spilt_bytes = 0

    def __len__(self) -> int:
        return len(self._mem) + len(self._files)

    def put(self, b: Hashable, h: torch.Tensor) -> None:
        """Store (replacing) entry b; `h` is copied to the host if it is on a device."""
        self._drop(b)
        h = h.detach().to("cpu").contiguous()
        size = h.numel() * h.element_size()
        if self.budget is None or self.mem_bytes + size <= self.budget:
            self._mem[b] = h
            self.mem_bytes += size
            return
        self._written += 1
        path = self._spill_dir() / f"{self._written}.safetensors"
        save_file({"h": h}, str(path))
        self._files[b] = (path, size)
        self.spilt_bytes += size
        self.peak_spilt_bytes = max(self.peak_spilt_bytes, self.spilt_bytes)

    def overwrite(self, b: Hashable, h: torch.Tensor) -> None:
        """put(b, h), writing into entry b's own buffer when it is in memory with h's shape and dtype:
        the cache's buffers, allocated once, then stay where they are in the heap (host_memory.py says
        why that matters). Only for an entry nothing else refers to: whoever holds it sees it change."""
        held = self._mem.get(b)
        if held is None or held.shape != h.shape or held.dtype != h.dtype:
            return self.put(b, h)
        held.copy_(h)

    def get(self, b: Hashable) -> torch.Tensor:
        if b in self._mem:
            return self._mem[b]
        return load_file(str(self._files[b][0]))["h"]

    def pop(self, b: Hashable) -> torch.Tensor:
        h = self.get(b)
        self._drop(b)
        return h

    def _drop(self, b: Hashable) -> None:
        if b in self._mem:
            h = self._mem.pop(b)
            self.mem_bytes -= h.numel() * h.element_size()
        elif b in self._files:
            path, size = self._files.pop(b)
            self.spilt_bytes -= size
            path.unlink(missing_ok=True)

    def _spill_dir(self) -> Path:
        if self._dir is None:
            if self.spill_root is None:
                raise RuntimeError("hidden states exceed the host budget and no spill directory was given")
            self.spill_root.mkdir(parents=True, exist_ok=True)
            self._dir = Path(tempfile.mkdtemp(prefix="hidden-", dir=self.spill_root))
        return self._dir

    def close(self) -> None:
        self._mem.clear()
        self._files.clear()
        self.mem_bytes = self.spilt_bytes = 0
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> HiddenCache:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
