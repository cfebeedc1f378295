"""Bring your own task: records validated, choices scored exactly as given, reported under the stem."""

import json

import pytest
import torch
from eval_helpers import BigramLM
from testkit.models import tiny_tokenizer

from worker.eval.benchmarks.task_file import load_task_file
from worker.eval.harness import run_task
from worker.eval.token_split import encode_pair


def write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_choices_are_scored_as_given_and_metrics_follow_by_hand(tmp_path):
    records = [
        {"context": "2+2=", "choices": ["4", "five", "22"], "label": 0},
        {"context": "The sky is ", "choices": ["blue", "green"], "label": 1},
        {"context": "x", "choices": [" yes", " no, not at all"], "label": 1},
    ]
    task = load_task_file(write(tmp_path / "my_quiz.jsonl", records))
    assert task.name == "my_quiz" and task.metrics == ("acc", "acc_norm")
    assert [d.continuations for d in task.docs] == [tuple(r["choices"]) for r in records]  # no delimiter added

    torch.manual_seed(1)
    model, tok = BigramLM(torch.randn(128, 128) * 3), tiny_tokenizer()
    result = run_task(model, tok, task)

    acc, acc_norm = [], []
    for r in records:  # by hand: Σ log p along each choice, then argmax raw and per character
        lls = []
        for c in r["choices"]:
            ctx, cont = encode_pair(tok, r["context"], c)
            lls.append(model.ll(ctx + cont, len(ctx)))
        acc.append(float(max(range(len(lls)), key=lambda i: lls[i]) == r["label"]))
        norm = [ll / len(c) for ll, c in zip(lls, r["choices"])]
        acc_norm.append(float(max(range(len(norm)), key=lambda i: norm[i]) == r["label"]))
    assert result["n"] == 3
    assert result["acc"] == pytest.approx(sum(acc) / 3) and result["acc_norm"] == pytest.approx(sum(acc_norm) / 3)


def test_limit_and_blank_lines(tmp_path):
    path = tmp_path / "t.jsonl"
    lines = [json.dumps({"context": f"q{i}", "choices": ["a", "b"], "label": i % 2}) for i in range(5)]
    path.write_text("\n".join(lines) + "\n\n")
    assert len(load_task_file(path).docs) == 5
    assert len(load_task_file(path, limit=2).docs) == 2


@pytest.mark.parametrize(
    "record, message",
    [
        ({"context": "q", "choices": ["a", "b"]}, "expected an object"),
        ({"context": 3, "choices": ["a", "b"], "label": 0}, "context must be a string"),
        ({"context": "q", "choices": ["a"], "label": 0}, "at least two"),
        ({"context": "q", "choices": ["a", ""], "label": 0}, "non-empty"),
        ({"context": "q", "choices": ["a", "b"], "label": 2}, "label"),
        ({"context": "q", "choices": ["a", "b"], "label": True}, "label"),
    ],
)
def test_bad_records_are_refused_with_their_line(tmp_path, record, message):
    path = write(tmp_path / "bad.jsonl", [{"context": "ok", "choices": ["a", "b"], "label": 0}, record])
    with pytest.raises(ValueError, match=message) as e:
        load_task_file(path)
    assert "bad.jsonl:2" in str(e.value)


def test_missing_or_empty_file(tmp_path):
    with pytest.raises(ValueError, match="not found"):
        load_task_file(tmp_path / "nope.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(ValueError, match="no records"):
        load_task_file(tmp_path / "empty.jsonl")
    (tmp_path / "junk.jsonl").write_text("{not json\n")
    with pytest.raises(ValueError, match="junk.jsonl:1: not JSON"):
        load_task_file(tmp_path / "junk.jsonl")


def test_contexts_form_scores_the_continuation_after_each_context_by_hand(tmp_path):
    records = [
        {"contexts": ["Sarah beat Maria, so Sarah", "Sarah beat Maria, so Maria"], "continuation": " won.", "label": 0},
        {
            "contexts": ["The pen or the cup: the cup", "The pen or the cup: the pen", "x"],
            "continuation": " leaks",
            "label": 2,
        },
        {"contexts": ["", "a b"], "continuation": " c", "label": 1},
    ]
    task = load_task_file(write(tmp_path / "wino_like.jsonl", records))
    assert task.name == "wino_like" and task.metrics == ("acc",)
    assert task.docs[0].pairs() == [(c, " won.") for c in records[0]["contexts"]]  # continuation as given

    torch.manual_seed(2)
    model, tok = BigramLM(torch.randn(128, 128) * 3), tiny_tokenizer()
    result = run_task(model, tok, task)
    acc = []
    for r in records:  # by hand: Σ log p of the one continuation after each context, argmax over contexts
        lls = []
        for c in r["contexts"]:
            ctx, cont = encode_pair(tok, c, r["continuation"])
            lls.append(model.ll(ctx + cont, len(ctx)))
        acc.append(float(max(range(len(lls)), key=lambda i: lls[i]) == r["label"]))
    assert result["n"] == 3 and result["acc"] == pytest.approx(sum(acc) / 3) and result["acc_norm"] is None


def test_one_file_holds_one_form(tmp_path):
    path = write(
        tmp_path / "mixed.jsonl",
        [
            {"context": "q", "choices": ["a", "b"], "label": 0},
            {"contexts": ["q a", "q b"], "continuation": " c", "label": 0},
        ],
    )
    with pytest.raises(ValueError, match=r"mixed.jsonl:2: .*one file holds one form"):
        load_task_file(path)


@pytest.mark.parametrize(
    "record, message",
    [
        ({"contexts": ["a", "b"], "label": 0}, "expected an object with contexts, continuation, label"),
        ({"contexts": ["a"], "continuation": " c", "label": 0}, "at least two"),
        ({"contexts": ["a", 3], "continuation": " c", "label": 0}, "at least two strings"),
        ({"contexts": ["a", "b"], "continuation": "  ", "label": 0}, "non-blank"),
        ({"contexts": ["a", "b"], "continuation": " c", "label": 2}, "label"),
        ({"contexts": ["a", "b"], "choices": ["x", "y"], "continuation": " c", "label": 0}, "expected an object"),
    ],
)
def test_bad_contexts_records_are_refused_with_their_line(tmp_path, record, message):
    path = write(tmp_path / "bad.jsonl", [{"contexts": ["ok", "fine"], "continuation": " yes", "label": 0}, record])
    with pytest.raises(ValueError, match=message) as e:
        load_task_file(path)
    assert "bad.jsonl:2" in str(e.value)
