"""Calibration's heap policy (heap.py): large activations in their own mappings inside the block, the
heap (glibc's ceiling) after it. Each check runs in a fresh process: in a long test session the heap may
hold a free 9 MB chunk from earlier tests, which glibc hands out before it maps anything."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from worker.engine.calibration.heap import _LIBC

pytestmark = pytest.mark.skipif(sys.platform != "linux" or _LIBC is None, reason="glibc's malloc only")

ROOT = Path(__file__).resolve().parents[4]
SCRIPT = """
import json, sys
import torch
sys.path[:0] = [{root!r}, {tests!r}]
from test_host_memory import _mapped
from worker.engine.calibration.heap import AFTER, _set, calibration_heap, release_free_memory

NINE_MB = (9 << 20) // 4  # float32 elements: above calibration's 8 MB threshold, below glibc's 32 MB ceiling
seen = {{}}
_set(AFTER)  # as after an earlier calibration (a fresh process's 128 KB threshold would map it anyway)
before = torch.empty(NINE_MB)
seen["before"] = _mapped(before)
del before
release_free_memory()  # as calibration trims once a layer: no free 9 MB left in the heap
try:
    with calibration_heap():
        inside = torch.empty(NINE_MB)
        seen["inside"], seen["small_inside"] = _mapped(inside), _mapped(torch.empty(1 << 18))
        {body}
except RuntimeError:
    seen["raised"] = True
seen["after"] = _mapped(torch.empty(NINE_MB))
print(json.dumps(seen))
"""


def _run(body: str = "pass") -> dict:
    code = SCRIPT.format(root=str(ROOT), tests=str(ROOT / "tests" / "worker" / "engine" / "calibration"), body=body)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]  # the child's traceback, not just its exit code
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_large_allocations_get_their_own_mapping_only_during_calibration():
    seen = _run()
    assert seen == {"before": False, "inside": True, "small_inside": False, "after": False}


def test_the_policy_is_restored_when_calibration_raises():
    seen = _run('raise RuntimeError("a cancelled job")')
    assert seen == {"before": False, "inside": True, "small_inside": False, "raised": True, "after": False}
