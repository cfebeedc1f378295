"""compression.form in a job's request: validated at submit (422 problem+json, nothing queued), carried to the
recipe, dumped as before when absent, and each output's form and runs_in in the typed result."""

import argparse

import pytest
from pydantic import ValidationError
from sqlalchemy import func, select
from testkit.service_lib import assert_problem, body, sqla_broker_messages

from nbl.outputs.forms import RUNS_IN
from nbl.recipe import from_request
from nbl.request import JobCreate
from nbl.result import job_result
from nbl.result_schema import JobResult
from service.core.models import Job


def job(**compression):
    return JobCreate.model_validate({"model": {"id": "acme/m"}, "compression": {"k": 4, **compression}})


def test_form_reaches_the_recipe_and_is_left_out_when_absent():
    assert from_request(job(form="fold", mode="block")).compression.form == "fold"
    assert from_request(job()).compression.form == "nbl"
    assert "form" not in job().model_dump(mode="json")["compression"]  # stored and hashed as before it existed


@pytest.mark.parametrize(
    "compression,msg",
    [
        ({"form": "gguf"}, "'nbl', 'linear' or 'fold'"),
        ({"form": "fold", "method": "drop"}, "method must be 'nbl'"),
        ({"form": "linear", "criterion": "loss"}, "ranks layers on its own fit"),
        ({"form": "fold", "k": "auto", "budget": {"max_ppl_increase": 0.1}}, "explicit k"),
    ],
)
def test_bad_forms_are_refused(compression, msg):
    with pytest.raises(ValidationError, match=msg):
        job(**compression)


@pytest.mark.parametrize("form,allowed", [("gguf", True), ("fold", False)])
def test_the_api_answers_422_and_queues_nothing(form, allowed, client, auth, settings, sessions):
    extra = {"method": "drop"} if not allowed else {}
    r = client.post("/v1/jobs", json=body(compression={"k": 4, "form": form, **extra}), headers=auth)
    p = assert_problem(r, 422, "validation-error")
    text = str(p["errors"])
    assert ("'nbl', 'linear' or 'fold'" in text) if allowed else ("method must be 'nbl'" in text), p
    with sessions() as s:
        assert s.scalar(select(func.count()).select_from(Job)) == 0
    assert sqla_broker_messages(settings) == []


def test_the_typed_result_names_form_and_runtimes():
    spec = {"compression": {"k": [2, 4], "form": "fold", "mode": "block"}}
    res = JobResult.model_validate(job_result(spec, [{"k": 2, "layers": [3, 4]}], None))
    assert [(o.form, o.runs_in) for o in res.outputs] == [("fold", list(RUNS_IN[("fold", "block")]))] * 2
    assert res.outputs[0].runs_in[0] == "transformers"
    old = JobResult.model_validate(job_result({"compression": {"k": 4}}, [], None))  # a request without a form
    assert old.outputs[0].form == "nbl" and old.outputs[0].runs_in == ["transformers+file", "vllm+plugin"]


def test_nbl_submit_form_flag_makes_a_request_the_api_takes():
    from cli.client.commands import add_client_commands
    from cli.client.job_request import build_request

    parser = argparse.ArgumentParser()
    add_client_commands(parser.add_subparsers())
    args = parser.parse_args(["submit", "--model", "acme/m", "--k", "2", "--mode", "block", "--form", "fold"])
    req = build_request(args)
    assert req["compression"]["form"] == "fold"
    assert from_request(JobCreate.model_validate(req)).compression.form == "fold"
