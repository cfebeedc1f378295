"""Issue 38: the dashboard and the client name what a job made. Requests are compared after normalising
through the request model (no false differences), the output form is named beside the method, and a job
has a label (metadata `name`, else model + recipe)."""

from __future__ import annotations

from cli.client.format import job_lines, job_row
from nbl import job_label
from service.ui.request_diff import request_diff

M = {"id": "HuggingFaceTB/SmolLM2-135M-Instruct"}


def _spec(**compression) -> dict:
    return {"model": M, "compression": {"k": 4, **compression}}


def test_equal_requests_written_differently_have_no_differences():
    stored_before_defaults = {"model": M, "compression": {"k": 4}, "publish": {"local_dir": "out"}}
    spelled_out = {
        "model": M,
        "compression": {"k": [4], "mode": "attn", "method": "nbl", "criterion": "cosine", "form": "nbl"},
        "calibration": {"dataset": "c4", "num_samples": 256},
        "publish": {"local_dir": "out", "overwrite": False, "formats": ["safetensors"], "dtype": "auto"},
        "metadata": {"name": "another name"},
    }
    assert request_diff([stored_before_defaults, spelled_out]) == []


def test_real_differences_stay_and_read_as_values():
    rows = request_diff([_spec(), _spec(k=[4, 8], form="linear")])
    assert rows == [
        {"field": "compression.ks", "values": ["[4]", "[4, 8]"]},
        {"field": "compression.form", "values": ["nbl", "linear"]},
    ]


def test_a_section_one_job_lacks_differs_only_where_the_other_set_it():
    local = {**_spec(), "publish": {"local_dir": "out", "overwrite": False}}
    rows = request_diff([_spec(), local])
    assert rows == [{"field": "publishing.local_dir", "values": ["—", "out"]}]  # not overwrite False vs —
    forced = {**_spec(), "publish": {"local_dir": "out", "overwrite": True}}
    assert {"field": "publishing.overwrite", "values": ["—", "true"]} in request_diff([_spec(), forced])


def test_k_auto_and_a_request_this_release_refuses():
    auto = _spec(k="auto", criterion="greedy", budget={"max_ppl_increase": 0.1})
    rows = {r["field"]: r["values"] for r in request_diff([_spec(criterion="greedy"), auto])}
    assert rows["compression.ks"] == ["[4]", "auto"] and rows["compression.max_ppl_increase"] == ["—", "0.1"]
    old = {"model": M, "compression": {"k": 4, "retired_option": 1}}  # compared as stored, not a 500
    assert request_diff([_spec(), old]) == [{"field": "compression.retired_option", "values": ["—", "1"]}]


def test_words_name_the_form_beside_the_method():
    w = job_label.words(_spec(k=[2, 4], form="fold"))
    assert (w["method"], w["form"], w["k"]) == ("nbl", "fold", "2,4")
    assert job_label.summary(w) == "attn · nbl · fold form · k=2,4 · cosine"  # the default criterion
    assert job_label.words(_spec())["form"] == "nbl"  # the default, named as what it is
    assert job_label.words({"model": M, "compression": {"k": 4, "form": "linear", "bogus": 1}})["form"] == "linear"


def test_label_is_the_metadata_name_else_model_and_recipe():
    assert job_label.label(_spec(), {"name": "nightly attn k4"}) == "nightly attn k4"
    assert job_label.label(_spec(form="linear"), {"ci": "1"}) == "SmolLM2-135M-Instruct · attn k=4 · linear form"
    local = {"model": {"id": "local:tiny"}, "compression": {"k": "auto", "criterion": "greedy"}}
    assert job_label.label(local, {"name": "  "}) == "local:tiny · attn k=auto · nbl form"


def test_the_client_prints_the_form():
    job = {"id": "job_1", "status": "succeeded", "spec": _spec(k=[2, 4], form="linear"), "metadata": {}}
    assert "attn/nbl/cosine k=2,4 form linear" in job_lines(job)[1]
    assert "k=2,4 linear" in job_row(job)
