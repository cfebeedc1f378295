"""The Recipe: built once from a request, the same from `nbl compress`'s flags, its defaults the only ones."""

import dataclasses

from nbl import recipe as R
from nbl.recipe import from_request
from nbl.request import JobCreate
from nbl.selection.score_fields import CRITERIA, CRITERION_FIELD, MEASURED, SCORE_FIELDS
from service.jobs.responses import LayerModeScores


def test_a_minimal_request_gets_the_recipes_defaults():
    r = from_request(JobCreate.model_validate({"model": {"id": "acme/m"}, "compression": {"k": 4}}))
    assert r == R.Recipe(
        model="acme/m", compression=R.Compression(ks=(4,)), evaluation=R.Evaluation(perplexity=R.PERPLEXITY)
    )
    assert (r.calibration.dataset, r.calibration.num_samples, r.calibration.seq_len) == ("c4", 256, 2048)
    # cosine, not the paper's cca: docs/quality.md#the-default-criterion
    assert (r.compression.mode, r.compression.method, r.compression.criterion) == ("attn", "nbl", "cosine")
    assert r.publishing is None and r.request["compression"] == {
        "mode": "attn",
        "method": "nbl",
        "criterion": "cosine",
        "k": 4,
    }


def test_every_field_of_a_full_request_reaches_the_recipe_and_no_token_does():
    body = {
        "model": {"id": "local:m", "revision": "v1"},
        "calibration": {
            "dataset": "wikitext2",
            "config": "raw",
            "split": "validation",
            "text_field": "body",
            "num_samples": 8,
            "seq_len": 64,
            "seed": 3,
            "shuffle": True,
        },
        "compression": {"k": [2, 4], "mode": "block", "method": "drop", "criterion": "loss"},
        "evaluation": {"perplexity": ["c4"], "tasks": ["boolq"], "limit": 5, "max_tokens": 99, "speed": True},
        "publish": {"repo_id": "acme/out", "private": False, "revision": "b", "create_pr": True, "token": "hf_x"},
    }
    r = from_request(JobCreate.model_validate(body))
    assert r.model == "local:m" and r.revision == "v1" and r.ks == (2, 4)
    assert dataclasses.asdict(r.calibration) == body["calibration"]
    assert r.compression == R.Compression(ks=(2, 4), mode="block", method="drop", criterion="loss")
    assert r.evaluation == R.Evaluation(perplexity=("c4",), tasks=("boolq",), limit=5, max_tokens=99, speed=True)
    assert r.publishing == R.Publishing(repo_id="acme/out", private=False, revision="b", create_pr=True)
    assert "hf_x" not in repr(r)
    local = from_request(JobCreate.model_validate({**body, "publish": {"local_dir": "x", "overwrite": True}}))
    assert local.publishing == R.Publishing(local_dir="x", overwrite=True)


def test_the_openapi_shows_the_recipes_defaults():
    props = JobCreate.model_json_schema()["$defs"]
    assert props["CalibrationSpec"]["properties"]["num_samples"]["default"] == R.NUM_SAMPLES
    assert props["CompressionSpec"]["properties"]["criterion"]["default"] == R.CRITERION
    assert props["CompressionSpec"]["properties"]["criterion"]["enum"] == list(CRITERIA + MEASURED)


def test_nbl_compress_flags_build_the_same_recipe_as_a_request():
    import argparse

    from cli.compress import add_compress, recipe

    parser = argparse.ArgumentParser()
    add_compress(parser.add_subparsers())
    args = parser.parse_args(["compress", "--model", "acme/m", "--k", "4"])
    assert recipe(args) == dataclasses.replace(
        from_request(JobCreate.model_validate({"model": {"id": "acme/m"}, "compression": {"k": 4}})),
        evaluation=R.Evaluation(),
    )  # a job evaluates by default; `nbl compress` only with --eval


def test_the_score_fields_are_the_schemas_and_the_criteria_rank_by_them():
    assert tuple(LayerModeScores.model_fields) == SCORE_FIELDS
    assert set(CRITERION_FIELD) == set(CRITERIA) and set(CRITERION_FIELD.values()) <= set(SCORE_FIELDS)
