"""The compare page's "Recipe differences": the fields whose values differ between jobs' requests, after each
request is normalised into the Recipe the worker runs (nbl/job_label.py `normalised`).

Diffing the stored JSON showed false differences: `k` 4 against [4], a `form` left out (so "—") against
linear although both ran "nbl" and linear, `overwrite` False against a request stored before the field
existed. Through the Recipe every default is filled in and every k is a tuple, so only what the worker
would do differently is a row. A section one job has and another lacks (publishing, gates, a selection
set) is a row only for fields that job set away from their defaults: publishing to a directory is a
difference, its `overwrite: false` is not. Pure: stored requests in, rows out.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import MISSING, fields, is_dataclass
from typing import Any

from nbl.job_label import k_text, normalised

_NO_DEFAULT = object()
_SKIP = {"request"}  # the Recipe's copy of the request itself (metadata, webhook): not how the job runs


def _default(f) -> Any:
    if f.default is not MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not MISSING else _NO_DEFAULT


def leaves(obj: Any, prefix: str = "") -> Iterator[tuple[str, Any, Any]]:
    """(path, value, the field's default) of a Recipe's leaves: "compression.ks", (4,), no default."""
    for f in fields(obj):
        if f.name in _SKIP:
            continue
        path, value = f"{prefix}{f.name}", getattr(obj, f.name)
        if is_dataclass(value):
            yield from leaves(value, path + ".")
        elif isinstance(value, Mapping):  # gates: one row per corpus or task
            for key, v in value.items():
                yield f"{path}.{key}", v, _NO_DEFAULT
        elif f.name == "task_texts":  # a task file by its name and digest, not its text
            yield path, tuple(f"{n} ({hashlib.sha256(t.encode()).hexdigest()[:12]})" for n, t in value), ()
        else:
            yield path, value, _default(f)


def _raw(spec: Mapping, prefix: str = "") -> dict[str, Any]:
    """A request this release refuses, flattened as stored ({"a": {"b": 1}} -> {"a.b": 1})."""
    out: dict[str, Any] = {}
    for k, v in spec.items():
        if prefix or k != "metadata":
            out.update(_raw(v, f"{prefix}{k}.") if isinstance(v, Mapping) else {f"{prefix}{k}": v})
    return out


def text(path: str, value: Any) -> str:
    if value is None:
        return "—"
    if path == "compression.ks" and not value:
        return k_text(value)  # k auto: the worker picks the ks
    if isinstance(value, str):
        return value
    return json.dumps(list(value) if isinstance(value, tuple) else value)


def request_diff(specs: list[Mapping]) -> list[dict]:
    """[{"field", "values"}] for the fields that differ, in the Recipe's order; values as text, "—" where a
    job's request has no such field."""
    recipes = [normalised(s) for s in specs]
    defaults: dict[str, Any] = {}
    if all(r is not None for r in recipes):
        flat = []
        for r in recipes:
            found = {}
            for path, value, default in leaves(r):
                found[path] = value
                defaults.setdefault(path, default)
            flat.append(found)
    else:  # compare as stored: better a false difference than a page that fails
        flat = [_raw(s) for s in specs]
    order = list(dict.fromkeys(p for f in flat for p in f))
    rows = []
    for path in order:
        values = [f.get(path, _NO_DEFAULT) for f in flat]
        present = [v for v in values if v is not _NO_DEFAULT]
        if len(present) < len(values):  # a section some jobs lack: a difference only where set on purpose
            differs = any(v != defaults.get(path, _NO_DEFAULT) for v in present)
        else:
            differs = any(v != present[0] for v in present)
        if differs:
            rows.append({"field": path, "values": ["—" if v is _NO_DEFAULT else text(path, v) for v in values]})
    return rows
