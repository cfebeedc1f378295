"""Worker classes: what a class of workers holds, which queue it consumes, and which class a job needs.

    NBL_WORKER_CLASSES=cpu=0x0/64,gpu-24g=1x24/128,gpu-80g=1x80/256,gpu-8x80g=8x80/1024
                       NAME=DEVICESxDEVICE_GiB/HOST_GiB, smallest first

Each class has a Celery queue, `<NBL_QUEUE>-<NAME>` (nbl-cpu, nbl-gpu-80g, ...). The API sends a job to
the queue of the first class (in the order given) whose devices hold the estimate and that can finish
it within the task time limit (its fast end); a worker consumes the queues of every class it can serve
(worker/host/capacity.py). A job that fits no class
is refused at submit (a 422 with the numbers).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .model import Estimate, estimate
from .options import Options
from .shapes import Shape
from .spread import Memory

GiB = 2**30
_CLASS = re.compile(r"([a-z0-9][a-z0-9-]{0,31})=(\d+)x(\d+(?:\.\d+)?)/(\d+(?:\.\d+)?)")
DEFAULT = "cpu=0x0/64,gpu-24g=1x24/128,gpu-80g=1x80/256,gpu-8x80g=8x80/1024"


@dataclass(frozen=True)
class WorkerClass:
    name: str
    devices: int  # GPUs; 0: CPU only
    device_bytes: int  # memory of each device
    host_bytes: int

    def device_list(self) -> list[str]:
        """The devices an estimate for this class assumes: one process per GPU, or one on the CPU."""
        return [f"cuda:{i}" for i in range(self.devices)] or ["cpu"]

    def memory(self) -> Memory:
        return Memory(self.device_bytes if self.devices else None, self.host_bytes)

    def holds(self, est: Estimate) -> bool:
        """Its devices and host hold the peaks, and no weight would be offloaded to disk: the worker falls
        back to that (placement.py), but a job is not routed where every forward pass reads the disk."""
        return (
            est.device_bytes <= self.device_bytes and est.host_bytes <= self.host_bytes and not est.disk.get("offload")
        )


def parse_classes(text: str) -> list[WorkerClass]:
    classes = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        m = _CLASS.fullmatch(part)
        if m is None:
            raise ValueError(f"worker class {part!r} is not NAME=DEVICESxDEVICE_GiB/HOST_GiB (e.g. gpu-80g=1x80/256)")
        name, n, dev, host = m.groups()
        classes.append(WorkerClass(name, int(n), int(float(dev) * GiB), int(float(host) * GiB)))
    if not classes:
        raise ValueError("give at least one worker class")
    if len({c.name for c in classes}) != len(classes):
        raise ValueError("worker class names must be distinct")
    return classes


def queue_of(queue_prefix: str, cls: WorkerClass) -> str:
    return f"{queue_prefix}-{cls.name}"


@dataclass
class Placement:
    cls: WorkerClass | None  # None: no class holds the job
    estimate: Estimate  # for `cls`, or for the largest class when none fits
    reason: str = ""


def place(shape: Shape, opts: Options, classes: list[WorkerClass], time_limit_s: float | None) -> Placement:
    """The first class that holds the job's estimate and can finish it in time."""
    for cls in classes:
        est = estimate(shape, opts, cls.device_list(), cls.memory())
        if cls.holds(est) and (time_limit_s is None or est.seconds[0] <= time_limit_s):
            return Placement(cls, est)
    cls, est = max(
        ((c, estimate(shape, opts, c.device_list(), c.memory())) for c in classes),
        key=lambda ce: (ce[0].devices * ce[0].device_bytes, ce[0].host_bytes),
    )
    return Placement(None, est, refusal(cls, est, time_limit_s))


def refusal(cls: WorkerClass, est: Estimate, time_limit_s: float | None) -> str:
    """Why the largest class cannot run the job, in numbers."""
    parts = []
    if est.device_bytes > cls.device_bytes:
        parts.append(
            f"{gb(est.device_bytes)} of memory on one device, over the {gb(cls.device_bytes)} of each "
            f"device of {cls.name}"
        )
    if est.host_bytes > cls.host_bytes:
        parts.append(f"{gb(est.host_bytes)} of host memory, over the {gb(cls.host_bytes)} of {cls.name}")
    if est.disk.get("offload"):
        parts.append(f"{gb(est.disk['offload'])} of its weights offloaded to disk beyond {cls.name}'s GPUs and host")
    if time_limit_s is not None and est.seconds[0] > time_limit_s:
        parts.append(f"at least {est.seconds[0]:,.0f} s, over the task time limit of {time_limit_s:,.0f} s")
    return "the job needs " + "; ".join(parts) if parts else ""


def gb(n: int) -> str:
    return f"{n / 1e9:,.1f} GB"
