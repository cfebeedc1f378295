"""Readers of the shipped evaluation files (under the data directory, NBL_DATA_DIR), each yielding a
task's documents in the Hugging Face schema lm-eval's task configs expect, so one prompt code serves
the local files and lm-eval's own datasets alike.

Two files differ from the Hub copies and are mapped here:
- BoolQ labels are "true"/"false" strings; the Hub's are 1/0.
- HellaSwag has no ctx_a/ctx_b split; lm-eval builds `activity_label: ctx_a ctx_b.capitalize()`.
  The file's `query_lmeval_approx` is that text with the last sentence capitalised, so it becomes
  ctx_a (after the label) with an empty ctx_b. The only difference left from lm-eval: letters after
  the first of ctx_b that capitalize() would lower-case.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

FILES = {
    "arc_easy": "arc_easy/ARC-Easy-test.jsonl",
    "arc_challenge": "arc_challenge/ARC-Challenge-test.jsonl",
    "hellaswag": "hellaswag/hellaswag_val.jsonl",
    "boolq": "boolq/val.jsonl",
    "openbookqa": "openbookqa/test.jsonl",
    "lambada_openai": "lambada_openai/lambada_test.jsonl",
    "mmlu": "mmlu",
}
# The paper's other two tasks: not shipped today, read from the data directory when it holds them (the
# Hub's validation split as JSON lines, the schema of baber/piqa and allenai/winogrande winogrande_xl),
# else from the Hugging Face cache through lm-eval.
OPTIONAL = {
    "piqa": "piqa/validation.jsonl",
    "winogrande": "winogrande/winogrande_xl_validation.jsonl",
}


def present(name: str, root: Path | None) -> bool:
    """Whether the data directory `root` holds task `name`'s data."""
    return root is not None and (name in FILES or (name in OPTIONAL and (Path(root) / OPTIONAL[name]).is_file()))


def read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def read_docs(name: str, root: Path) -> list[dict]:
    """Documents of a single-file task, Hub schema."""
    docs = read_jsonl(root / (FILES.get(name) or OPTIONAL[name]))
    if name == "boolq":
        return [{**d, "label": int(str(d["label"]).lower() == "true")} for d in docs]
    if name == "hellaswag":
        return [_hellaswag(d) for d in docs]
    return docs


def _hellaswag(d: dict) -> dict:
    head = d["activity_label"] + ": "
    query = d["query_lmeval_approx"]
    if not query.startswith(head):
        raise ValueError(f"hellaswag record {d.get('ind_order')}: query does not start with its activity label")
    return {
        "ind": d.get("ind_order"),
        "activity_label": d["activity_label"],
        "ctx_a": query[len(head) :],
        "ctx_b": "",
        "ctx": d["ctx"],
        "endings": d["endings"],
        "label": str(d["label"]),
    }


def mmlu_subjects(root: Path) -> list[str]:
    return sorted(p.name.removesuffix("_test.csv") for p in (root / FILES["mmlu"] / "test").glob("*_test.csv"))


def read_mmlu(root: Path, subject: str, split: str) -> list[dict]:
    """MMLU rows of one subject, split "test" or "dev", as cais/mmlu: question, subject, choices, answer."""
    path = root / FILES["mmlu"] / split / f"{subject}_{split}.csv"
    with open(path, encoding="utf-8", newline="") as f:
        return [
            {
                "question": r["question"],
                "subject": subject,
                "choices": [r["choice0"], r["choice1"], r["choice2"], r["choice3"]],
                "answer": int(r["answer"]),
            }
            for r in csv.DictReader(f)
        ]
