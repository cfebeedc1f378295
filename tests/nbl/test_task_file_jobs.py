"""A job's own evaluation tasks (issue 13 §4): `evaluation.task_files` carries each file's text, checked
line by line at submit with the parser the worker uses (nbl/data/task_records.py), so a malformed
file is a 422 naming the file and the line, and nothing is stored or queued. WinoGrande and PIQA are
task names a job may ask for; the model card quotes a task file by digest, never its text."""

from __future__ import annotations

import hashlib
import json

import pytest
from sqlalchemy import func, select
from testkit.service_lib import assert_problem, body, sqla_broker_messages

from nbl import recipe as R
from nbl.request import JobCreate
from service.core.models import Job

CONTEXTS = [
    {"contexts": ["Sarah beat Maria, so Sarah", "Sarah beat Maria, so Maria"], "continuation": " won.", "label": 0},
    {"contexts": ["The cup or the pen: the cup", "The cup or the pen: the pen"], "continuation": " leaks", "label": 1},
]
CHOICES = [{"context": "2+2=", "choices": ["4", "5"], "label": 0}]


def jsonl(records) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def with_files(*files, tasks=("winogrande",)) -> dict:
    return body(evaluation={"tasks": list(tasks), "task_files": list(files)})


def test_winogrande_and_task_files_of_both_forms_are_accepted_and_reach_the_recipe(client, auth):
    req = with_files(
        {"name": "wino_like", "jsonl": jsonl(CONTEXTS)},
        {"name": "quiz", "jsonl": jsonl(CHOICES)},
        tasks=("winogrande", "piqa", "arc_easy"),
    )
    r = client.post("/v1/jobs", json=req, headers=auth)
    assert r.status_code == 201, r.text
    stored = r.json()["spec"]["evaluation"]
    assert stored["tasks"] == ["winogrande", "piqa", "arc_easy"]
    assert [f["name"] for f in stored["task_files"]] == ["wino_like", "quiz"]

    recipe = R.from_request(JobCreate.model_validate(r.json()["spec"]))
    assert recipe.evaluation.task_texts == (("wino_like", jsonl(CONTEXTS)), ("quiz", jsonl(CHOICES)))
    assert not recipe.evaluation.empty()
    quoted = recipe.request["evaluation"]["task_files"]  # what the card shows: no text
    assert quoted == [
        {"name": "wino_like", "lines": 2, "sha256": hashlib.sha256(jsonl(CONTEXTS).encode()).hexdigest()},
        {"name": "quiz", "lines": 1, "sha256": hashlib.sha256(jsonl(CHOICES).encode()).hexdigest()},
    ]
    assert "Sarah" not in json.dumps(recipe.request)


MIXED = jsonl([CONTEXTS[0], CHOICES[0]])


@pytest.mark.parametrize(
    "files, loc, message",
    [
        (
            [{"name": "t", "jsonl": MIXED}],
            "evaluation.task_files.0.jsonl",
            "line 2: a 'choices' record in a file of 'contexts' records; one file holds one form",
        ),
        (
            [
                {"name": "t", "jsonl": jsonl(CHOICES)},
                {"name": "u", "jsonl": '\n{"contexts": ["a", "b"], "continuation": " c", "label": 2}\n'},
            ],
            "evaluation.task_files.1.jsonl",
            "line 2: label must be an integer index into contexts",
        ),
        (
            [{"name": "t", "jsonl": jsonl(CONTEXTS) + "{not json\n"}],
            "evaluation.task_files.0.jsonl",
            "line 3: not JSON",
        ),
        (
            [{"name": "t", "jsonl": '{"contexts": ["a", "b"], "continuation": "  ", "label": 0}'}],
            "evaluation.task_files.0.jsonl",
            "line 1: continuation must be a non-blank string",
        ),
        (
            [{"name": "t", "jsonl": '{"contexts": ["a"], "continuation": " c", "label": 0}'}],
            "evaluation.task_files.0.jsonl",
            "line 1: contexts must be a list of at least two strings",
        ),
        ([{"name": "t", "jsonl": '["a", "b"]'}], "evaluation.task_files.0.jsonl", "line 1: expected an object"),
        (
            [
                {
                    "name": "t",
                    "jsonl": jsonl(CHOICES).replace("\n", "\r\n") + '{"context": "q", "choices": ["a", "b"], '
                    '"label": 5}\r\n',
                }
            ],  # Windows line ends: the lines a file reader counts
            "evaluation.task_files.0.jsonl",
            "line 2: label must be an integer index into choices",
        ),
        (
            [{"name": "t", "jsonl": jsonl(CHOICES) + "\x00\n"}],
            "evaluation.task_files.0.jsonl",
            "NUL",
        ),  # service/http/nul.py
        ([{"name": "t", "jsonl": jsonl(CHOICES) + "\x07\n"}], "evaluation.task_files.0.jsonl", "control characters"),
        ([{"name": "t", "jsonl": "\n  \n"}], "evaluation.task_files.0.jsonl", "no records"),
        (
            [{"name": "t", "jsonl": '{"context": "q", "choices": ' + "[" * 5000 + "]" * 5000 + ', "label": 0}'}],
            "evaluation.task_files.0.jsonl",
            "line 1: not a record: JSON nested too deep",
        ),  # was a RecursionError (500)
        ([{"name": "../t", "jsonl": jsonl(CHOICES)}], "evaluation.task_files.0.name", "not a simple name"),
        (
            [{"name": "t", "jsonl": jsonl(CHOICES), "path": "/etc/passwd"}],
            "evaluation.task_files.0.path",
            "Extra inputs",
        ),
        (
            [{"name": "winogrande", "jsonl": jsonl(CONTEXTS)}],
            "evaluation",
            "two tasks would report under the name 'winogrande'",
        ),
        ([{"name": "t", "jsonl": jsonl(CHOICES)}, {"name": "t", "jsonl": jsonl(CONTEXTS)}], "evaluation", "'t'"),
    ],
)
def test_a_malformed_task_file_is_a_422_naming_it_and_its_line(client, auth, settings, sessions, files, loc, message):
    r = client.post("/v1/jobs", json=with_files(*files), headers=auth)
    p = assert_problem(r, 422, "validation-error")
    e = p["errors"][0]
    assert ".".join(str(x) for x in e["loc"][1:]) == loc and message in e["msg"], p
    with sessions() as s:
        assert s.scalar(select(func.count()).select_from(Job)) == 0
    assert sqla_broker_messages(settings) == []


def test_submit_task_file_sends_the_file_and_the_server_names_its_bad_line(tmp_path):
    from types import SimpleNamespace

    from cli.client.job_request import build_request

    good, bad = tmp_path / "wino_like.jsonl", tmp_path / "broken.jsonl"
    good.write_text(jsonl(CONTEXTS))
    bad.write_text(MIXED)
    flags = {
        k: None
        for k in (
            "file",
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
    args = SimpleNamespace(**flags | {"model": "acme/m", "metadata": [], "task_file": [str(good), str(bad)]})
    sent = build_request(args)
    assert sent["evaluation"]["task_files"] == [
        {"name": "wino_like", "jsonl": jsonl(CONTEXTS)},
        {"name": "broken", "jsonl": MIXED},
    ]
    with pytest.raises(ValueError, match=r"task_files\.1\.jsonl[\s\S]*line 2: a 'choices' record"):
        JobCreate.model_validate({**sent, "compression": {"k": 1}})
    with pytest.raises(ValueError, match="nope.jsonl: cannot read it"):
        build_request(SimpleNamespace(**{**vars(args), "task_file": [str(tmp_path / "nope.jsonl")]}))
