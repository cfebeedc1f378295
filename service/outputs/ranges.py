"""HTTP Range for one file (RFC 9110 section 14): one range of bytes, so a download can resume.

    byte_range("bytes=0-99", 1000)   -> (0, 99)      first bytes
    byte_range("bytes=500-", 1000)   -> (500, 999)   from an offset (a resume)
    byte_range("bytes=-100", 1000)   -> (900, 999)   the last 100 bytes
    byte_range("bytes=1000-", 1000)  -> Unsatisfiable (416)

What the RFC lets a server ignore is ignored, and the whole file is served (200): a header that
does not parse, a unit other than bytes, several ranges (multipart answers are not worth their
weight here), and an If-Range that does not match the current ETag (the file changed: start over).

A position may have any number of digits (the grammar sets no bound): one past the file's size
is read as "the end" (section 14.1.2: a last-pos at or past the end means the remainder; a suffix
longer than the file means all of it), without converting thousands of digits to an int, which
Python refuses past 4,300 digits (was a 500).
"""

from __future__ import annotations

import re

_RANGE = re.compile(r"bytes=([0-9]*)-([0-9]*)")  # ASCII digits only (\d would take any script's)


class Unsatisfiable(Exception):
    """No byte of the file is in the range: 416 with `Content-Range: bytes */SIZE`."""


def _at_most(digits: str, size: int) -> int:
    """The number the digits spell, or `size` when it is larger (compared by length first)."""
    digits = digits.lstrip("0") or "0"
    return size if len(digits) > len(str(size)) else min(int(digits), size)


def _less(a: str, b: str) -> bool:
    """a < b for two digit strings of any length."""
    a, b = a.lstrip("0") or "0", b.lstrip("0") or "0"
    return (len(a), a) < (len(b), b)


def byte_range(header: str | None, size: int, *, if_range: str | None = None, etag: str = "") -> tuple[int, int] | None:
    """The inclusive (first, last) byte to send, or None for the whole file."""
    if not header or (if_range is not None and if_range.strip() != etag):
        return None
    m = _RANGE.fullmatch(header.strip())
    if not m or (not m[1] and not m[2]):
        return None  # not understood, or several ranges: ignored
    if not m[1]:  # suffix: the last N bytes
        n = _at_most(m[2], size)
        if n == 0 or size == 0:
            raise Unsatisfiable
        return size - n, size - 1
    if m[2] and _less(m[2], m[1]):
        return None  # last before first: invalid, ignored
    first = _at_most(m[1], size)
    if first >= size:
        raise Unsatisfiable
    return first, _at_most(m[2], size - 1) if m[2] else size - 1
