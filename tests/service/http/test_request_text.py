"""Text no database, Fernet or tokenizer can take, refused at submit with a 422 naming the field, on both
databases (issue 24's low findings 3 and 4):

- an unpaired surrogate anywhere in a JSON body (a `\\ud800` escape, or its raw CESU bytes), in one place
  (service/http/nul.py), as NUL is: `publish.token` with one was a 500 (UnicodeEncodeError in
  service/core/secrets.encrypt);
- a Hub token is visible ASCII (nbl/plain_text.py): `\\u0001\\u202e` was stored;
- a task file's parsed lines hold no surrogate and no control character but tab and the line ends
  (nbl/data/task_records.py): a `\\ud800` escape in a line was accepted (201), then failed the job as `system`
  at evaluate.
"""

from __future__ import annotations

import json

import pytest
from testkit.service_lib import assert_problem, body

LONE = "\ud800x"
HUB = {"repo_id": "alpha/tiny-nbl"}
CHOICES = '{"context": "q", "choices": [" a", " b"], "label": 0}\n'


def post(client, auth, payload: dict, raw: bool = False):
    """The body as JSON: the surrogate as a `\\ud800` escape, or (raw) as the bytes ED A0 80."""
    data = (
        json.dumps(payload, ensure_ascii=False).encode("utf-8", "surrogatepass")
        if raw
        else json.dumps(payload).encode()
    )
    return client.post("/v1/jobs", content=data, headers=auth | {"content-type": "application/json"})


def no_jobs(client, auth) -> bool:
    return client.get("/v1/jobs", headers=auth).json()["data"] == []


@pytest.mark.parametrize("raw", [False, True], ids=["escape", "raw-bytes"])
@pytest.mark.parametrize(
    "hostile, loc",
    [
        (body(publish={**HUB, "token": LONE}), ["body", "publish", "token"]),  # the 500
        (body(metadata={"a": LONE}), ["body", "metadata", "a"]),
        (body(metadata={LONE: "a"}), ["body", "metadata", "\\ud800x"]),  # the key, shown escaped
        (body(model="a/b" + LONE), ["body", "model", "id"]),
        (
            body(evaluation={"task_files": [{"name": "t", "jsonl": CHOICES + LONE}]}),
            ["body", "evaluation", "task_files", 0, "jsonl"],
        ),
        ({**body(), LONE: 1}, ["body", "\\ud800x"]),  # an unknown key: named too, not just `body`
    ],
)
def test_an_unpaired_surrogate_anywhere_in_the_body_is_a_422_naming_the_field(client, auth, hostile, loc, raw):
    p = assert_problem(post(client, auth, hostile, raw), 422, "validation-error")
    assert p["errors"][0]["loc"] == loc, p
    assert "unpaired surrogate" in p["detail"] and p["detail"].startswith(".".join(map(str, loc))), p
    assert no_jobs(client, auth)


def test_paired_surrogates_and_escaped_backslashes_are_text(client, auth):
    """A pair is one character (an emoji); `\\\\ud800` is a backslash and the text `ud800`: both stored as sent."""
    for value in ("\U0001f600 ok", "\\ud800"):
        r = post(client, auth, body(metadata={"a": value}))
        assert r.status_code == 201 and r.json()["metadata"] == {"a": value}, r.text


def test_the_estimate_endpoint_is_covered_too(client, auth):
    r = client.post(
        "/v1/estimates",
        content=json.dumps(body(publish={**HUB, "token": LONE})),
        headers=auth | {"content-type": "application/json"},
    )
    assert assert_problem(r, 422, "validation-error")["errors"][0]["loc"] == ["body", "publish", "token"]


@pytest.mark.parametrize("token", ["\u0001\u202e", "hf_a\u202eb", "hf_ab\x7f", "hf a", "hf_\u00e9t\u00e9", "hf_a\tb"])
def test_a_hub_token_is_visible_ascii(client, auth, token):
    p = assert_problem(post(client, auth, body(publish={**HUB, "token": token})), 422, "validation-error")
    assert p["errors"][0]["loc"] == ["body", "publish", "hub", "token"], p  # `hub`: pydantic's tag of the union
    assert "visible ASCII" in p["detail"] and token not in json.dumps(p, ensure_ascii=False), p  # never echoed
    assert no_jobs(client, auth)


def test_a_plain_token_is_still_accepted(client, auth):
    r = post(client, auth, body(publish={**HUB, "token": "hf_AbC123-._~+/="}))
    assert r.status_code == 201, r.text


LINE = '{{"context": "{}", "choices": [" a", " b"], "label": 0}}\n'


@pytest.mark.parametrize("text", ["\\ud800 q", "q \\udfff", "\\u0007 q", "q\\u001b[31m", "\\u007f"])
def test_a_task_line_with_a_surrogate_or_a_control_character_is_a_422_naming_the_line(client, auth, text):
    jsonl = CHOICES + LINE.format(text)  # the escape is inside the line's JSON: the body itself is clean
    files = [{"name": "t", "jsonl": jsonl}]
    p = assert_problem(post(client, auth, body(evaluation={"task_files": files})), 422, "validation-error")
    assert p["errors"][0]["loc"] == ["body", "evaluation", "task_files", 0, "jsonl"], p
    assert "line 2: context: " in p["detail"] and "control characters or unpaired surrogates" in p["detail"], p
    assert no_jobs(client, auth)


def test_a_task_line_may_hold_tabs_line_ends_and_a_pair(client, auth):
    jsonl = LINE.format("a\\tb\\nc\\r \\ud83d\\ude00 \u00e9")
    r = post(client, auth, body(evaluation={"task_files": [{"name": "t", "jsonl": jsonl}]}))
    assert r.status_code == 201, r.text
