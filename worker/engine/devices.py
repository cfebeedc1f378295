"""Which devices calibration runs on, and which calibration batches each one takes (pure functions).

    --devices cuda:0,cuda:1   one process per device; a device may repeat (cpu,cpu: two processes)
    (none given)              every visible GPU, else cpu

Batches are shared out in contiguous runs, the first ranks taking one more when the count does not
divide: rank 0 always holds batch 0, whose means are the shift every rank's sums are taken about
(stats.py), and every batch is the same batch a single process would form, so the float32 products
are the same and only the order of the float64 additions changes.
"""

from __future__ import annotations


def default_devices(cuda_count: int) -> list[str]:
    return [f"cuda:{i}" for i in range(cuda_count)] or ["cpu"]


def parse_devices(text: str | None, cuda_count: int) -> list[str]:
    """'cuda:0,cuda:1' -> ['cuda:0', 'cuda:1']; None, '' or 'auto' -> default_devices. A ValueError
    names what is wrong: an unknown kind, a GPU that is not there, or CPUs mixed with GPUs."""
    if text is None or text.strip() in ("", "auto"):
        return default_devices(cuda_count)
    out = []
    for item in (t.strip() for t in text.split(",")):
        kind, _, index = item.partition(":")
        if kind == "cpu" and not index:
            out.append("cpu")
        elif kind == "cuda" and (not index or index.isdigit()):
            i = int(index or 0)
            if i >= cuda_count:
                raise ValueError(f"device {item!r}: {cuda_count} CUDA device(s) visible")
            out.append(f"cuda:{i}")
        else:
            raise ValueError(f"device {item!r}: use cpu or cuda[:N], comma-separated")
    if len({d.split(":")[0] for d in out}) > 1:
        raise ValueError(f"devices {text!r}: all CPU or all GPU, not both")
    return out


def choose(devices: str | None, device: str | None, cuda_count: int) -> list[str]:
    """The devices of `--devices`, else of `--device` alone (one process, as before it), else the default."""
    single = device not in (None, "", "auto")
    if devices and single:
        raise ValueError("give --devices or --device, not both")
    return [device] if single else parse_devices(devices, cuda_count)


def visible(devices: str | None, device: str | None = None) -> list[str]:
    """choose() against the GPUs this process sees."""
    import torch

    return choose(devices, device, torch.cuda.device_count())


def backend_for(devices: list[str]) -> str:
    """NCCL for distinct GPUs; gloo on CPU, and for a GPU that repeats (NCCL refuses two ranks on one GPU)."""
    if all(d.startswith("cuda") for d in devices) and len(set(devices)) == len(devices):
        return "nccl"
    return "gloo"


def share(n: int, world: int) -> list[range]:
    """Indices 0..n-1 in `world` contiguous runs; the first n % world runs are one longer."""
    size, extra = divmod(n, world)
    runs, start = [], 0
    for r in range(world):
        stop = start + size + (r < extra)
        runs.append(range(start, stop))
        start = stop
    return runs
