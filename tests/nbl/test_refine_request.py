"""compression.refit and compression.heal in a job's request: validated at submit (422 problem+json naming the
field, nothing queued), carried to the recipe and the engine's config, dumped as before when absent."""

import pytest
from pydantic import ValidationError
from sqlalchemy import func, select
from testkit.service_lib import assert_problem, body, sqla_broker_messages

from nbl.recipe import Heal, from_request
from nbl.request import JobCreate
from service.core.models import Job


def job(**compression):
    return JobCreate.model_validate({"model": {"id": "acme/m"}, "compression": {"k": 4, **compression}})


def test_refit_and_heal_reach_the_recipe_and_are_left_out_when_absent():
    comp = from_request(job(refit="sequential", heal={"tokens": 4096, "steps": 8})).compression
    assert comp.refit == "sequential" and comp.heal == Heal(tokens=4096, steps=8, lr=1e-5)
    plain = from_request(job()).compression
    assert plain.refit == "none" and plain.heal is None
    dumped = job().model_dump(mode="json")["compression"]
    assert "refit" not in dumped and "heal" not in dumped  # stored and hashed as before they existed


def test_the_engine_config_carries_them():
    from worker.engine.config import from_recipe

    cfg = from_recipe(from_request(job(refit="sequential", heal={"tokens": 512, "lr": 3e-4})))
    assert cfg.refit == "sequential" and cfg.heal.tokens == 512 and cfg.heal.lr == 3e-4
    cfg.check()


@pytest.mark.parametrize(
    "compression,msg",
    [
        ({"refit": "twice"}, "'none' or 'sequential'"),
        ({"heal": {"tokens": 0}}, "greater than or equal to 1"),
        ({"heal": {"tokens": 512, "lr": 0}}, "greater than 0"),
        ({"heal": {"tokens": 512, "epochs": 2}}, "Extra inputs are not permitted"),
        ({"heal": {"tokens": "512"}}, "valid integer"),
        ({"refit": "sequential", "method": "drop"}, "method 'drop' has none"),
        ({"heal": {"tokens": 512}, "form": "fold", "mode": "block"}, "not offered for form 'fold'"),
        ({"heal": {"tokens": 512}, "form": "linear"}, "heal trains nbl's maps"),
    ],
)
def test_bad_refinements_are_refused(compression, msg):
    with pytest.raises(ValidationError, match=msg):
        job(**compression)


def test_linear_refit_is_accepted():
    assert from_request(job(refit="sequential", form="linear")).compression.refit == "sequential"


@pytest.mark.parametrize(
    "compression,field,msg",
    [
        ({"refit": "sequential", "method": "drop"}, "compression", "method 'drop' has none"),
        ({"heal": {"tokens": 0}}, "tokens", "greater than or equal to 1"),
    ],
)
def test_the_api_answers_422_and_queues_nothing(compression, field, msg, client, auth, settings, sessions):
    r = client.post("/v1/jobs", json=body(compression={"k": 4, **compression}), headers=auth)
    p = assert_problem(r, 422, "validation-error")
    assert msg in str(p["errors"]) and field in str(p["errors"][0]["loc"]), p
    with sessions() as s:
        assert s.scalar(select(func.count()).select_from(Job)) == 0
    assert sqla_broker_messages(settings) == []


def test_the_typed_result_carries_each_outputs_refit_and_heal():
    from nbl.result import REFINE, job_result, refine_flat
    from nbl.result_schema import JobResult

    engine_outputs = [
        {
            "k": 4,
            "refit": {"method": "sequential", "seconds": 3.5, "cached": False, "nmse": {}},
            "heal": {
                "steps": 8,
                "tokens": 2048,
                "seconds": 9.0,
                "perplexity_before": 40.0,
                "perplexity_after": 37.5,
                "kept": True,
                "lr": 1e-4,
            },
        },
        {"k": 8},
    ]
    spec = {"compression": {"k": [4, 8], "refit": "sequential"}}
    res = JobResult.model_validate(job_result(spec, [], {REFINE: refine_flat(engine_outputs)}))
    four, eight = res.outputs
    assert four.refit.seconds == 3.5 and four.refit.cached is False
    assert (four.heal.tokens, four.heal.steps, four.heal.kept) == (2048, 8, True)
    assert four.heal.perplexity_after == 37.5 and four.heal.lr == 1e-4
    assert eight.refit is None and eight.heal is None
    plain = JobResult.model_validate(job_result({"compression": {"k": 4}}, [], None))
    assert plain.outputs[0].refit is None and plain.outputs[0].heal is None


def test_nbl_submit_flags_make_a_request_the_api_takes():
    import argparse

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
            "4",
            "--refit",
            "sequential",
            "--heal-tokens",
            "4096",
            "--heal-lr",
            "3e-4",
        ]
    )
    req = build_request(args)
    assert req["compression"]["refit"] == "sequential" and req["compression"]["heal"] == {"tokens": 4096, "lr": 3e-4}
    comp = from_request(JobCreate.model_validate(req)).compression
    assert comp.heal == Heal(tokens=4096, lr=3e-4) and comp.refit == "sequential"
    plain = build_request(parser.parse_args(["submit", "--model", "acme/m", "--k", "4"]))
    assert "refit" not in plain["compression"] and "heal" not in plain["compression"]
    with pytest.raises(ValueError, match="--heal-steps needs --heal-tokens"):
        build_request(parser.parse_args(["submit", "--model", "acme/m", "--k", "4", "--heal-steps", "3"]))


@pytest.mark.parametrize(
    "flags,msg",
    [
        (["--heal-tokens", "0"], "--heal-tokens: Input should be greater than or equal to 1"),
        (["--heal-lr", "1e-3"], "--heal-lr needs --heal-tokens"),
        (["--refit", "sequential", "--method", "drop"], "method 'drop' has none"),
    ],
)
def test_nbl_compress_refuses_bad_refinements_with_exit_2(flags, msg, capsys):
    from cli.main import main

    assert main(["compress", "--model", "acme/m", "--k", "4", *flags]) == 2
    assert msg in capsys.readouterr().err


def test_nbl_compress_flags_reach_the_recipe():
    import argparse

    from cli.compress import add_compress, recipe

    sub = argparse.ArgumentParser().add_subparsers()
    add_compress(sub)
    args = sub.choices["compress"].parse_args(
        [
            "--model",
            "m",
            "--k",
            "4",
            "--refit",
            "sequential",
            "--heal-tokens",
            "512",
            "--heal-steps",
            "6",
            "--heal-seconds",
            "60",
        ]
    )
    comp = recipe(args).compression
    assert comp.refit == "sequential" and comp.heal == Heal(tokens=512, steps=6, max_seconds=60.0)
