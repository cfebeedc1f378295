"""`nbl estimate`: a directory holding only config.json, local:NAME, a Hub id that cannot be fetched."""

from __future__ import annotations

import json

import pytest
from testkit.model_configs import LLAMA_70B, TINY, write_config

from cli.main import main

GiB = 2**30


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main(["estimate", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_70b_config_dir_fits_one_80gb_gpu(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("NBL_HOME", str(tmp_path / "home"))
    model = write_config(tmp_path / "llama-70b", LLAMA_70B)
    code, out, _ = run(capsys, "--model", str(model), "--num-samples", "256", "--seq-len", "2048", "--k", "8", "--json")
    assert code == 0
    est = json.loads(out)
    # one layer at a time: the smallest GPU class holds the calibration, and so one 80 GB GPU does
    assert est["worker_class"] == "nbl-gpu-24g" and est["devices"] == ["cuda:0"]
    assert 0 < est["device_bytes"] <= 24 * GiB
    assert est["disk_bytes"] == sum(est["disk"].values()) and est["disk"]["download"] == 141_107_412_992
    assert est["seconds"][0] < est["seconds"][1]
    code, out, _ = run(capsys, "--model", str(model), "--num-samples", "256", "--seq-len", "2048", "--k", "8")
    assert code == 0 and "worker class: nbl-gpu-24g" in out and "peak device memory" in out
    code, out, _ = run(
        capsys,
        "--model",
        str(model),
        "--num-samples",
        "256",
        "--seq-len",
        "2048",
        "--k",
        "8",
        "--devices",
        "cuda:0",
        "--json",
    )
    assert code == 0 and json.loads(out)["device_bytes"] <= 80 * GiB


def test_cpu_devices_put_everything_on_the_host(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("NBL_HOME", str(tmp_path / "home"))
    model = write_config(tmp_path / "tiny", TINY)
    _, out, _ = run(
        capsys, "--model", str(model), "--num-samples", "8", "--seq-len", "32", "--k", "1", "--devices", "cpu", "--json"
    )
    cpu = json.loads(out)
    _, out, _ = run(
        capsys,
        "--model",
        str(model),
        "--num-samples",
        "8",
        "--seq-len",
        "32",
        "--k",
        "1",
        "--devices",
        "cuda:0",
        "--json",
    )
    gpu = json.loads(out)
    assert cpu["device_bytes"] == 0 and cpu["host_bytes"] > 0 and gpu["device_bytes"] > 0
    assert cpu["worker_class"] == gpu["worker_class"] == "nbl-cpu"  # where a job with these options goes


def test_local_name(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("NBL_HOME", str(tmp_path / "home"))
    write_config(tmp_path / "home" / "models" / "tiny", TINY)
    code, out, _ = run(capsys, "--model", "local:tiny", "--k", "1", "--num-samples", "8", "--seq-len", "32", "--json")
    assert code == 0 and json.loads(out)["worker_class"] == "nbl-cpu"
    code, _, err = run(capsys, "--model", "local:nope", "--k", "1")
    assert code == 2 and "no model 'local:nope'" in err


def test_hub_id_offline_is_a_clear_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("NBL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:1")  # nothing listens there
    code, out, err = run(capsys, "--model", "meta-llama/Llama-3.1-70B", "--k", "8")
    assert code == 2 and out == ""
    assert "cannot fetch config.json from the Hub" in err and "give a directory holding its config.json" in err


def test_a_70b_job_goes_to_one_80gb_gpu_and_measured_selection_is_priced(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("NBL_HOME", str(tmp_path / "home"))
    model = write_config(tmp_path / "llama-70b", LLAMA_70B)
    common = ["--model", str(model), "--num-samples", "256", "--seq-len", "2048", "--job"]
    code, out, _ = run(capsys, *common, "--k", "8", "--json")
    assert code == 0
    job = json.loads(out)
    assert job["worker_class"] == "nbl-gpu-80g" and job["disk"]["offload"] == 0, job
    assert set(job["phases"]) == {"calibrate", "save", "check", "evaluate"}
    code, out, _ = run(capsys, *common, "--k", "auto", "--criterion", "greedy", "--selection-samples", "32", "--json")
    assert code == 0
    auto = json.loads(out)
    assert "select" in auto["phases"] and auto["seconds"][0] > job["seconds"][0]
    assert auto["disk"]["outputs"] == job["disk"]["outputs"] > 0  # k auto makes one output, as one k does
    # the same job on a GPU said to hold 24 GiB, with a 64 GiB host: the weights that fit neither go to disk
    code, out, _ = run(
        capsys, *common, "--k", "8", "--devices", "cuda:0", "--device-memory", "24", "--host-memory", "64", "--json"
    )
    small = json.loads(out)
    assert code == 0 and small["disk"]["offload"] > 50e9 and small["device_bytes"] <= 24 * GiB
    for bad in ("0", "inf", "nan", "-1", "lots"):
        with pytest.raises(SystemExit) as exit_:
            main(["estimate", *common, "--k", "8", "--device-memory", bad])
        assert exit_.value.code == 2 and "expected a positive number of GiB" in capsys.readouterr().err


def test_quantize_adds_its_phase_and_time(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("NBL_HOME", str(tmp_path / "home"))
    model = write_config(tmp_path / "tiny", TINY)
    common = ["--model", str(model), "--k", "1", "--form", "fold", "--mode", "block", "--num-samples", "8"]
    figures = {}
    for name, extra in {
        "plain": [],
        "compress": ["--quantize", "w8a8"],
        "job": ["--quantize", "w8a8", "--job"],
    }.items():
        code, out, err = run(capsys, *common, "--seq-len", "32", "--out", str(tmp_path / "o"), *extra, "--json")
        assert code == 0, err
        figures[name] = json.loads(out)
    assert "quantize" not in figures["plain"]["phases"]
    assert figures["compress"]["phases"]["quantize"]["host"] > 0
    # compress quantizes the output alone; a job the base too, and evaluates both quantized models
    assert figures["plain"]["seconds"][1] < figures["compress"]["seconds"][1] < figures["job"]["seconds"][1]
    code, out, _ = run(capsys, *common, "--seq-len", "32", "--quantize", "fp8-dynamic", "--job")
    assert code == 0 and "quantize   device" in out
