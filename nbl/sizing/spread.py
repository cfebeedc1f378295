"""Where a whole model's weights go when the worker loads one (evaluation, the load check, measured selection):
the arithmetic of worker/engine/placement.plan, without torch.

    on the CPU       all of it on the host
    fits one GPU     weights x HEADROOM within the first GPU's free memory: all there (from_pretrained reads it
                     to the host first, then moves it: a transient host copy)
    larger           accelerate's device_map="auto": each GPU up to its free memory / HEADROOM, the host up to
                     half its memory, the rest offloaded to disk; offloaded weights travel to the GPU on every
                     forward pass, which the time estimate prices (HOST_/DISK_OFFLOAD_BPS)

Without a device size (`nbl estimate --devices cuda:0` without --device-memory) a model is assumed to fit one.
"""

from __future__ import annotations

from dataclasses import dataclass

HEADROOM = 1.25  # worker/engine/placement.HEADROOM (a test keeps the two equal)
# Offloaded weights' transfer to the GPU, bytes/s (slow, fast): host memory over PCIe 4-5, disk from a SATA to
# an NVMe SSD.
HOST_OFFLOAD_BPS = (1e10, 2.5e10)
DISK_OFFLOAD_BPS = (5e8, 3e9)


@dataclass(frozen=True)
class Memory:
    """What the devices hold, when known: a worker class's (classes.py) or a worker's own (worker/host/capacity.py)."""

    device_bytes: int | None = None  # each GPU's memory
    host_bytes: int | None = None


@dataclass(frozen=True)
class Spread:
    device: int  # weights on the first (fullest) GPU; 0 on the CPU
    host: int  # weights on the host: all of them on the CPU, the transient copy or accelerate's CPU offload on GPUs
    disk: int  # weights offloaded to disk
    offloaded: tuple[int, int] = (0, 0)  # (host, disk) bytes that move to the GPU on every forward pass

    def transfer_s(self, rate: int) -> float:
        """Seconds one forward pass spends bringing offloaded weights to the GPU, at `rate` (an index into the
        (slow, fast) pairs of rates, as model.py's SLOW and FAST)."""
        host, disk = self.offloaded
        return host / HOST_OFFLOAD_BPS[rate] + disk / DISK_OFFLOAD_BPS[rate]


def spread(weights: int, gpus: int, memory: Memory, context: int) -> Spread:
    """`weights` bytes over `gpus` GPUs (0: the CPU) of `memory`; `context` is each GPU's own use (CUDA)."""
    if gpus == 0:
        return Spread(0, weights, 0)
    free = None if memory.device_bytes is None else max(0, memory.device_bytes - context)
    if free is None or weights * HEADROOM <= free:
        return Spread(weights, weights, 0)
    per_gpu = int(free / HEADROOM)
    rest = max(0, weights - per_gpu * gpus)
    host = rest if memory.host_bytes is None else min(rest, memory.host_bytes // 2)
    return Spread(min(weights, per_gpu), host, rest - host, (host, rest - host))
