"""Submit-time checks of what the worker would always reject (issue 10, finding 12): a `local:NAME` that
does not exist, a revision on a local model, k at or above the local model's layer count, seq_len below 2
or above its context length. Each is a 422 problem+json naming the field; nothing is inserted or queued.
The API reads the model's config.json as JSON: no torch, no weights."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import func, select
from testkit.service_lib import TINY_CONFIG, assert_problem, body, sqla_broker_messages

from service.core.models import Job

CONFIG = TINY_CONFIG


@pytest.fixture
def local_model(settings):
    d = settings.models_dir / "tiny"
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps(CONFIG))
    return "local:tiny"


def local(k=1, **calibration) -> dict:
    return body(k=k, model="local:tiny", calibration={"dataset": "c4", **calibration})


@pytest.mark.parametrize(
    "req, field",
    [
        (body(model="local:missing"), "model.id"),
        ({"model": {"id": "local:tiny", "revision": "main"}, "compression": {"k": 1}}, "model.revision"),
        (local(k=4), "compression.k"),
        (local(k=[1, 2, 9]), "compression.k"),  # every k in the list
        (local(seq_len=257), "calibration.seq_len"),
        (local(seq_len=1), "calibration.seq_len"),
        (body(calibration={"seq_len": 1}), "calibration.seq_len"),  # a Hub model too: 2 tokens at least
    ],
)
def test_what_the_worker_would_reject_is_a_422_naming_the_field(
    client, auth, settings, sessions, local_model, req, field
):
    r = client.post("/v1/jobs", json=req, headers=auth)
    p = assert_problem(r, 422, "validation-error")
    assert [".".join(str(x) for x in e["loc"][1:]) for e in p["errors"]][0] == field, p
    with sessions() as s:
        assert s.scalar(select(func.count()).select_from(Job)) == 0
    assert sqla_broker_messages(settings) == []


def test_a_local_model_within_its_limits_is_accepted(client, auth, local_model):
    r = client.post("/v1/jobs", json=local(k=[1, 3], seq_len=256), headers=auth)
    assert r.status_code == 201, r.text
    # a Hub model's limits are unknown here: the worker checks its config.json before any download
    assert (
        client.post("/v1/jobs", json=body(k=[1, 400], calibration={"seq_len": 30000}), headers=auth).status_code == 201
    )


def test_a_local_config_without_the_sizes_the_estimate_needs_is_a_422(client, auth, settings, sessions):
    d = settings.models_dir / "sizeless"
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({k: v for k, v in TINY_CONFIG.items() if k != "hidden_size"}))
    r = client.post("/v1/jobs", json=body(k=1, model="local:sizeless", calibration={"seq_len": 128}), headers=auth)
    p = assert_problem(r, 422, "validation-error")
    assert p["errors"][0]["loc"] == ["body", "model", "id"] and "hidden_size" in p["detail"], p
    with sessions() as s:
        assert s.scalar(select(func.count()).select_from(Job)) == 0
    assert sqla_broker_messages(settings) == []
