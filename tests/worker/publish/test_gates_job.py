"""Quality gates through the real parts (Postgres, Redis, a `celery worker` process, a tiny Llama as
`local:tiny`): the worker checks each output's evaluation against the base and publishes only those that
pass; when none does, the job fails with error.type "quality", publishes nothing, and `nbl wait` exits 5.
The run's warnings (too few calibration tokens, a truncated evaluation) are events and on the card.

The limits come from an ungated job's own numbers (the same model, data and seeds give the same
metrics): a limit between the two outputs' perplexity rises keeps exactly the better one.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from huggingface_hub import ModelCard
from publish_helpers import run_jobs, start_worker, stop

from cli.main import main
from service.api import create_app

PPL = "perplexity/wikitext2/ppl"
JOB = {
    "model": {"id": "local:tiny"},
    "calibration": {"dataset": "c4", "num_samples": 10, "seq_len": 32},
    "compression": {"mode": "attn", "method": "drop", "criterion": "cca", "k": [1, 3]},
    "evaluation": {"perplexity": ["wikitext2"], "max_tokens": 1024},
}


def rise(metrics: dict, variant: str) -> float:
    return metrics[variant][PPL] / metrics["base"][PPL] - 1


def test_gates_publish_only_passing_outputs_and_fail_the_job_when_none_passes(
    deployment, tmp_path, live_server, capsys
):
    settings, auth = deployment
    log = tmp_path / "worker.log"
    worker = start_worker(settings, log)
    try:
        with TestClient(create_app(settings)) as c:
            (free,) = run_jobs(c, auth, [{**JOB, "publish": {"local_dir": "free"}}], worker, log)
            assert free["status"] == "succeeded" and free["gates"] is None, free
            r1, r3 = rise(free["metrics"], "k1"), rise(free["metrics"], "k3")
            better, worse = (1, 3) if r1 < r3 else (3, 1)
            low, high = sorted((r1, r3))
            assert high > 0 and high - low > 1e-3, (r1, r3)  # dropping layers of the model moved its perplexity
            limit = max(low, 0.0) + (high - max(low, 0.0)) / 2  # between the two: one passes, one fails

            partial, none = run_jobs(
                c,
                auth,
                [
                    {**JOB, "gates": {"max_ppl_increase": {"wikitext2": limit}}, "publish": {"local_dir": "partial"}},
                    {
                        **JOB,
                        "compression": {**JOB["compression"], "k": worse},
                        "gates": {"max_ppl_increase": {"wikitext2": limit}},
                        "publish": {"local_dir": "none"},
                    },
                ],
                worker,
                log,
            )
            events = c.get(f"/v1/jobs/{partial['id']}/events", headers=auth).json()["data"]
    finally:
        stop(worker)

    # partial pass: succeeded, only the passing output published (in its k{K} folder, as the job asked two)
    assert partial["status"] == "succeeded", (partial, log.read_text()[-4000:])
    assert partial["metrics"]["k1"][PPL] == pytest.approx(free["metrics"]["k1"][PPL])  # the same numbers again
    gates = partial["gates"]
    assert gates["passed"] is True
    assert {(g["output"], g["passed"]) for g in gates["checks"]} == {(f"k{better}", True), (f"k{worse}", False)}
    for g in gates["checks"]:
        assert g["metric"] == PPL and g["base"] == pytest.approx(partial["metrics"]["base"][PPL])
        assert g["limit"] == pytest.approx(g["base"] * (1 + limit)) and g["allowed"] == pytest.approx(limit)
    assert [a["k"] for a in partial["artifacts"]] == [better]
    root = settings.publish_dir / "alpha" / "partial"
    assert (root / f"k{better}" / "model.safetensors").is_file() and not (root / f"k{worse}").exists()
    warnings = [e["message"] for e in events if e["kind"] == "warning"]
    assert any(w.startswith(f"k={worse} is not published") for w in warnings), warnings

    # the run's warnings (issue 13 §3): 10 x 32 calibration tokens < 10·d = 640; wikitext2 cut at 1,024 tokens
    assert any(w.startswith("calibration on 320 tokens, fewer than 10·d = 640") for w in warnings), warnings
    (cut,) = [w for w in warnings if w.startswith("evaluation truncated")]
    scored = int(partial["metrics"][f"k{better}"]["perplexity/wikitext2/tokens"])
    assert f"wikitext2 perplexity on {scored:,} of " in cut and "(max_tokens 1,024)" in cut
    card = ModelCard.load(root / f"k{better}" / "README.md")
    assert "## Warnings" in card.text and cut in card.text and "**Truncated evaluation**" in card.text
    assert {r.dataset_args["tokens"] for r in card.data.eval_results} == {scored}

    # none passes: failed, error.type quality naming the check, nothing published
    assert none["status"] == "failed" and none["error"]["type"] == "quality", none
    assert f"k{worse} {PPL}" in none["error"]["message"] and none["artifacts"] == []
    assert none["gates"]["passed"] is False and len(none["gates"]["checks"]) == 1
    assert not (settings.publish_dir / "alpha" / "none").exists()

    # `nbl wait` exits 5 on a quality failure, 0 on the partial pass, against the real API
    url = live_server(create_app(settings))
    key = auth["Authorization"].removeprefix("Bearer ")
    capsys.readouterr()
    assert main(["wait", none["id"], "--api-url", url, "--api-key", key, "--quiet"]) == 5
    out = capsys.readouterr().out
    assert "error (quality)" in out and f"gate k{worse} {PPL}" in out and "FAIL" in out
    assert main(["wait", partial["id"], "--api-url", url, "--api-key", key, "--quiet"]) == 0
