"""`--devices` reaches calibration: `nbl compress --devices cpu,cpu` runs two processes and prints the
scores of one; a job run by the worker's task calibrates on Settings.devices (NBL_DEVICES, set by
`nbl worker --devices`); a device this machine lacks is refused up front."""

import json
import os
import subprocess
import sys

import pytest
from testkit.models import save_tiny_checkpoint

from cli.main import main
from worker.engine.calibration import distributed


@pytest.fixture
def launches(monkeypatch):
    """The device lists data-parallel calibration was launched with (the real launch runs)."""
    seen, real = [], distributed.launch

    def spy(devices, calibrate, job, timeout_s=distributed.TIMEOUT_S):
        seen.append(list(devices))
        return real(devices, calibrate, job, timeout_s)

    monkeypatch.setattr(distributed, "launch", spy)
    return seen


def _compress(capsys, tiny_dir, text_file, *extra):
    code = main(
        [
            "compress",
            "--model",
            str(tiny_dir),
            "--dataset",
            str(text_file),
            "--num-samples",
            "11",
            "--seq-len",
            "32",
            "--batch-size",
            "2",
            "--k",
            "1",
            "--json",
            "--no-cache",
            *extra,
        ]
    )
    out = capsys.readouterr()
    return code, out.out, out.err


def test_compress_on_two_cpu_processes_prints_the_scores_of_one(tiny_dir, text_file, capsys, launches):
    code, out, err = _compress(capsys, tiny_dir, text_file, "--devices", "cpu")
    assert code == 0, err
    one = json.loads(out)
    assert launches == []
    code, out, err = _compress(capsys, tiny_dir, text_file, "--devices", "cpu,cpu")
    assert code == 0, err
    two = json.loads(out)
    assert launches == [["cpu", "cpu"]]
    assert two["outputs"][0]["replaced_layers"] == one["outputs"][0]["replaced_layers"]
    for got, want in zip(two["scores"], one["scores"], strict=True):
        assert got["attn"].keys() == want["attn"].keys()
        for key, value in want["attn"].items():  # a non-finite score (a singular layer's cond) is null in JSON
            assert got["attn"][key] == (None if value is None else pytest.approx(value, rel=1e-10)), key


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--devices", "cuda:0"], "0 CUDA device"),
        (["--devices", "cpu,tpu"], "use cpu or cuda"),
        (["--devices", "cpu,cpu", "--device", "cpu"], "not both"),
    ],
)
def test_compress_refuses_devices_it_cannot_use(tiny_dir, text_file, capsys, flags, message):
    code, _, err = _compress(capsys, tiny_dir, text_file, *flags)
    assert code == 2 and message in err


def test_worker_refuses_a_device_this_machine_lacks(tmp_path):
    env = {**os.environ, "NBL_HOME": str(tmp_path), "CUDA_VISIBLE_DEVICES": ""}
    run = subprocess.run(
        [sys.executable, "-m", "cli.main", "worker", "--devices", "cpu,tpu"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2 and "'tpu': use cpu or cuda" in run.stderr
    run = subprocess.run(
        [sys.executable, "-m", "cli.main", "worker"],
        env={**env, "NBL_DEVICES": "cuda:3"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2 and "'cuda:3': 0 CUDA device(s) visible" in run.stderr


def test_a_job_calibrates_on_the_workers_devices(sqlite_clean_url, settings_for, team_key_for, monkeypatch, launches):
    from fastapi.testclient import TestClient

    from service.api import create_app
    from worker import pipeline, tasks

    settings = settings_for(sqlite_clean_url, devices="cpu,cpu")
    settings.ensure_dirs()
    save_tiny_checkpoint(settings.models_dir / "tiny")
    monkeypatch.setattr(tasks, "settings", settings)
    monkeypatch.setattr(tasks, "_sessions", None)
    monkeypatch.setattr(
        pipeline, "check", lambda outputs, refs, sink, timeout_s, devices=None: None
    )  # fresh-process load check
    job = {
        "model": {"id": "local:tiny"},
        "calibration": {"dataset": "c4", "num_samples": 10, "seq_len": 32},
        "compression": {"mode": "attn", "k": 1},
        "evaluation": {"perplexity": []},
        "publish": {"local_dir": "out"},
    }
    with TestClient(create_app(settings)) as client:
        auth = team_key_for(settings, "alpha")
        resp = client.post("/v1/jobs", json=job, headers=auth)
        assert resp.status_code == 201, resp.text
        tasks.run_job(resp.json()["id"])
        done = client.get(f"/v1/jobs/{resp.json()['id']}", headers=auth).json()
    assert done["status"] == "succeeded", done
    assert launches == [["cpu", "cpu"]]
