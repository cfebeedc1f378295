"""The name grammars: a model is a Hub repo id or `local:NAME` (NAME under NBL_MODELS_DIR), a local
publish target a simple NAME, a revision a git ref. Names are checked, never resolved: paths, URLs and
`..` do not get through. The API's request schemas (nbl/request.py) and the directory rules
(service/core/paths.py) both read them here. Validators raise ValueError, so bad input is a 422."""

from __future__ import annotations

import re

HUB_PART = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?")
SIMPLE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,126}[A-Za-z0-9])?")
REVISION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,254}")
LOCAL_PREFIX = "local:"


def hub_id(value: str, *, need_owner: bool = False) -> str:
    """The Hugging Face Hub's repo-id grammar: `[owner/]name`, parts of [A-Za-z0-9._-], no leading
    or trailing separator, no `--` or `..`, no `.git` suffix, at most 96 characters a part."""
    parts = value.split("/")
    if len(parts) > 2 or (need_owner and len(parts) != 2):
        raise ValueError(
            "expected a Hub repo id `owner/name`"
            if need_owner
            else "expected a Hub repo id `owner/name` (or `local:NAME` for a model under NBL_MODELS_DIR)"
        )
    for part in parts:
        if not HUB_PART.fullmatch(part) or "--" in part or ".." in part or part.endswith(".git"):
            raise ValueError(
                f"{value!r} is not a valid Hub repo id: parts use A-Z a-z 0-9 . _ -, "
                "start and end with a letter or digit, no '--' or '..'"
            )
    return value


def simple_name(value: str) -> str:
    if not SIMPLE.fullmatch(value) or ".." in value:
        raise ValueError(f"{value!r} is not a simple name (A-Z a-z 0-9 . _ -, at most 128 characters, no paths)")
    return value


def model_id(value: str) -> str:
    if value.startswith(LOCAL_PREFIX):
        simple_name(value[len(LOCAL_PREFIX) :])
        return value
    return hub_id(value)


def revision(value: str) -> str:
    """A git ref name or commit (git check-ref-format): no `..`, `//`, component starting with `.`
    or ending in `.lock`, no trailing `/` or `.`; the character set leaves out `@{ ~^:?*[\\` and spaces."""
    parts = value.split("/")
    if (
        not REVISION.fullmatch(value)
        or ".." in value
        or "//" in value
        or value.endswith(("/", "."))
        or any(p.startswith(".") or p.endswith(".lock") for p in parts)
    ):
        raise ValueError(f"{value!r} is not a valid revision (a branch, tag or commit)")
    return value
