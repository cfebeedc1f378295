"""publish.formats and publish.dtype through the API: bad values are a 422 problem+json naming the field, and
nothing is queued; good ones are stored as given."""

from __future__ import annotations

import pytest
from testkit.service_lib import assert_problem, body, sqla_broker_messages


def publishing(**publish) -> dict:
    return {**body(k=1), "publish": {"local_dir": "out", **publish}}


@pytest.mark.parametrize(
    "publish, field",
    [
        ({"formats": ["safetensors", "gguf:q3"]}, "publish.local.formats"),
        ({"formats": ["gguf:f16"]}, "publish.local.formats"),
        ({"dtype": "fp8"}, "publish.local.dtype"),
    ],
)
def test_bad_values_are_a_422_naming_the_field(client, auth, settings, publish, field):
    p = assert_problem(client.post("/v1/jobs", json=publishing(**publish), headers=auth), 422, "validation-error")
    assert ".".join(str(x) for x in p["errors"][0]["loc"][1:]).startswith(field), p
    assert sqla_broker_messages(settings) == []


def test_gguf_of_the_nbl_form_is_a_422(client, auth, settings):
    p = assert_problem(
        client.post("/v1/jobs", json=publishing(formats=["safetensors", "gguf:q4_k_m"]), headers=auth),
        422,
        "validation-error",
    )
    assert "compression.form linear or fold" in p["detail"], p
    assert sqla_broker_messages(settings) == []


def test_good_values_are_stored(client, auth):
    r = client.post("/v1/jobs", json=publishing(formats=["safetensors"], dtype="float16"), headers=auth)
    assert r.status_code == 201, r.text
    spec = client.get(f"/v1/jobs/{r.json()['id']}", headers=auth).json()
    assert spec["spec"]["publish"]["dtype"] == "float16" and spec["spec"]["publish"]["formats"] == ["safetensors"]
