"""Bring your own task: a JSONL file, each line in one of two forms (one form per file).

- Choices: {"context": str, "choices": [str], "label": int}. Each choice is scored as a continuation
  of the context exactly as given (no delimiter added; put the space in the choice or at the end of
  the context, lm-eval moves trailing context whitespace into the continuation anyway). acc and
  acc_norm (normalised by the choice's character length) are reported.
- Contexts: {"contexts": [str], "continuation": str, "label": int}, scored as lm-eval scores
  `multiple_input` tasks (WinoGrande): the log-likelihood of the one continuation, exactly as given
  (leading space included), after each context; the label is the index of the right context. acc
  only, as lm-eval reports for WinoGrande (acc_norm would divide by the contexts' lengths, which
  says nothing about the continuation).

Either way the results are reported under the file's stem.
"""

from __future__ import annotations

import json
from pathlib import Path

from .task import MULTIPLE_CHOICE, Doc, Task, multiple_input_doc

CHOICES, CONTEXTS = "choices", "contexts"
METRICS = {CHOICES: ("acc", "acc_norm"), CONTEXTS: ("acc",)}


def record_form(record: object, where: str) -> str:
    if isinstance(record, dict) and CONTEXTS in record and CHOICES not in record:
        return CONTEXTS
    if isinstance(record, dict) and CHOICES in record and CONTEXTS not in record:
        return CHOICES
    raise ValueError(f"{where}: expected an object with context, choices, label "
                     "or one with contexts, continuation, label")


def _label(record: dict, n: int, what: str, where: str) -> int:
    label = record["label"]
    if isinstance(label, bool) or not isinstance(label, int) or not 0 <= label < n:
        raise ValueError(f"{where}: label must be an integer index into {what}")
    return label


def parse_record(record: object, where: str) -> Doc:
    form = record_form(record, where)
    assert isinstance(record, dict)
    return parse_contexts_record(record, where) if form == CONTEXTS else parse_choices_record(record, where)


def parse_choices_record(record: dict, where: str) -> Doc:
    if not {"context", "choices", "label"} <= set(record):
        raise ValueError(f"{where}: expected an object with context, choices, label")
    context, choices = record["context"], record["choices"]
    if not isinstance(context, str):
        raise ValueError(f"{where}: context must be a string")
    if not isinstance(choices, list) or len(choices) < 2 or not all(isinstance(c, str) and c for c in choices):
        raise ValueError(f"{where}: choices must be a list of at least two non-empty strings")
    return Doc(context, tuple(choices), _label(record, len(choices), "choices", where), tuple(len(c) for c in choices))


def parse_contexts_record(record: dict, where: str) -> Doc:
    if not {"contexts", "continuation", "label"} <= set(record):
        raise ValueError(f"{where}: expected an object with contexts, continuation, label")
    contexts, continuation = record["contexts"], record["continuation"]
    if not isinstance(contexts, list) or len(contexts) < 2 or not all(isinstance(c, str) for c in contexts):
        raise ValueError(f"{where}: contexts must be a list of at least two strings")
    if not isinstance(continuation, str) or not continuation.strip():
        raise ValueError(f"{where}: continuation must be a non-blank string")
    return multiple_input_doc(contexts, continuation, _label(record, len(contexts), "contexts", where))


def load_task_file(path: str | Path, limit: int | None = None) -> Task:
    path = Path(path).expanduser()
    if not path.is_file():
        raise ValueError(f"task file not found: {path}")
    docs, form = [], None
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{n}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{where}: not JSON ({e.msg})") from e
            this = record_form(record, where)
            if form is not None and this != form:
                raise ValueError(f"{where}: a {this!r} record in a file of {form!r} records; "
                                 "one file holds one form (split it in two)")
            form = this
            docs.append(parse_record(record, where))
            if limit is not None and len(docs) >= limit:
                break
    if not docs:
        raise ValueError(f"{path}: no records")
    return Task(path.stem, MULTIPLE_CHOICE, tuple(docs), METRICS[form])  # type: ignore[index]
