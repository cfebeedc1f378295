"""What this worker holds: its devices (Settings.devices / `nbl worker --devices`, else every visible
GPU, else the CPU), the memory of each, and the host's memory; and so the worker-class queues it
consumes (nbl/sizing/classes.py).

A worker serves a class when it has at least the class's number of GPUs, each with at least 90% of
the class's memory (an "80 GB" card reports ~79.6 GiB to torch, a "24 GB" one ~22.5 GiB). The host
memory of a class is the API's routing assumption; the worker checks each job's host figure against
its own memory before downloading (worker/preflight.py).
"""

from __future__ import annotations

import os

from nbl.sizing.classes import WorkerClass, queue_of

SERVE_MARGIN = 0.9


def devices(setting: str | None) -> list[str]:
    """The list calibration runs on (worker/engine/devices.py): one parser, checked against this machine."""
    from worker.engine.devices import visible

    return visible(setting)


def host_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def own(setting: str | None) -> tuple[list[str], WorkerClass]:
    """(devices, this worker as a class): GPU count and the smallest GPU's memory, host memory."""
    devs = devices(setting)
    gpus = [d for d in devs if d.startswith("cuda")]
    mem = 0
    if gpus:
        import torch

        mem = min(torch.cuda.get_device_properties(torch.device(d)).total_memory for d in gpus)
    return devs, WorkerClass("self", len(gpus), mem, host_bytes())


def serves(cls: WorkerClass, me: WorkerClass) -> bool:
    if cls.devices == 0:
        return True
    return me.devices >= cls.devices and me.device_bytes >= SERVE_MARGIN * cls.device_bytes


def queues(queue_prefix: str, classes: list[WorkerClass], me: WorkerClass) -> list[str]:
    return [queue_of(queue_prefix, c) for c in classes if serves(c, me)]
