"""Data-parallel calibration: one process per device, the parent being rank 0.

    parent (rank 0, devices[0])       children (ranks 1.., spawned)
    calibrate(...)                    calibrate(checkpoint read layer by layer, ...)
      each layer: batches of rank 0     each layer: their own batches
      broadcast the shift  ---------->  (every rank centres its sums on rank 0's first batch)
      all-reduce the float64 sums <-->  (then the children drop theirs)
      score, write the shard

The parent stays rank 0 so that everything after calibration (scoring, the cache, progress reports,
cancellation) runs where it runs with one device. The group is a process-group object of its own,
not torch.distributed's default group: no global state, so a failed run leaves nothing behind.
NCCL between distinct GPUs, gloo otherwise (devices.backend_for); rendezvous on a file store in a
temporary directory (no port to find free).

No hang: the children write a key when up, and the parent waits for them while checking they are
alive; every collective has `timeout_s`. A child that fails closes its sockets, so the parent's
next collective fails at once; the parent then raises CalibrationProcessError with the child's own
traceback. A parent that fails (or is cancelled) terminates its children.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.multiprocessing.spawn import ProcessException

from worker.engine.calibration.layer_source import CheckpointLayers
from worker.engine.devices import backend_for

TIMEOUT_S = 1800.0  # a collective waits at most this long: a layer's skew between ranks must fit


class CalibrationProcessError(RuntimeError):
    """A calibration process on another device failed; the message carries its traceback."""


class Solo:
    """One process: nothing to agree on or to add (the accumulator takes its own first batch's shift)."""

    rank, world = 0, 1

    def agree_shift(self, acc, x, ys) -> None:
        pass

    def reduce(self, acc) -> None:
        pass


SOLO = Solo()


class Group:
    def __init__(self, store, rank: int, devices: list[str], timeout_s: float):
        self.rank, self.world, self.device = rank, len(devices), torch.device(devices[rank])
        self.backend = backend_for(devices)
        td = timedelta(seconds=timeout_s)
        if self.backend == "nccl":
            torch.cuda.set_device(self.device)
            opts = dist.ProcessGroupNCCL.Options()
            opts._timeout = td
            self.pg = dist.ProcessGroupNCCL(store, rank, self.world, opts)
        else:
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # one host: never depend on its name resolving
            self.pg = dist.ProcessGroupGloo(store, rank, self.world, td)

    def _run(self, t: torch.Tensor, op) -> None:
        """op(list_of_one_tensor) -> Work; gloo gets a host copy of a GPU tensor."""
        host = self.backend == "gloo" and t.device.type != "cpu"
        buf = t.cpu() if host else t
        op([buf]).wait()
        if host:
            t.copy_(buf)

    def agree_shift(self, acc, x, ys) -> None:
        """Every rank starts `acc` at rank 0's shift (its first batch, global batch 0)."""
        n = acc.d * (1 + len(acc.branches))
        shift = acc.shift_of(x, ys) if self.rank == 0 else torch.zeros(n, dtype=torch.float64, device=self.device)
        self._run(shift, self.pg.broadcast)
        acc.start(shift)

    def reduce(self, acc) -> None:
        """Sum every rank's float64 sums into every rank's accumulator."""
        for t in acc.stats.sums():
            self._run(t, self.pg.allreduce)


def _child(i: int, store_path: str, devices: list[str], timeout_s: float, threads: int, calibrate, job: dict) -> None:
    """Rank i + 1: the same layer-by-layer `calibrate` (handed over, so that this module does not import
    calibrate.py, which imports it) on its share of the batches; its sums are only added into rank 0's."""
    rank = i + 1
    torch.set_num_threads(threads)
    store = dist.FileStore(store_path, len(devices))
    store.set(f"up{rank}", "1")
    group = Group(store, rank, devices, timeout_s)
    source = CheckpointLayers(job.pop("path"), job.pop("dtype"), devices[rank])
    calibrate(source, device=devices[rank], group=group, on_layer=lambda i, stats: None, progress=False, **job)


def _child_error(ctx, wait_s: float = 0.0) -> CalibrationProcessError | None:
    """The first child's failure (with its traceback), if one has failed, or does within `wait_s`."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and all(p.exitcode in (None, 0) for p in ctx.processes):
        time.sleep(0.05)
    try:
        ctx.join(timeout=1)
    except ProcessException as e:
        return _failed(ctx, e)
    return None


def _failed(ctx, e: ProcessException) -> CalibrationProcessError:
    rank = e.error_index + 1  # torch counts the children from 0
    text = str(e)
    if "terminated with the following error:" in text:  # torch's header, naming the child's index: dropped
        text = text.split("terminated with the following error:", 1)[1]
    return CalibrationProcessError(
        f"calibration process {rank} of {len(ctx.devices)} (on {ctx.devices[rank]}) failed: {text.strip()}"
    )


def _joined(ctx) -> bool:
    try:
        return ctx.join(timeout=1)
    except ProcessException as e:
        raise _failed(ctx, e) from e


def _wait_up(store, ctx, world: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not store.check([f"up{r}" for r in range(1, world)]):
        err = _child_error(ctx) if any(not p.is_alive() for p in ctx.processes) else None
        if err is not None:
            raise err
        if time.monotonic() > deadline:
            raise CalibrationProcessError(f"calibration processes did not start within {timeout_s:g} s")
        time.sleep(0.05)


@contextmanager
def launch(devices: list[str], calibrate, job: dict, timeout_s: float = TIMEOUT_S):
    """Spawn ranks 1.. on devices[1:] running `calibrate` with `job` (its keyword arguments, plus the
    checkpoint `path` and `dtype`); yield rank 0's Group.

    Every process keeps this one's CPU thread count, even several on the same cores: a float32
    matrix product's summation order depends on the thread count (measured: with 1 thread against 2,
    scores 2e-6 apart on a d=512 model), and the sums must equal one process's to 1e-10."""
    tmp = tempfile.mkdtemp(prefix="nbl-dist-")
    store_path = os.path.join(tmp, "store")
    ctx = mp.start_processes(
        _child,
        args=(store_path, devices, timeout_s, torch.get_num_threads(), calibrate, job),
        nprocs=len(devices) - 1,
        join=False,
        start_method="spawn",
    )
    ctx.devices = devices
    try:
        store = dist.FileStore(store_path, len(devices))
        _wait_up(store, ctx, len(devices), timeout_s)
        try:
            group = Group(store, 0, devices, timeout_s)
            yield group
        except BaseException as e:
            # A collective failed (RuntimeError): a child that closed its sockets may take a moment to exit.
            err = _child_error(ctx, wait_s=5.0 if isinstance(e, RuntimeError) else 0.0)
            if err is not None:
                raise err from e
            raise
        deadline = time.monotonic() + timeout_s
        while not _joined(ctx):  # the children finish with the last layer's reduce
            if time.monotonic() > deadline:
                raise CalibrationProcessError(f"calibration processes did not exit within {timeout_s:g} s")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.terminate()
                p.join(5)
        shutil.rmtree(tmp, ignore_errors=True)
