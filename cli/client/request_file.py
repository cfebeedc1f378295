"""Reading what `nbl submit` sends: a job request file (YAML or JSON, `-` for stdin) and task files,
each bounded before it is parsed, so that no file can make the CLI hang, blow up or print a traceback.

- Size: at most MAX_FILE_BYTES of a request file, MAX_TASK_FILE_BYTES of a task file (`/dev/zero`
  or a wrong file is an error, not a hang).
- Depth: at most MAX_DEPTH nested mappings/lists (a job request is 4 deep); JSON nested thousands
  deep used to raise RecursionError.
- YAML aliases (`*name`, also in `<<: *name`) are refused before anything is built: a handful of
  anchors referring to each other ("billion laughs") expand exponentially when the request is
  serialised. YAML is read with the safe loader, so a tag such as `!!python/object` is an error.
- JSON values only: YAML also builds dates (an unquoted 2001-01-01), bytes (!!binary) and sets (!!set),
  and both syntaxes a NaN or an infinity, none of which the request's JSON can carry (they were a
  TypeError traceback when the body was sent); the error names the key, and a date can be quoted.

Every problem is a ValueError of one line naming the file, which `nbl` prints as `nbl: error: ...`
with exit 2.
"""

from __future__ import annotations

import datetime
import json
import math
import sys
from pathlib import Path
from typing import Any

MAX_FILE_BYTES = 1 << 20  # a job request is a few hundred bytes
MAX_TASK_FILE_BYTES = 16 << 20  # far above the API's default request bound (NBL_MAX_REQUEST_BYTES, 64 KiB)
MAX_DEPTH = 32


def read_text(path: Path, limit: int, what: str) -> str:
    """At most `limit` bytes of the file (or stdin for `-`), as UTF-8 text; more is an error."""
    try:
        if str(path) == "-":
            stream = getattr(sys.stdin, "buffer", None)
            data = stream.read(limit + 1) if stream else sys.stdin.read(limit + 1).encode()
        else:
            with open(path, "rb") as f:
                data = f.read(limit + 1)
        if len(data) > limit:
            raise ValueError(f"{path}: over {limit} bytes; {what}")
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not UTF-8 text") from None
    except OSError as e:
        raise ValueError(f"{path}: cannot read it: {e.strerror or e}") from None


def load_mapping(path: Path) -> dict[str, Any]:
    """The request file as a dict: JSON when it ends in .json, else YAML (of which JSON is a part)."""
    text = read_text(path, MAX_FILE_BYTES, "a job request is a small YAML or JSON mapping")
    loaded = _load_json(path, text) if path.suffix.lower() == ".json" else _load_yaml(path, text)
    if not isinstance(loaded, dict):
        raise ValueError(f"{path}: expected a mapping (the job request body), got {type(loaded).__name__}")
    _refuse_non_json(path, loaded)
    return loaded


def _is_json_scalar(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, (str, int, bool))


def _what(value: Any) -> str:
    """A value JSON has no form for, and what to write instead."""
    if isinstance(value, datetime.date):  # a datetime is a date too
        kind = "timestamp" if isinstance(value, datetime.datetime) else "date"
        return f"a YAML {kind} ({value}) is not a JSON value; quote it to send it as text"
    names = {bytes: "a YAML binary value (!!binary)", set: "a YAML set (!!set)", float: str(value)}
    return f"{names.get(type(value), 'a YAML ' + type(value).__name__)} is not a JSON value" + (
        "; write a list" if isinstance(value, set) else ""
    )


def _refuse_non_json(path: Path, doc: dict) -> None:
    """Every key and value is one JSON has (json.dumps turns int, float, bool and None keys into text, as
    the API reads them); the error names the first other by its key path (`metadata.a`)."""
    stack: list[tuple[str, Any]] = [("", doc)]
    while stack:  # depth first, in the file's order, without recursion (MAX_DEPTH bounds it anyway)
        where, value = stack.pop()
        if isinstance(value, dict):
            for key in value:
                if not _is_json_scalar(key):
                    raise ValueError(f"{path}: {where or 'the top level'}: a key: {_what(key)}")
            stack.extend((f"{where}.{k}" if where else str(k), v) for k, v in reversed(value.items()))
        elif isinstance(value, (list, tuple)):  # a tuple: !!omap and !!pairs entries, sent as lists
            stack.extend((f"{where}.{i}", v) for i, v in reversed(list(enumerate(value))))
        elif not _is_json_scalar(value):
            raise ValueError(f"{path}: {where}: {_what(value)}")


def _too_deep(path: Path) -> ValueError:
    return ValueError(f"{path}: nested deeper than {MAX_DEPTH} levels; a job request is a few levels deep")


def _load_json(path: Path, text: str) -> Any:
    try:
        loaded = json.loads(text)
    except RecursionError:  # the C decoder's own bound (the recursion limit): deeper than ours anyway
        raise _too_deep(path) from None
    except ValueError as e:
        raise ValueError(f"{path}: not valid JSON: {e}") from None
    if _depth(loaded) > MAX_DEPTH:
        raise _too_deep(path)
    return loaded


def _depth(value: Any) -> int:
    """How deeply lists and dicts nest in `value` (a scalar: 0), without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, level + 1)
            stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def _load_yaml(path: Path, text: str) -> Any:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's when built with it: 10x faster
    try:
        _check_events(yaml, yaml.parse(text, Loader=loader))  # aliases and depth, before anything is built
        return yaml.load(text, Loader=loader)  # noqa: S506 (a safe loader: a tag never builds an object)
    except _Refused as e:
        raise ValueError(f"{path}: {e.args[0]}{_where(e.mark)}") from None
    except yaml.YAMLError as e:
        problem = getattr(e, "problem", None) or str(e)
        raise ValueError(
            f"{path}: not valid YAML or JSON: {' '.join(problem.split())}{_where(getattr(e, 'problem_mark', None))}"
        ) from None
    except ValueError as e:  # a value the safe constructor cannot build (an int of 5,000 digits)
        raise ValueError(f"{path}: not valid YAML or JSON: {' '.join(str(e).split())}") from None


def _check_events(yaml, events) -> None:
    """The parser's events (it is iterative; only composing recurses): no alias, at most MAX_DEPTH deep."""
    depth = 0
    for event in events:
        if isinstance(event, yaml.AliasEvent):
            raise _Refused(f"YAML aliases (*{event.anchor}) are not accepted: write the value out", event.start_mark)
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise _Refused(
                    f"nested deeper than {MAX_DEPTH} levels; a job request is a few levels deep", event.start_mark
                )
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


class _Refused(Exception):
    def __init__(self, message: str, mark):
        super().__init__(message)
        self.mark = mark


def _where(mark) -> str:
    return f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
