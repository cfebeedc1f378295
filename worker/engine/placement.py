"""Where a whole model's weights go when it is loaded for evaluation or the load check: onto one device
when they fit it, else spread by accelerate (device_map="auto") within max_memory over the run's GPUs,
the host, and the rest offloaded to disk (issue 12 §3).

    mm = max_memory_for(path, devices)        # None: one device, the simple path
    kw = spread_kwargs(mm)                    # from_pretrained's keywords ({} for one device)
    model = place(from_pretrained(..., **kw), device, kw)
    ids.to(input_device(model))               # where a forward's input ids go
"""

from __future__ import annotations

import shutil
import tempfile
import weakref
from pathlib import Path

import torch

HEADROOM = 1.25  # weights x this must fit the first device's free memory (activations, the KV cache)


def weight_bytes(path: str | Path) -> int:
    return sum(f.stat().st_size for f in Path(path).glob("*.safetensors"))


def gpu_indices(devices: list[str] | None) -> list[int]:
    """The distinct GPUs of a device list, in order ('cuda' alone is GPU 0)."""
    out = [int(d.partition(":")[2] or 0) for d in devices or [] if d.startswith("cuda")]
    return list(dict.fromkeys(out))


def plan(
    weights: int, devices: list[str] | None, free: dict[int, int], host: int, headroom: float = HEADROOM
) -> dict | None:
    """None when `weights` (x headroom) fit the free memory of the first GPU, or the devices are the CPU
    (host memory is the one device there); else accelerate's max_memory over every GPU of `devices` and
    half the free host memory `host`. `free`: GPU index -> free bytes."""
    gpus = gpu_indices(devices)
    if not gpus or weights * headroom <= free[gpus[0]]:
        return None
    return {**{i: int(free[i] / headroom) for i in gpus}, "cpu": int(host / 2)}


def max_memory_for(path: str | Path, devices: list[str] | None, headroom: float = HEADROOM) -> dict | None:
    """plan() for the weights under `path` against what the devices have free now."""
    gpus = gpu_indices(devices)
    if not gpus:
        return None
    import psutil

    free = {i: torch.cuda.mem_get_info(i)[0] for i in gpus}
    return plan(weight_bytes(path), devices, free, psutil.virtual_memory().available, headroom)


def spread_kwargs(max_memory: dict | None) -> dict:
    """from_pretrained's keywords: none for one device; else device_map="auto" within max_memory, what
    does not fit offloaded to a temporary folder that place() removes with the model."""
    if max_memory is None:
        return {}
    return dict(device_map="auto", max_memory=max_memory, offload_folder=tempfile.mkdtemp(prefix="nbl-offload-"))


def place(model: torch.nn.Module, device: str, kwargs: dict) -> torch.nn.Module:
    """The loaded model on `device`, or left where device_map put it (spread_kwargs), in eval mode."""
    if not kwargs:
        return model.to(device).eval()
    weakref.finalize(model, shutil.rmtree, kwargs["offload_folder"], True)
    return model.eval()


def input_device(model: torch.nn.Module) -> torch.device:
    """Where a forward's input ids go: the input embedding's device; when device_map offloaded it (meta),
    the device accelerate runs the model on (its hooks bring each layer's weights there)."""
    embed = getattr(model, "get_input_embeddings", None)  # any nn.Module that scores tokens, not only HF models
    device = embed().weight.device if embed is not None else next(model.parameters()).device
    if device.type != "meta":
        return device
    return torch.device(getattr(getattr(model, "_hf_hook", None), "execution_device", None) or "cpu")
