"""What text the service takes in, beyond a field's own grammar.

Free text (a metadata value, a task file's lines) holds no control character but tab and the line ends:
Postgres stores no NUL, and the rest only corrupt a log line or a terminal. Nor an unpaired surrogate
(U+D800..U+DFFF alone: a JSON `\\ud800` escape decodes to one): it is no character, UTF-8 cannot
encode it, so a tokenizer, a database driver or Fernet raises on it far from the request.

A secret (a Hub token) is narrower, visible ASCII: what the Hub issues, and what an HTTP header carries.
Validators raise ValueError, so bad input is a 422 (the API) or an exit 2 (the CLI).
"""

from __future__ import annotations

import re

_NOT_PLAIN = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")
_VISIBLE_ASCII = re.compile(r"[\x21-\x7e]+")
NOT_PLAIN = "text may not contain control characters or unpaired surrogates"


def is_plain(text: str) -> bool:
    return _NOT_PLAIN.search(text) is None


def plain_text(text: str) -> str:
    if not is_plain(text):
        raise ValueError(NOT_PLAIN)
    return text


def secret_token(value: str) -> str:
    """A Hub token: visible ASCII only (no space, control or format character, nothing beyond ASCII). The
    message never quotes it."""
    if not _VISIBLE_ASCII.fullmatch(value):
        raise ValueError("a Hub token is visible ASCII only (no spaces, control characters or other text)")
    return value
