"""Every subprocess the worker starts (llama.cpp's converter and quantizer, the load check's fresh interpreter)
runs through `run`, so that none outlives the job that started it:

    run(cmd, timeout_s=..., should_stop=...)   -> subprocess.CompletedProcess (text, both streams captured)

- the command runs under a small guard (GUARD, a bare interpreter) that leads a session of its own: the guard,
  the command and whatever it starts are one process group, killed whole (SIGKILL to the group) on a timeout,
  a stop, or any exception in the parent (the sink's Cancelled, a soft time limit, KeyboardInterrupt); a
  command that exits normally leaves no straggler either;
- the group dies with the parent. A parent killed by SIGKILL (the pool's hard time limit, the OOM killer, an
  operator) runs no cleanup, so the kernel must tell: the guard asks for SIGTERM when its parent dies (Linux:
  prctl PR_SET_PDEATHSIG) and then kills the group, grandchildren included. Before this, the converter of a
  killed attempt was re-parented to PID 1 and ran on beside the next attempt's, on the same partial file. The
  guard does it, not a preexec_fn: a preexec_fn is unsafe in a process with threads (the job's heartbeat), and
  PDEATHSIG alone reaches only the direct child. The signal comes when the thread that started the guard
  exits; the pipeline runs in the task's main thread;
- `should_stop` is called every `poll_s` while the command runs: a true answer kills the group and raises
  Stopped; an exception it raises (a job's sink raises Cancelled on a cancel) kills the group and is raised as
  it came. So a cancel stops an export within seconds, not after the converter's hour;
- stdin is /dev/null: nothing a child reads (transformers asks on a terminal before it runs a model's code)
  reaches the worker's terminal. `child_env` is the environment for a child that reads a checkpoint: none of
  the worker's secrets, offline, an empty Hugging Face cache.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

# argv: PARENT_PID CMD...; exits as the command did (128 + N when killed by signal N)
GUARD = """
import ctypes, os, signal, sys
parent, cmd = int(sys.argv[1]), sys.argv[2:]
def end(*_):
    os.killpg(0, signal.SIGKILL)
signal.signal(signal.SIGTERM, end)
prctl = getattr(ctypes.CDLL(None), "prctl", None)
if prctl is not None:
    prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
if os.getppid() != parent:  # the parent died before the prctl: no signal will come
    end()
pid = os.fork()
if pid == 0:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        os.execvp(cmd[0], cmd)
    except OSError as e:
        sys.stderr.write(f"{cmd[0]}: {e}\\n")
        os._exit(127)
code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
sys.exit(code if code >= 0 else 128 - code)
"""


class Stopped(RuntimeError):
    """`should_stop` said to stop; the command's group was killed."""


def venv_python(python: Path | None, default_venv: Path, needs: str, make: str, variable: str = "") -> Path:
    """The interpreter of a tool's own venv (llama.cpp's, llm-compressor's): `python` as configured, else
    `default_venv`'s; ValueError saying what `needs` it and how to build it when there is none."""
    exe = Path(python) if python else default_venv / "bin" / "python"
    if not exe.is_file():
        raise ValueError(
            f"{needs}, and {exe} is missing: run `make {make}`" + (f" or set {variable}" if variable else "")
        )
    return exe


def child_env(hf_home: str) -> dict[str, str]:
    """The worker's environment minus anything secret-looking, offline, with an empty HF cache at `hf_home`: what
    a child reading a checkpoint gets (llama.cpp's converter, the load check), should the checkpoint run code."""
    secret = ("TOKEN", "SECRET", "PASSWORD", "KEY", "DATABASE_URL", "BROKER_URL")
    env = {k: v for k, v in os.environ.items() if not any(s in k.upper() for s in secret)}
    env.update(HF_HOME=hf_home, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONNOUSERSITE="1")
    env.pop("PYTHONPATH", None)
    return env


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # pgid == the guard's pid (a new session)


def run(
    cmd: list[str], timeout_s: float, should_stop: Callable[[], object] | None = None, poll_s: float = 1.0, **popen_kw
) -> subprocess.CompletedProcess:
    """`cmd` to its end, or killed with its group; subprocess.TimeoutExpired past `timeout_s`, Stopped when
    `should_stop` answers true. `popen_kw`: cwd, env."""
    guarded = [sys.executable, "-I", "-S", "-c", GUARD, str(os.getpid()), *map(str, cmd)]
    proc = subprocess.Popen(
        guarded,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        **popen_kw,
    )
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                out, err = proc.communicate(timeout=max(0.0, min(poll_s, deadline - time.monotonic())))
                break
            except subprocess.TimeoutExpired:
                pass  # communicate may be called again: nothing read so far is lost
            if time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(cmd, timeout_s)
            if should_stop is not None and should_stop():
                raise Stopped(f"{os.path.basename(str(cmd[0]))} stopped on request")
    finally:
        _kill_group(proc)  # whatever ended the wait; after a normal exit, any straggler
        if proc.returncode is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.communicate(timeout=10)  # reaped, pipes closed
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
