"""bench/gpu_calibration.py runs where no GPU is (issue 12 §6): the tiny preset on the CPU, in a subprocess as a
user would run it, and its figures are the engine's: the CCA bounds it reports are those of the engine's
calibration of the same model and tokens."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[4]


@pytest.mark.slow
def test_the_gpu_benchmark_runs_on_the_cpu_with_the_tiny_preset(tmp_path):
    out = tmp_path / "gpu.json"
    subprocess.run(
        [
            sys.executable,
            "bench/gpu_calibration.py",
            "--preset",
            "tiny",
            "--device",
            "cpu",
            "--num-samples",
            "6",
            "--seq-len",
            "32",
            "--out",
            str(out),
        ],
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=300,
    )
    got = json.loads(out.read_text())
    assert got["tokens"] == 6 * 32 and got["shape"]["hidden_size"] == 64 and got["dtype"] == "float32"
    assert set(got["calibration_over_forward"]) == {"float32", "tf32"}
    assert all(v > 0 for v in got["seconds"].values())
    assert len(got["cca_bounds"]["float32"]) == 2  # one bound per layer
    assert got["cca_bounds"]["tf32"] == got["cca_bounds"]["float32"]  # TF32 changes nothing on a CPU

    # the same model (seed 0) and tokens calibrated directly by the engine give the same bounds
    sys.path.insert(0, str(REPO / "bench"))
    import gpu_calibration as bench

    from worker.engine.calibration.calibrate import calibrate, holdout_count
    from worker.engine.scoring.scores import score_layer

    torch.manual_seed(0)
    model, _ = bench.build("tiny", None, 32, torch.float32, torch.device("cpu"))
    blocks = torch.randint(256, (6, 32), generator=torch.Generator().manual_seed(0))
    direct = calibrate(model, blocks, 2048 // 32, holdout_count(6), progress=False, modes=("attn",))
    assert [score_layer(s)["attn"].cca_bound for s in direct.stats] == got["cca_bounds"]["float32"]
