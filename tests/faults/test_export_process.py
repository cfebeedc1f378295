"""The GGUF converter of a real worker's job (issue 35 finding 4): SIGKILL of the pool child that runs the export
takes the converter with it (it used to be re-parented to PID 1 and run beside attempt 2's, on the same partial
file); attempt 2 converts into a partial of its own, with attempt 1's cleared; a cancel during the export kills
the converter within seconds and the job ends cancelled (it used to wait for the converter, up to an hour).
A fake converter that sleeps (tests/testkit/fake_converter.py) stands in for llama.cpp's: the fault worker is prefork on
Postgres and a private Redis, as in test_worker_loss.py."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from faultlib import TERMINAL, deadline, job_body
from testkit.fake_converter import fake_converter, in_session, kill_quietly, runs, session, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("hard_timeout")]


def pool_child(pid: int) -> int:
    """The nearest ancestor of `pid` that runs the fault worker: the prefork child running the job."""
    while pid > 1:
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        if b"fault_worker.py" in Path(f"/proc/{pid}/cmdline").read_bytes():
            return pid
    raise AssertionError("the converter does not run under the worker")


@deadline(240)
def test_the_converter_dies_with_its_worker_and_on_a_cancel(pg_url, redis_server, cluster_factory, tmp_path):
    exe, log = fake_converter(tmp_path / "gguf-venv", sleep=120)
    # a lease far longer than the test: attempt 2 comes from Celery's re-queue and the takeover, not an expiry
    c = cluster_factory(pg_url, redis_server.url, NBL_LEASE_SECONDS="60", NBL_GGUF_PYTHON=str(exe))
    auth = c.auth()
    body = {
        **job_body("gguf-export"),
        "compression": {"mode": "block", "form": "fold", "k": 1},
        "publish": {"local_dir": "gguf-export", "formats": ["safetensors", "gguf:f16"]},
    }
    resp = c.client.post("/v1/jobs", json=body, headers=auth)
    assert resp.status_code == 201, resp.text
    job_id = resp.json()["id"]
    c.start_worker()

    def started(n: int):
        job = c.job(auth, job_id)
        assert job["status"] not in TERMINAL, f"{job['status']} before its converter ran: {job['error']}"
        return runs(log) if len(runs(log)) == n else None

    pids = []
    try:
        [(first, _, partial1)] = wait_for(lambda: started(1), 120, "attempt 1's converter", every=0.2)
        pids.append(first)
        sid1 = session(first)
        os.kill(pool_child(first), signal.SIGKILL)
        wait_for(lambda: not in_session(sid1), 10, "attempt 1's converter to die with the pool child")

        wait_for(lambda: started(2), 120, "attempt 2's converter", every=0.2)
        second, _, partial2 = runs(log)[1]
        pids.append(second)
        sid2 = session(second)
        assert c.job(auth, job_id)["attempt"] == 2
        assert Path(partial2).name == Path(partial1).name == "model-f16.gguf"
        assert Path(partial2).parent != Path(partial1).parent  # a directory of its own
        assert not Path(partial1).parent.exists()  # attempt 1's, cleared before attempt 2 exported

        resp = c.client.post(f"/v1/jobs/{job_id}/cancel", headers=auth)
        assert resp.status_code == 200 and resp.json()["status"] == "cancelling", resp.text
        job = c.wait_status(auth, job_id, timeout=20)  # the converter sleeps 120 s
        assert job["status"] == "cancelled" and job["artifacts"] == [], job
        assert not in_session(sid2)
        assert not (c.settings.publish_dir / "faults" / "gguf-export").exists()
    finally:
        kill_quietly(*pids)
