"""Bring your own task: a JSONL file of {"context": str, "choices": [str], "label": int}.

Each choice is scored as a continuation of the context exactly as given (no delimiter added; put the
space in the choice or at the end of the context, lm-eval moves trailing context whitespace into the
continuation anyway). acc and acc_norm (normalised by the choice's character length) are reported
under the file's stem.
"""

from __future__ import annotations

import json
from pathlib import Path

from .task import MULTIPLE_CHOICE, Doc, Task


def parse_record(record: object, where: str) -> Doc:
    if not isinstance(record, dict) or not {"context", "choices", "label"} <= set(record):
        raise ValueError(f"{where}: expected an object with context, choices, label")
    context, choices, label = record["context"], record["choices"], record["label"]
    if not isinstance(context, str):
        raise ValueError(f"{where}: context must be a string")
    if not isinstance(choices, list) or len(choices) < 2 or not all(isinstance(c, str) and c for c in choices):
        raise ValueError(f"{where}: choices must be a list of at least two non-empty strings")
    if isinstance(label, bool) or not isinstance(label, int) or not 0 <= label < len(choices):
        raise ValueError(f"{where}: label must be an integer index into choices")
    return Doc(context, tuple(choices), label, tuple(len(c) for c in choices))


def load_task_file(path: str | Path, limit: int | None = None) -> Task:
    path = Path(path).expanduser()
    if not path.is_file():
        raise ValueError(f"task file not found: {path}")
    docs = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not JSON ({e.msg})") from e
            docs.append(parse_record(record, f"{path}:{n}"))
            if limit is not None and len(docs) >= limit:
                break
    if not docs:
        raise ValueError(f"{path}: no records")
    return Task(path.stem, MULTIPLE_CHOICE, tuple(docs), ("acc", "acc_norm"))
