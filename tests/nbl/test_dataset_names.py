"""Issue 10, finding 2, the API's side: a calibration dataset named like one of `datasets`' packaged
builders (which read local files) is a 422 problem+json at submit, with nothing in the jobs table and
nothing in the real Redis queue; the API's static list covers the installed `datasets`."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from testkit.service_lib import assert_problem, body, job_count

from nbl.data.dataset_names import PACKAGED_BUILDERS
from nbl.request_fields import dataset_name
from service.api import create_app


def test_the_static_list_covers_the_installed_datasets_builders():
    from datasets.packaged_modules import _PACKAGED_DATASETS_MODULES

    assert set(_PACKAGED_DATASETS_MODULES) <= PACKAGED_BUILDERS, set(_PACKAGED_DATASETS_MODULES) - PACKAGED_BUILDERS


def test_hub_ids_and_offline_names_still_pass():
    for good in ("c4", "wikitext2", "allenai/c4", "Salesforce/wikitext", "wikitext", "owner/csv", "csv-data"):
        assert dataset_name(good) == good


@pytest.mark.parametrize("name", sorted(PACKAGED_BUILDERS))
def test_each_builder_name_is_refused_by_the_grammar(name):
    for variant in (name, name.upper(), name.capitalize()):
        with pytest.raises(ValueError, match="built-in loader"):
            dataset_name(variant)


def test_builder_names_are_422_with_nothing_queued(pg_url, settings_for, team_key_for, redis_queue):
    broker, queue, r = redis_queue
    settings = settings_for(pg_url, broker_url=broker, queue_name=queue)
    auth = team_key_for(settings)
    with TestClient(create_app(settings)) as c:
        for name in sorted(PACKAGED_BUILDERS) + ["CSV", "Json"]:
            resp = c.post("/v1/jobs", json=body(calibration={"dataset": name}), headers=auth)
            problem = assert_problem(resp, 422, "validation-error")
            assert "built-in loader" in resp.text, (name, problem)
    assert job_count(settings) == 0
    assert r.llen(queue) == 0 and not list(r.scan_iter(f"*{queue}*"))
