"""`nbl admin create-key`, `nbl submit`, `nbl wait` against a real server on the embedded default
(SQLite under a fresh NBL_HOME)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from cli.main import main
from service.api import create_app
from service.core.db import make_engine, make_sessionmaker
from service.core.settings import Settings
from service.jobs import lease, states, store

REPO = Path(__file__).resolve().parents[2]


def create_key(home: Path, team: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "NBL_HOME": str(home), "PYTHONPATH": str(REPO)}
    env.pop("DATABASE_URL", None)
    return subprocess.run(
        [sys.executable, "-m", "cli.main", "admin", "create-key", "--team", team, "--create-team"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_create_key_on_a_fresh_home(tmp_path, monkeypatch, capsys):
    """As a user runs it: a new process, a fresh NBL_HOME (migrated on the way), the key alone on
    the last line; a second key for the same team reuses the team (no --create-team needed)."""
    home = tmp_path / "home"
    out = create_key(home, "ci")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    key = lines[-1]
    assert key.startswith("nbl_") and key.strip() == key and len(key) > 40 and " " not in key
    assert any("migrated" in line for line in lines[:-1]) and "team: ci (created)" in out.stdout

    monkeypatch.setenv("NBL_HOME", str(home))
    monkeypatch.delenv("DATABASE_URL", raising=False)
    assert main(["admin", "create-key", "--team", "ci"]) == 0
    again = capsys.readouterr().out
    assert "team: ci (existing)" in again and "migrated" not in again
    assert again.strip().splitlines()[-1] not in (key, "")


@pytest.fixture
def served(tmp_path, live_server, monkeypatch, capsys):
    """A fresh NBL_HOME, a key from `nbl admin create-key` (which migrates the fresh DB), a live server."""
    home = tmp_path / "home"
    monkeypatch.setenv("NBL_HOME", str(home))
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.delenv("BROKER_URL", raising=False)
    assert main(["admin", "create-key", "--team", "ci", "--create-team"]) == 0
    key = capsys.readouterr().out.strip().splitlines()[-1]
    settings = Settings()
    url = live_server(create_app(settings))
    monkeypatch.setenv("NBL_API_URL", url)
    monkeypatch.setenv("NBL_API_KEY", key)
    engine = make_engine(settings)
    yield settings, make_sessionmaker(engine)
    engine.dispose()


def submit_json(capsys, *argv) -> dict:
    capsys.readouterr()
    assert main(["submit", *argv, "--json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_submit_and_wait(served, capsys, tmp_path):
    settings, sessions = served
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "model:\n  id: HuggingFaceTB/SmolLM2-135M-Instruct\ncompression:\n  k: [2, 4]\n"
        "calibration:\n  num_samples: 32\nmetadata:\n  pipeline: ci-1\n"
    )
    job = submit_json(capsys, str(spec), "--seq-len", "512", "--mode", "block")
    assert job["status"] == "queued" and job["metadata"] == {"pipeline": "ci-1"}
    assert job["spec"]["calibration"]["num_samples"] == 32 and job["spec"]["calibration"]["seq_len"] == 512
    assert job["spec"]["compression"] == {"mode": "block", "method": "nbl", "criterion": "cosine", "k": [2, 4]}

    # Same idempotency key twice: the same job.
    a = submit_json(capsys, "--model", "acme/m", "--k", "4", "--idempotency-key", "pipeline-9")
    b = submit_json(capsys, "--model", "acme/m", "--k", "4", "--idempotency-key", "pipeline-9")
    assert a["id"] == b["id"]

    # A job that never ends: timeout, exit 3.
    assert main(["wait", job["id"], "--timeout", "0.5", "--interval", "0.1"]) == 3

    # Drive it to success as the worker would: exit 0 and the metrics table.
    with sessions() as s:
        token = lease.claim_job(s, job["id"], 60)
        store.set_progress(s, job["id"], "evaluate", 0.9, lease_token=token)
        store.save_metrics(s, job["id"], "base", {"perplexity/wikitext2/ppl": 20.25}, lease_token=token)
        store.save_metrics(s, job["id"], "k4", {"perplexity/wikitext2/ppl": 23.5}, lease_token=token)
        states.finish(s, job["id"], token, "succeeded")
    capsys.readouterr()
    assert main(["wait", job["id"], "--interval", "0.1"]) == 0
    out = capsys.readouterr()
    assert (
        "succeeded" in out.out and "wikitext2 ppl" in out.out
    )  # the typed result's table (cli/client/result_table.py)
    row = next(line for line in out.out.splitlines() if line.startswith("wikitext2 ppl"))
    assert row.split()[2:4] == ["20.25", "23.5"], out.out
    assert any(line.startswith("succeeded  evaluate") for line in out.err.splitlines()), out.err  # its stage line

    # Failed -> 1, cancelled -> 2.
    with sessions() as s:
        token = lease.claim_job(s, a["id"], 60)
        states.finish(s, a["id"], token, "failed", error_type="user", error_message="k=4 >= layers")
    assert main(["wait", a["id"], "--quiet"]) == 1
    assert "k=4 >= layers" in capsys.readouterr().out
    c = submit_json(capsys, "--model", "acme/m", "--k", "1")
    r = httpx.post(
        f"{os.environ['NBL_API_URL']}/v1/jobs/{c['id']}/cancel",
        headers={"Authorization": f"Bearer {os.environ['NBL_API_KEY']}"},
    )
    assert r.json()["status"] == "cancelled"
    assert main(["wait", c["id"], "--quiet"]) == 2


def test_client_errors(served, capsys, monkeypatch):
    assert main(["submit", "--model", "../../etc", "--k", "4"]) == 4  # the API refused it
    err = capsys.readouterr().err
    assert "not valid" in err and "model.id" in err
    assert main(["wait", "job_" + "0" * 32, "--quiet"]) == 4
    assert "Not found" in capsys.readouterr().err
    assert main(["submit", "--k", "4"]) == 2  # no model: a usage error
    monkeypatch.setenv("NBL_API_KEY", "nbl_wrong")
    assert main(["wait", "job_" + "0" * 32, "--quiet"]) == 4
    assert "401" in capsys.readouterr().err
