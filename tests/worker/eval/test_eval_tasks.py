"""Every shipped task loads in full from the data directory (NBL_DATA_DIR), in lm-eval's prompt format."""

import json

import pytest
from eval_helpers import DATA_DIR

from worker.eval.benchmarks import local_data
from worker.eval.benchmarks.registry import load_task
from worker.eval.benchmarks.task import LOGLIKELIHOOD, MULTIPLE_CHOICE

COUNTS = {
    "arc_easy": 2376,
    "arc_challenge": 1172,
    "hellaswag": 10042,
    "boolq": 3270,
    "openbookqa": 500,
    "lambada_openai": 5153,
    "mmlu": 14042,
}


@pytest.mark.parametrize("name", sorted(COUNTS))
def test_every_shipped_task_yields_its_full_count(name):
    task = load_task(name, data_dir=DATA_DIR)
    assert task.name == name and len(task.docs) == COUNTS[name]
    for d in task.docs:
        assert d.context and 0 <= d.label < len(d.continuations) == len(d.choice_lengths)
    assert task.kind == (LOGLIKELIHOOD if name == "lambada_openai" else MULTIPLE_CHOICE)


def test_limit_takes_the_first_documents():
    full = load_task("arc_easy", data_dir=DATA_DIR)
    assert load_task("arc_easy", limit=7, data_dir=DATA_DIR).docs == full.docs[:7]


def test_mmlu_limit_is_per_subject_and_5_shot():
    subjects = local_data.mmlu_subjects(DATA_DIR)
    assert len(subjects) == 57
    task = load_task("mmlu", limit=2, data_dir=DATA_DIR)
    assert len(task.docs) == 2 * 57 and task.metrics == ("acc",)
    doc = task.docs[0]  # first test question of the first subject, after its first 5 dev questions
    dev = local_data.read_mmlu(DATA_DIR, subjects[0], "dev")
    test = local_data.read_mmlu(DATA_DIR, subjects[0], "test")
    assert doc.context.startswith(
        f"The following are multiple choice questions (with answers) about "
        f"{subjects[0].replace('_', ' ')}.\n\n{dev[0]['question'].strip()}\nA. "
    )
    assert len(dev) == 5 and doc.context.count("\nAnswer:") == 6
    for shot in dev:  # each dev question, answered with its letter
        c = shot["choices"]
        answered = (
            f"{shot['question'].strip()}\nA. {c[0]}\nB. {c[1]}\nC. {c[2]}\nD. {c[3]}\n"
            f"Answer: {'ABCD'[shot['answer']]}\n\n"
        )
        assert answered in doc.context
    assert doc.context.endswith(f"D. {test[0]['choices'][3]}\nAnswer:")
    assert doc.continuations == (" A", " B", " C", " D") and doc.label == test[0]["answer"]


def test_arc_prompt_and_label_follow_the_file():
    raw = json.loads((DATA_DIR / "arc_easy" / "ARC-Easy-test.jsonl").read_text().splitlines()[0])
    doc = load_task("arc_easy", limit=1, data_dir=DATA_DIR).docs[0]
    assert doc.context == f"Question: {raw['question']}\nAnswer:"
    assert doc.continuations == tuple(" " + t for t in raw["choices"]["text"])
    assert doc.choice_lengths == tuple(len(t) for t in raw["choices"]["text"])  # no delimiter in acc_norm
    assert raw["choices"]["label"][doc.label] == raw["answerKey"]


def test_boolq_labels_map_true_to_yes():
    raws = [json.loads(x) for x in (DATA_DIR / "boolq" / "val.jsonl").read_text().splitlines()[:20]]
    docs = load_task("boolq", limit=20, data_dir=DATA_DIR).docs
    for raw, doc in zip(raws, docs):
        assert doc.continuations == (" no", " yes")
        assert doc.label == (1 if raw["label"] == "true" else 0)
        assert doc.context.endswith(f"\nQuestion: {raw['question']}?\nAnswer:")


def test_lambada_target_is_the_last_word():
    raw = json.loads((DATA_DIR / "lambada_openai" / "lambada_test.jsonl").read_text().splitlines()[0])["text"]
    doc = load_task("lambada_openai", limit=1, data_dir=DATA_DIR).docs[0]
    assert doc.context + doc.continuations[0] == raw and doc.continuations[0] == " " + raw.split(" ")[-1]


def test_hellaswag_query_is_lm_evals_approximation():
    raw = json.loads((DATA_DIR / "hellaswag" / "hellaswag_val.jsonl").read_text().splitlines()[0])
    doc = load_task("hellaswag", limit=1, data_dir=DATA_DIR).docs[0]
    assert doc.context == raw["query_lmeval_approx"] and doc.label == raw["label"]
    assert doc.continuations == tuple(" " + e for e in raw["endings"])
