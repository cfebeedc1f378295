"""What a job leaves on disk (issue 10, findings 3 and 5), through the real task: the API stores the job,
`worker.tasks.run_job` runs in this process with this test's Settings (as
tests/worker/engine/loading/test_model_safety.py does), on the embedded SQLite database and a tiny Llama stored as
`local:tiny`.

- local outputs by team: two teams with one local_dir both succeed, side by side; the same team again
  fails `user` naming the conflict and leaves the first output byte-equal; overwrite=true replaces it;
- the scratch directory NBL_HOME/jobs/<id> (checkpoints before publishing) is gone once the job
  succeeded, failed or was cancelled; it held the outputs when publishing began;
- NBL_STATS_CACHE_MAX_BYTES=0: no statistics cache is kept.

The fresh-process load check is skipped (tests/worker/publish/test_loadcheck.py covers it): not what these
tests study, and 5 s an output.
"""

from __future__ import annotations

import json

from publish_helpers import tree

from service.core.paths import scratch_dir

JOB = {
    "model": {"id": "local:tiny"},
    "calibration": {"dataset": "c4", "num_samples": 10, "seq_len": 32},
    "compression": {"mode": "attn", "k": 1},
    "evaluation": {"perplexity": []},
    "publish": {"local_dir": "smol"},
}


def run(client, auth, body=JOB) -> dict:
    from worker import tasks

    resp = client.post("/v1/jobs", json=body, headers=auth)
    assert resp.status_code == 201, resp.text
    tasks.run_job(resp.json()["id"])
    return client.get(f"/v1/jobs/{resp.json()['id']}", headers=auth).json()


def test_teams_publish_side_by_side_a_second_job_never_replaces_the_first(here):
    settings, client, auth, seen, _ = here()
    a = run(client, auth["alpha"])
    b = run(client, auth["beta"])
    for job, team in ((a, "alpha"), (b, "beta")):
        assert job["status"] == "succeeded", job
        assert [x["uri"] for x in job["artifacts"]] == [f"/v1/jobs/{job['id']}/outputs/1/files"]  # never a server path
        out = settings.publish_dir / team / "smol"
        assert (out / "model.safetensors").is_file()
        assert json.loads((out / ".nbl-owner.json").read_text()) == {"team": team, "job_id": job["id"]}
    first = tree(settings.publish_dir / "alpha" / "smol")

    again = run(client, auth["alpha"])
    assert again["status"] == "failed" and again["error"]["type"] == "user", again
    assert f"local_dir 'smol' already holds the output of job {a['id']}" in again["error"]["message"]
    assert str(settings.publish_dir) not in again["error"]["message"]
    assert tree(settings.publish_dir / "alpha" / "smol") == first  # byte-equal

    forced = run(client, auth["alpha"], {**JOB, "publish": {"local_dir": "smol", "overwrite": True}})
    assert forced["status"] == "succeeded", forced
    owner = json.loads((settings.publish_dir / "alpha" / "smol" / ".nbl-owner.json").read_text())
    assert owner["job_id"] == forced["id"]
    assert tree(settings.publish_dir / "beta" / "smol")[".nbl-owner.json"] != owner  # beta's untouched

    # retention: each job's scratch held its output when publishing began, and is gone now it ended
    for job in (a, b, again, forced):
        assert seen[job["id"]] == ["model.safetensors"], seen
        assert not scratch_dir(settings, job["id"]).exists(), job["status"]
    assert len(list(settings.stats_dir.glob("*.stats"))) == 1  # one calibration, cached


def test_a_cancelled_job_leaves_no_scratch_and_no_cache_when_the_cap_is_zero(here):
    settings, client, auth, seen, hooks = here(stats_cache_max_bytes=0)
    resp = client.post("/v1/jobs", json={**JOB, "publish": {"local_dir": "gone"}}, headers=auth["alpha"])
    job_id = resp.json()["id"]
    hooks[job_id] = lambda: client.post(f"/v1/jobs/{job_id}/cancel", headers=auth["alpha"])  # while running
    from worker import tasks

    assert tasks.run_job(job_id) == "cancelled"
    job = client.get(f"/v1/jobs/{job_id}", headers=auth["alpha"]).json()
    assert job["status"] == "cancelled" and job["artifacts"] == [], job
    assert seen[job_id] == ["model.safetensors"] and not scratch_dir(settings, job_id).exists()
    assert not (settings.publish_dir / "alpha" / "gone").exists()
    assert list(settings.stats_dir.iterdir()) == []  # NBL_STATS_CACHE_MAX_BYTES=0: nothing cached
