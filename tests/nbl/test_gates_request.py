"""The `gates` of a job request (nbl/gates.py): validated at submit, a gate on a metric the
evaluation does not measure is a 422 naming the field (nothing inserted or queued), and the gates reach
the Recipe the worker runs; the job view shows no gates until the worker stored its checks."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select
from testkit.service_lib import assert_problem, body, sqla_broker_messages

from nbl.recipe import Gates, from_request
from nbl.request import JobCreate
from service.core.models import Job

GATES = {"max_ppl_increase": {"wikitext2": 0.10}, "max_acc_drop": {"arc_easy": 0.02}}
EVAL = {"perplexity": ["wikitext2"], "tasks": ["arc_easy"]}


@pytest.mark.parametrize(
    "gates, evaluation, field",
    [
        ({"max_ppl_increase": {"c4": 0.1}}, {}, "gates.max_ppl_increase.c4"),  # the default evaluation: wikitext2
        ({"max_acc_drop": {"arc_easy": 0.02}}, {}, "gates.max_acc_drop.arc_easy"),
        (GATES, {"perplexity": [], "tasks": ["arc_easy"]}, "gates.max_ppl_increase.wikitext2"),
        ({"max_acc_drop": {"boolq": 0.02}}, EVAL, "gates.max_acc_drop.boolq"),
    ],
)
def test_a_gate_on_an_unmeasured_metric_is_a_422_naming_the_field(
    client, auth, settings, sessions, gates, evaluation, field
):
    r = client.post("/v1/jobs", json=body(gates=gates, evaluation=evaluation), headers=auth)
    p = assert_problem(r, 422, "validation-error")
    assert [".".join(str(x) for x in e["loc"][1:]) for e in p["errors"]] == [field], p
    assert "not measured" in p["errors"][0]["msg"]
    with sessions() as s:
        assert s.scalar(select(func.count()).select_from(Job)) == 0
    assert sqla_broker_messages(settings) == []


@pytest.mark.parametrize(
    "gates, field",
    [
        ({"max_ppl_increase": {"wikitext2": -0.1}}, "gates.max_ppl_increase.wikitext2"),
        ({"max_acc_drop": {"arc_easy": 1.5}}, "gates.max_acc_drop.arc_easy"),
        ({"max_acc_drop": {"arc_easy": "0.02"}}, "gates.max_acc_drop.arc_easy"),
        ({"max_ppl_rise": {"wikitext2": 0.1}}, "gates.max_ppl_rise"),
        ({"max_ppl_increase": {"../x": 0.1}}, "gates.max_ppl_increase.../x"),
    ],
)
def test_a_malformed_gate_is_a_422(client, auth, gates, field):
    r = client.post("/v1/jobs", json=body(gates=gates, evaluation=EVAL), headers=auth)
    p = assert_problem(r, 422, "validation-error")
    assert any(".".join(str(x) for x in e["loc"][1:]).startswith(field) for e in p["errors"]), p


def test_measured_gates_are_accepted_and_reach_the_recipe(client, auth):
    r = client.post("/v1/jobs", json=body(gates=GATES, evaluation=EVAL), headers=auth)
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["spec"]["gates"] == GATES and job["gates"] is None  # no checks before the evaluation
    recipe = from_request(JobCreate.model_validate(job["spec"]))
    assert recipe.gates == Gates(max_ppl_increase={"wikitext2": 0.10}, max_acc_drop={"arc_easy": 0.02})
    assert from_request(JobCreate.model_validate(body())).gates is None
    # an integer is a number: 0 allows no rise at all
    assert (
        client.post("/v1/jobs", json=body(gates={"max_ppl_increase": {"wikitext2": 0}}), headers=auth).status_code
        == 201
    )


def test_nbl_submit_gate_flags_go_on_top_of_the_file(tmp_path):
    import json
    from types import SimpleNamespace

    from cli.client.job_request import build_request
    from cli.gates import parse_gate

    path = tmp_path / "job.json"
    path.write_text(json.dumps(body(gates={"max_acc_drop": {"arc_easy": 0.05}}, evaluation=EVAL)))
    flags = {
        k: None
        for k in (
            "model",
            "revision",
            "dataset",
            "dataset_config",
            "split",
            "text_field",
            "num_samples",
            "seq_len",
            "seed",
            "shuffle",
            "mode",
            "method",
            "criterion",
            "k",
            "perplexity",
            "tasks",
            "limit",
            "max_tokens",
            "speed",
            "publish_repo",
            "public",
            "publish_revision",
            "create_pr",
            "local_dir",
            "webhook_url",
        )
    }
    args = SimpleNamespace(
        **flags,
        file=path,
        metadata=[],
        task_file=[],
        gate=[parse_gate("wikitext2:ppl:+10%"), parse_gate("arc_easy:acc:-0.02")],
    )
    gates = build_request(args)["gates"]
    assert gates["max_acc_drop"] == {"arc_easy": 0.02} and gates["max_ppl_increase"] == {
        "wikitext2": pytest.approx(0.1)
    }
    assert JobCreate.model_validate(build_request(args)).gates is not None


@pytest.mark.parametrize(
    "gate, spelling",
    [
        ("wikitext2:ppl:10", "wikitext2:ppl:+10%"),  # was max_ppl_increase 10: +1,000 %, every output passed
        ("wikitext2:ppl:+0.10", "wikitext2:ppl:+10%"),
        ("wikitext2:ppl:2.5", "wikitext2:ppl:+2.5%"),
        ("arc_easy:acc:-1", "arc_easy:acc:-1%"),  # was a drop of 1: any accuracy passed
        ("arc_easy:acc:3", "arc_easy:acc:-3%"),
    ],
)
@pytest.mark.parametrize(
    "command",
    [
        ["submit", "--model", "acme/m", "--api-url", "http://127.0.0.1:9"],
        ["compress", "--model", "acme/m", "--k", "1", "--eval"],
    ],
)
def test_a_gate_without_its_percent_is_refused_with_the_right_spelling(capsys, command, gate, spelling):
    from cli.main import main

    with pytest.raises(SystemExit) as refused:  # argparse's usage error, before anything is read or sent
        main([*command, "--gate", gate])
    err = capsys.readouterr().err
    assert refused.value.code == 2 and f"--gate {gate}: " in err and spelling in err, err
    assert len(err.splitlines()) == 2 and "--help` lists every option" in err  # one line and a hint (issue 38)
