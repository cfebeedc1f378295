"""The task-file format (a user's own evaluation task), checked without torch: the API validates a
job's task files with it at submit, so a malformed file is a 422 naming its line, and the worker and
`nbl eval --task-file` build the task from the same parse (worker/eval/benchmarks/task_file.py).

Each non-blank line is a JSON object in one of two forms; one file holds one form:

- choices:  {"context": str, "choices": [str, ...], "label": int}, each choice scored after the
  context exactly as given; acc and acc_norm.
- contexts: {"contexts": [str, ...], "continuation": str, "label": int}, lm-eval's `multiple_input`
  (WinoGrande): the one continuation scored, as given, after each context; acc only (acc_norm would
  divide by the contexts' lengths, which says nothing about the continuation).

Every string a line holds is plain text (nbl/plain_text.py): a `\\ud800` escape decodes to an unpaired
surrogate, which the tokenizer cannot encode (the job failed at evaluate, as `system`), and a `\\u0007`
to a control character; either is the line's error.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterable

from nbl.plain_text import NOT_PLAIN, is_plain

CHOICES, CONTEXTS = "choices", "contexts"
METRICS = {CHOICES: ("acc", "acc_norm"), CONTEXTS: ("acc",)}
EXPECTED = "expected an object with context, choices, label or one with contexts, continuation, label"


def record_form(record: object, where: str) -> str:
    if isinstance(record, dict) and CONTEXTS in record and CHOICES not in record:
        return CONTEXTS
    if isinstance(record, dict) and CHOICES in record and CONTEXTS not in record:
        return CHOICES
    raise ValueError(f"{where}: {EXPECTED}")


def check_label(record: dict, n: int, what: str, where: str) -> int:
    label = record["label"]
    if isinstance(label, bool) or not isinstance(label, int) or not 0 <= label < n:
        raise ValueError(f"{where}: label must be an integer index into {what}")
    return label


def check_choices(record: dict, where: str) -> None:
    if not {"context", "choices", "label"} <= set(record):
        raise ValueError(f"{where}: expected an object with context, choices, label")
    context, choices = record["context"], record["choices"]
    if not isinstance(context, str):
        raise ValueError(f"{where}: context must be a string")
    if not isinstance(choices, list) or len(choices) < 2 or not all(isinstance(c, str) and c for c in choices):
        raise ValueError(f"{where}: choices must be a list of at least two non-empty strings")
    check_label(record, len(choices), "choices", where)


def check_contexts(record: dict, where: str) -> None:
    if not {"contexts", "continuation", "label"} <= set(record):
        raise ValueError(f"{where}: expected an object with contexts, continuation, label")
    contexts, continuation = record["contexts"], record["continuation"]
    if not isinstance(contexts, list) or len(contexts) < 2 or not all(isinstance(c, str) for c in contexts):
        raise ValueError(f"{where}: contexts must be a list of at least two strings")
    if not isinstance(continuation, str) or not continuation.strip():
        raise ValueError(f"{where}: continuation must be a non-blank string")
    check_label(record, len(contexts), "contexts", where)


def check_text(record: dict, where: str) -> None:
    """Every string of the record, keys too, is plain text; the error names the first field that is not."""
    stack: list[tuple[str, object]] = [("", record)]
    while stack:  # without recursion: a line may nest as deep as the decoder goes
        path, value = stack.pop()
        if isinstance(value, str) and not is_plain(value):
            raise ValueError(f"{where}: {path}: {NOT_PLAIN}")
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        for key, item in reversed(list(items)):  # reversed: the first field is checked first
            if isinstance(key, str) and not is_plain(key):
                raise ValueError(f"{where}: a key{f' in {path}' if path else ''}: {NOT_PLAIN}")
            stack.append((f"{path}.{key}" if path else str(key), item))


def text_lines(text: str) -> Iterable[str]:
    """A task file's text as lines, split as reading the file splits them (universal newlines), so a
    line number means the same line to the API and to `nbl eval --task-file`."""
    return io.StringIO(text, newline=None)


def parse_lines(
    lines: Iterable[str], where: Callable[[int], str], limit: int | None = None
) -> tuple[str | None, list[dict]]:
    """(form, records) of a task file's lines, every record checked, at most `limit`; (None, []) when
    there is none. `where(n)` names line n in an error (`path:3` for a file, `line 3` for a job's).
    Raises ValueError on the first bad line and on a line of the other form."""
    form, records = None, []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{where(n)}: not JSON ({e.msg})") from None
        except RecursionError:  # nested past the decoder's bound: a ValueError (a 422), not a crash
            raise ValueError(f"{where(n)}: not a record: JSON nested too deep") from None
        this = record_form(record, where(n))
        if form is not None and this != form:
            raise ValueError(
                f"{where(n)}: a {this!r} record in a file of {form!r} records; "
                "one file holds one form (split it in two)"
            )
        form = this
        (check_contexts if form == CONTEXTS else check_choices)(record, where(n))
        check_text(record, where(n))
        records.append(record)
        if limit is not None and len(records) >= limit:
            break
    return form, records
