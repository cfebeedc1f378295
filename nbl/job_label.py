"""How a job is named to people: its recipe in words (mode, method, output form, k, criterion) and a label
(the request's metadata `name`, else model + recipe), shared by the dashboard and the `nbl` client.

The words come from the Recipe the worker would run (stored request -> JobCreate -> Recipe, the one
conversion), so a default is shown as what it is ("nbl" form) and `k: 4` reads as `[4]` does. A stored
request an older release accepted and this one refuses is read field by field, with the same defaults.
Torch-free, pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from nbl import recipe as R
from nbl.request import JobCreate

NAME_KEY = "name"  # the metadata key a person names a job with


def normalised(spec: Mapping[str, Any] | None) -> R.Recipe | None:
    """The Recipe of a stored request (every default filled in), or None when this release refuses it."""
    try:
        return R.from_request(JobCreate.model_validate(dict(spec or {})))
    except (ValidationError, TypeError, ValueError):
        return None


def k_text(ks, auto: bool = False) -> str:
    """(2, 4) -> "2,4"; k auto (no ks) -> "auto"."""
    return "auto" if auto or not ks else ",".join(map(str, ks))


def words(spec: Mapping[str, Any] | None) -> dict[str, str]:
    """{"model", "mode", "method", "form", "k", "criterion"} of a job's stored request."""
    recipe = normalised(spec)
    if recipe is not None:
        c = recipe.compression
        return {
            "model": recipe.model,
            "mode": c.mode,
            "method": c.method,
            "form": c.form,
            "k": k_text(c.ks),
            "criterion": c.criterion,
        }
    spec = spec or {}
    comp = spec.get("compression") or {}
    k = comp.get("k")
    ks = [] if k == "auto" or k is None else k if isinstance(k, list) else [k]
    return {
        "model": str((spec.get("model") or {}).get("id") or ""),
        "mode": comp.get("mode") or R.MODE,
        "method": comp.get("method") or R.METHOD,
        "form": comp.get("form") or R.FORM,
        "k": k_text(ks),
        "criterion": comp.get("criterion") or R.CRITERION,
    }


def summary(w: Mapping[str, str]) -> str:
    """One line of a recipe: "attn · nbl · linear form · k=2,4 · cca". The method and the form are both
    named: "nbl" alone was read as the form of a linear job."""
    return f"{w['mode']} · {w['method']} · {w['form']} form · k={w['k']} · {w['criterion']}"


def short_model(model: str) -> str:
    """ "HuggingFaceTB/SmolLM2-135M-Instruct" -> "SmolLM2-135M-Instruct"; a local:NAME stays itself."""
    return model.rsplit("/", 1)[-1]


def label(spec: Mapping[str, Any] | None, metadata: Mapping[str, Any] | None = None) -> str:
    """A job's name for people: metadata `name` if given, else "SmolLM2-135M-Instruct · attn k=2,4 · linear form"."""
    named = str((metadata or {}).get(NAME_KEY) or "").strip()
    if named:
        return named
    w = words(spec)
    return f"{short_model(w['model'])} · {w['mode']} k={w['k']} · {w['form']} form"
