"""compression.refit and compression.heal in a job's request: validated at submit (422 problem+json naming the
field, nothing queued), carried to the recipe and the engine's config, dumped as before when absent."""

import pytest
from pydantic import ValidationError
from service_testlib import assert_problem, body, sqla_broker_messages
from sqlalchemy import func, select

from nbl.recipe import Heal, from_request
from nbl.request import JobCreate
from service.core.models import Job


def job(**compression):
    return JobCreate.model_validate({"model": {"id": "acme/m"}, "compression": {"k": 4, **compression}})


def test_refit_and_heal_reach_the_recipe_and_are_left_out_when_absent():
    comp = from_request(job(refit="sequential", heal={"tokens": 4096, "steps": 8})).compression
    assert comp.refit == "sequential" and comp.heal == Heal(tokens=4096, steps=8, lr=1e-4)
    plain = from_request(job()).compression
    assert plain.refit == "none" and plain.heal is None
    dumped = job().model_dump(mode="json")["compression"]
    assert "refit" not in dumped and "heal" not in dumped  # stored and hashed as before they existed


def test_the_engine_config_carries_them():
    from worker.engine.config import from_recipe

    cfg = from_recipe(from_request(job(refit="sequential", heal={"tokens": 512, "lr": 3e-4})))
    assert cfg.refit == "sequential" and cfg.heal.tokens == 512 and cfg.heal.lr == 3e-4
    cfg.check()


@pytest.mark.parametrize("compression,msg", [
    ({"refit": "twice"}, "'none' or 'sequential'"),
    ({"heal": {"tokens": 1}}, "greater than or equal to 2"),
    ({"heal": {"tokens": 512, "lr": 0}}, "greater than 0"),
    ({"heal": {"tokens": 512, "epochs": 2}}, "Extra inputs are not permitted"),
    ({"heal": {"tokens": "512"}}, "valid integer"),
    ({"refit": "sequential", "method": "drop"}, "method 'drop' has none"),
    ({"heal": {"tokens": 512}, "form": "fold", "mode": "block"}, "not offered for form 'fold'"),
    ({"heal": {"tokens": 512}, "form": "linear"}, "heal trains nbl's maps"),
])
def test_bad_refinements_are_refused(compression, msg):
    with pytest.raises(ValidationError, match=msg):
        job(**compression)


def test_linear_refit_is_accepted():
    assert from_request(job(refit="sequential", form="linear")).compression.refit == "sequential"


@pytest.mark.parametrize("compression,field,msg", [
    ({"refit": "sequential", "method": "drop"}, "compression", "method 'drop' has none"),
    ({"heal": {"tokens": 0}}, "tokens", "greater than or equal to 2"),
])
def test_the_api_answers_422_and_queues_nothing(compression, field, msg, client, auth, settings, sessions):
    r = client.post("/v1/jobs", json=body(compression={"k": 4, **compression}), headers=auth)
    p = assert_problem(r, 422, "validation-error")
    assert msg in str(p["errors"]) and field in str(p["errors"][0]["loc"]), p
    with sessions() as s:
        assert s.scalar(select(func.count()).select_from(Job)) == 0
    assert sqla_broker_messages(settings) == []
