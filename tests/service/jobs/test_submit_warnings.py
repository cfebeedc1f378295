"""Expensive defaults are said at submit (issue 14 §3): a request without `calibration` or `evaluation`
gets the documented defaults and a `warnings` list naming what they cost; a request that gives both gets
none. The warnings are the job's `warning` events, so GET, the list and the events endpoint agree."""

from __future__ import annotations

import json

from testkit.service_lib import TINY_CONFIG, body

from nbl import recipe as R
from nbl.request import JobCreate
from service.jobs.submit_warnings import submit_warnings

CHEAP = {"calibration": {"num_samples": 8, "seq_len": 64}, "evaluation": {"perplexity": [], "max_tokens": 512}}


def test_defaults_left_out_are_named_with_their_cost():
    spec = JobCreate.model_validate(body(k=1))
    got = submit_warnings(spec, {"seconds": [5400.0, 14400.0], "worker_class": "nbl-cpu"})
    assert len(got) == 2
    assert got[0].startswith(f"calibration not given: the default is {R.NUM_SAMPLES} x {R.SEQ_LEN} = 524,288 tokens")
    assert "estimated 1.5 h to 4.0 h on nbl-cpu" in got[0]
    assert got[1].startswith("evaluation not given: the default is wikitext2 perplexity on the whole test set")
    assert submit_warnings(spec, None)[0].endswith("to calibrate on less")  # no estimate: no figures


def test_a_request_that_gives_both_gets_none_unless_it_is_slow():
    spec = JobCreate.model_validate(body(k=1, **CHEAP))
    assert submit_warnings(spec, {"seconds": [60.0, 600.0], "worker_class": "nbl-cpu"}) == []
    assert submit_warnings(spec, {"seconds": [7200.0, 9000.0], "worker_class": None}) == [
        "this job is estimated to take 2.0 h to 2.5 h"
    ]


def test_the_api_answers_with_the_warnings_and_keeps_them(client, auth, settings):
    d = settings.models_dir / "tiny"
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps(TINY_CONFIG))
    r = client.post("/v1/jobs", json=body(k=1, model="local:tiny", calibration={"seq_len": 64}), headers=auth)
    assert r.status_code == 201, r.text
    job = r.json()
    assert [w.split(":")[0] for w in job["warnings"]] == ["evaluation not given"]
    assert client.get(f"/v1/jobs/{job['id']}", headers=auth).json()["warnings"] == job["warnings"]
    listed = client.get("/v1/jobs", headers=auth).json()["data"]
    assert [j["warnings"] for j in listed if j["id"] == job["id"]] == [job["warnings"]]
    events = client.get(f"/v1/jobs/{job['id']}/events", headers=auth).json()["data"]
    assert [(e["kind"], e["stage"], e["message"]) for e in events if e["kind"] == "warning"] == [
        ("warning", "submit", job["warnings"][0])
    ]

    quiet = client.post("/v1/jobs", json=body(k=1, model="local:tiny", **CHEAP), headers=auth)
    assert quiet.status_code == 201 and quiet.json()["warnings"] == []


def test_a_statistics_cache_over_the_cap_is_said_at_submit():
    spec = JobCreate.model_validate(body(k=1, **CHEAP))
    big = {"seconds": [60.0, 600.0], "disk": {"stats_cache": 215 * 10**9}}
    (said,) = submit_warnings(spec, big, 50 * 10**9)
    assert "(215.0 GB) are over the statistics cache's cap (50.0 GB, NBL_STATS_CACHE_MAX_BYTES)" in said
    assert submit_warnings(spec, big, 300 * 10**9) == []  # it fits: kept
    assert (
        submit_warnings(spec, big, 0) == [] and submit_warnings(spec, big) == []
    )  # no cache at all: nothing kept anyway


def test_the_api_warns_when_the_cap_is_below_the_estimate(client, auth, settings):
    d = settings.models_dir / "tiny"
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps(TINY_CONFIG))
    settings.stats_cache_max_bytes = 1  # below any model's statistics
    job = client.post("/v1/jobs", json=body(k=1, model="local:tiny", **CHEAP), headers=auth).json()
    assert [w.split(" (")[0] for w in job["warnings"]] == ["this job's calibration statistics"], job["warnings"]
    assert job["estimate"]["disk"]["stats_cache"] > 1
