"""Bring your own task: a JSONL file (or a job's inline text of one), each line in one of two forms,
one form per file; the format and its checks are nbl/data/task_records.py, shared with the API.

- Choices: {"context": str, "choices": [str], "label": int}. Each choice is scored as a continuation
  of the context exactly as given (no delimiter added; put the space in the choice or at the end of
  the context, lm-eval moves trailing context whitespace into the continuation anyway). acc and
  acc_norm (normalised by the choice's character length) are reported.
- Contexts: {"contexts": [str], "continuation": str, "label": int}, scored as lm-eval scores
  `multiple_input` tasks (WinoGrande): the log-likelihood of the one continuation, exactly as given
  (leading space included), after each context; the label is the index of the right context. acc
  only, as lm-eval reports for WinoGrande.

Either way the results are reported under the file's stem.
"""

from __future__ import annotations

from pathlib import Path

from nbl.data.task_records import CHOICES, CONTEXTS, METRICS, parse_lines

from .task import MULTIPLE_CHOICE, Doc, Task, multiple_input_doc

__all__ = ["CHOICES", "CONTEXTS", "METRICS", "load_task_file", "task_of_records"]


def doc_of(form: str, record: dict) -> Doc:
    """A checked record (parse_lines) as the document the scorer reads."""
    if form == CONTEXTS:
        return multiple_input_doc(record["contexts"], record["continuation"], record["label"])
    choices = record["choices"]
    return Doc(record["context"], tuple(choices), record["label"], tuple(len(c) for c in choices))


def task_of_records(name: str, form: str, records: list[dict]) -> Task:
    return Task(name, MULTIPLE_CHOICE, tuple(doc_of(form, r) for r in records), METRICS[form])


def load_task_file(path: str | Path, limit: int | None = None) -> Task:
    path = Path(path).expanduser()
    if not path.is_file():
        raise ValueError(f"task file not found: {path}")
    with open(path, encoding="utf-8") as f:
        form, records = parse_lines(f, lambda n: f"{path}:{n}", limit)
    if form is None:
        raise ValueError(f"{path}: no records")
    return task_of_records(path.stem, form, records)
