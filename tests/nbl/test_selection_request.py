"""A job's measured selection: k auto with its budget, the selection data, and the refusal of selection data
that is what the evaluation scores (422 at submit, before any work)."""

import argparse
import dataclasses

import pytest
from pydantic import ValidationError
from sqlalchemy import func, select
from testkit.service_lib import assert_problem, body, sqla_broker_messages

from nbl import recipe as R
from nbl.recipe import from_request
from nbl.request import JobCreate
from service.core.models import Job
from service.core.settings import Settings
from service.estimates.limits import check_limits


def job(**parts):
    return JobCreate.model_validate({"model": {"id": "acme/m"}, "compression": {"k": 4}, **parts})


def test_k_auto_with_a_budget_and_selection_data_reach_the_recipe():
    spec = job(
        compression={"k": "auto", "criterion": "auto", "budget": {"max_ppl_increase": 0.1}},
        selection={"dataset": "wikitext2", "split": "validation", "num_samples": 16},
    )
    r = from_request(spec)
    assert r.ks == () and r.compression == R.Compression(ks=(), criterion="auto", max_ppl_increase=0.1)
    assert r.selection == R.Selection(dataset="wikitext2", split="validation", num_samples=16)
    assert check_limits(spec, Settings()) == []
    assert r.request["selection"]["dataset"] == "wikitext2" and r.request["compression"]["budget"] == {
        "max_ppl_increase": 0.1
    }


def test_a_request_without_them_dumps_as_before():
    dumped = job(compression={"k": 4, "criterion": "greedy"}).model_dump(mode="json")
    assert "selection" not in dumped and "budget" not in dumped["compression"]
    assert from_request(job()).selection is None


@pytest.mark.parametrize(
    "compression,msg",
    [
        ({"k": "auto"}, "needs budget.max_ppl_increase"),
        ({"k": 4, "budget": {"max_ppl_increase": 0.1}}, 'budget applies to k "auto" only'),
        ({"k": "auto", "budget": {"max_ppl_increase": 0}}, "greater than 0"),
        ({"k": "some"}, "auto"),
        ({"k": 2, "criterion": "best"}, "greedy"),
    ],
)
def test_bad_measured_requests_are_refused(compression, msg):
    with pytest.raises(ValidationError, match=msg):
        job(compression=compression)


@pytest.mark.parametrize(
    "selection,evaluation,refused",
    [
        ({"dataset": "wikitext2", "split": "test"}, {}, True),  # the default evaluation is wikitext2 test
        ({"dataset": "wikitext2", "split": "validation"}, {}, False),
        ({"dataset": "Salesforce/wikitext", "config": "wikitext-2-raw-v1", "split": "test"}, {}, True),
        ({"dataset": "c4", "split": "validation"}, {"perplexity": ["c4"]}, True),
        ({"dataset": "c4", "split": "validation"}, {"perplexity": ["wikitext2"]}, False),
        ({"dataset": "c4", "split": "train"}, {"perplexity": ["c4", "wikitext2"]}, False),
    ],
)
def test_selection_data_that_the_evaluation_scores_is_refused(selection, evaluation, refused):
    errors = check_limits(job(selection=selection, evaluation=evaluation), Settings())
    assert bool(errors) is refused
    if refused:
        assert errors[0]["loc"] == ["body", "selection", "split"] and "choose another split" in errors[0]["msg"]


def test_selection_samples_are_capped_as_calibration_samples_are():
    errors = check_limits(job(selection={"dataset": "c4", "split": "train", "num_samples": 10**6}), Settings())
    assert errors and errors[0]["loc"] == ["body", "selection", "num_samples"]


def test_the_api_answers_422_for_selection_on_the_evaluation_data_and_queues_nothing(client, auth, settings, sessions):
    r = client.post("/v1/jobs", json=body(selection={"dataset": "wikitext2", "split": "test"}), headers=auth)
    p = assert_problem(r, 422, "validation-error")
    assert [e["loc"][1:] for e in p["errors"]] == [["selection", "split"]], p
    with sessions() as s:
        assert s.scalar(select(func.count()).select_from(Job)) == 0
    assert sqla_broker_messages(settings) == []


def test_nbl_compress_flags_build_the_same_recipe_as_the_request():
    from cli.compress import add_compress, recipe

    parser = argparse.ArgumentParser()
    add_compress(parser.add_subparsers())
    args = parser.parse_args(
        [
            "compress",
            "--model",
            "acme/m",
            "--k",
            "auto",
            "--max-ppl-increase",
            "0.1",
            "--criterion",
            "auto",
            "--selection-dataset",
            "wikitext2",
            "--selection-samples",
            "16",
        ]
    )
    spec = job(
        compression={"k": "auto", "criterion": "auto", "budget": {"max_ppl_increase": 0.1}},
        selection={"dataset": "wikitext2", "num_samples": 16},
    )
    assert recipe(args) == dataclasses.replace(from_request(spec), evaluation=R.Evaluation())


def test_nbl_submit_flags_make_a_request_the_api_takes():
    from cli.client.commands import add_client_commands
    from cli.client.job_request import build_request

    parser = argparse.ArgumentParser()
    add_client_commands(parser.add_subparsers())
    args = parser.parse_args(
        [
            "submit",
            "--model",
            "acme/m",
            "--k",
            "auto",
            "--max-ppl-increase",
            "0.2",
            "--criterion",
            "greedy",
            "--selection-dataset",
            "wikitext2",
            "--selection-split",
            "validation",
            "--selection-samples",
            "8",
        ]
    )
    body = build_request(args)
    assert body["compression"] == {"criterion": "greedy", "k": "auto", "budget": {"max_ppl_increase": 0.2}}
    r = from_request(JobCreate.model_validate(body))
    assert r.compression.max_ppl_increase == 0.2 and r.selection == R.Selection(
        "wikitext2", None, "validation", "text", 8
    )
